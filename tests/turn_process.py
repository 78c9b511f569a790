"""Drive one turn in a separate OS process, for the crash tests.

    python -m tests.turn_process start <tenant> <user> <conversation_id> <message_id> <agent>
    python -m tests.turn_process resume <tenant> <user> <conversation_id> <message_id>
    python -m tests.turn_process continue <tenant> <user> <conversation_id> <answers as JSON>

The database is the one named by AP_TEST_DB_NAME (the test database of the
calling pytest process). Prints one JSON line with the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from agent_persistence.runtime.lifecycle import continue_turn, resume_turn, start_turn
    from agent_persistence.scope import Scope

    action, tenant, user, conversation_id, argument = argv[:5]
    scope = Scope(tenant=tenant, user=user)

    async def drive() -> str:
        if action == "start":
            handle = await start_turn(scope, conversation_id, content="go", agent=argv[5], message_id=argument)
        elif action == "resume":
            handle = await resume_turn(scope, conversation_id, message_id=argument)
        else:
            _, handle = await continue_turn(scope, conversation_id, json.loads(argument))
            assert handle is not None, "the answers released no interrupted turn"
        print(json.dumps({"started": True, "epoch": handle.epoch, "run_id": str(handle.run_id)}), flush=True)
        outcome = await handle.task
        return outcome.value

    outcome = asyncio.run(drive())
    print(json.dumps({"outcome": outcome}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
