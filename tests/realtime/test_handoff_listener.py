"""The hand-off listener and the relay receive on the same Redis layer from two event loops, both at once.

The listener (:func:`agent_persistence.realtime.handoffs.claim_handed_off_turns`) runs on the
reaper's loop, the relay on the server's. channels-redis lets one event loop at a time receive
on a layer instance: on the process's shared instance, whichever came second failed ("Two event
loops are trying to receive() on one channel layer at once!") and they kept knocking each other
off, so followers fell back to reading the recording and announcements went unheard (found by the
rolling-restart test: stalls of seconds). The listener now receives on an instance of its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

import pytest
from channels.layers import get_channel_layer
from django.test import override_settings

from agent_persistence.realtime.handoffs import claim_handed_off_turns

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL") and not os.environ.get("CI"), reason="REDIS_URL is not set")


async def test_the_listener_on_another_loop_leaves_the_shared_layer_free_to_receive(caplog: pytest.LogCaptureFixture) -> None:
    if not os.environ.get("REDIS_URL"):
        pytest.fail("CI is set but REDIS_URL is not: the Redis variant must run in CI.")
    layers = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                          "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": 30}]}}}
    caplog.set_level(logging.WARNING, logger="agent_persistence")
    with override_settings(CHANNEL_LAYERS=layers):
        listening = asyncio.Event()
        reaper_loop = asyncio.new_event_loop()
        main_loop = asyncio.get_running_loop()

        async def listen() -> None:
            task = asyncio.ensure_future(claim_handed_off_turns())
            await asyncio.sleep(0.5)  # it is in its receive() now
            main_loop.call_soon_threadsafe(listening.set)
            await task

        def run_reaper_loop() -> None:
            try:
                reaper_loop.run_until_complete(_until_cancelled(listen()))
            finally:
                reaper_loop.close()  # on its thread: channels-redis flushes the loop's connections as it closes

        thread = threading.Thread(target=run_reaper_loop, daemon=True)
        thread.start()
        try:
            await asyncio.wait_for(listening.wait(), 10)
            layer = get_channel_layer()
            channel = await layer.new_channel()
            for number in range(3):  # the relay's receive, on this loop, while the listener receives on its own
                await layer.send(channel, {"type": "probe", "number": number})
                assert (await asyncio.wait_for(layer.receive(channel), 5))["number"] == number
        finally:
            assert thread.is_alive(), f"the listener ended by itself:\n{caplog.text}"
            # One callback on the reaper's loop cancels its tasks: cancelling them one call at a time from
            # here raced the loop's own close (the first cancel ends it) and hit a closed loop.
            reaper_loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(reaper_loop)])
            thread.join(10)
        assert "Two event loops" not in caplog.text, caplog.text
        assert "could not reach the channel layer" not in caplog.text, caplog.text


async def _until_cancelled(coroutine: object) -> None:
    try:
        await coroutine  # type: ignore[misc]
    except asyncio.CancelledError:
        pass


async def test_the_hand_offs_of_one_flush_reach_the_reapers_in_one_message_in_order() -> None:
    """A draining replica announces its turns together: one ``group_send`` to the reapers for all of them (one
    each kept the last waiting for every send before it, and each listener for as many receives)."""
    import uuid

    from agent_persistence.realtime.delivery import GroupSender, group_message, handoff_payload
    from agent_persistence.realtime.groups import HANDOFFS_GROUP, conversation_group
    from agent_persistence.runtime import hooks

    if not os.environ.get("REDIS_URL"):
        pytest.fail("CI is set but REDIS_URL is not: the Redis variant must run in CI.")
    layers = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                          "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": 30}]}}}
    with override_settings(CHANNEL_LAYERS=layers):
        layer = get_channel_layer()
        reaper = await layer.new_channel()
        await layer.group_add(HANDOFFS_GROUP, reaper)
        try:
            handoffs = [hooks.HandOff(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), 3, 4) for _ in range(30)]
            sender = GroupSender()
            for update in handoffs:
                sender.put((conversation_group(update.conversation_id),
                            group_message(update.conversation_id, handoff_payload(update))))
            await asyncio.wait_for(sender.drained(), 10)
            message = await asyncio.wait_for(layer.receive(reaper), 5)
            assert [(item["conversation_id"], item["payload"]) for item in message["handoffs"]] == [
                (str(update.conversation_id), handoff_payload(update)) for update in handoffs
            ]
            with pytest.raises(asyncio.TimeoutError):  # nothing more: not one message a turn
                await asyncio.wait_for(layer.receive(reaper), 0.5)
            sender.task.cancel()
        finally:
            await layer.group_discard(HANDOFFS_GROUP, reaper)
