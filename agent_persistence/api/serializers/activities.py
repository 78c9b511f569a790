"""Serializers of activity rows and of the reconstruct-for-reload body.

Output serializers read what the stores return; the input of a save is a
list of objects the activity store cleans itself (unknown fields, lengths,
the JSON policy), so its serializer only checks the envelope.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models import Role
from .base import JSONArrayField, JSONObjectField, StrictCharField, StrictSerializer
from .conversations import ConversationSerializer, MessagePageSerializer
from .turns import InterruptSerializer, RecordingSerializer, RunSerializer


class ActivitySerializer(serializers.Serializer):
    """One activity row, as the websocket's ``activity`` frame carries it."""

    id = serializers.UUIDField(source="activity_id", help_text="The activity's id (AG-UI messageId).")
    activity_type = serializers.CharField(help_text="An open string chosen by the agent, e.g. web_search.")
    content = JSONObjectField(help_text="The row's content.")
    metadata = JSONObjectField()
    message_id = serializers.UUIDField(allow_null=True, help_text="The turn that produced it, if one did.")
    run_id = serializers.UUIDField(allow_null=True, help_text="The run that produced it, if one did.")
    position = serializers.IntegerField(help_text="Its place in the conversation's list.")
    revision = serializers.IntegerField(help_text="Rises with every write of the row.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ActivityListSerializer(serializers.Serializer):
    activities = ActivitySerializer(many=True)


class ActivityInputSerializer(StrictSerializer):
    """One activity of a save; the store refuses what it cannot keep."""

    id = serializers.UUIDField(required=False, allow_null=True, help_text="Kept when given; a new id when absent.")
    activity_type = StrictCharField(max_length=255, trim_whitespace=False)
    content = JSONObjectField(required=False)
    metadata = JSONObjectField(required=False)
    message_id = serializers.UUIDField(required=False, allow_null=True)
    run_id = serializers.UUIDField(required=False, allow_null=True)


class ActivitySaveInputSerializer(StrictSerializer):
    """The conversation's whole activity list: it replaces the stored one exactly."""

    activities = ActivityInputSerializer(many=True, allow_empty=True)


class TranscriptMessageSerializer(serializers.Serializer):
    """One message of a child run's own transcript; a field the run left empty is absent."""

    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.JSONField(allow_null=True)
    name = serializers.CharField(required=False)
    tool_call_id = serializers.CharField(required=False)
    tool_calls = JSONArrayField(required=False, help_text="The calls it made: {id, name, arguments}.")
    metadata = JSONObjectField(required=False)


class SubagentCardSerializer(serializers.Serializer):
    """A child run shown on its parent's assistant message (``run.message_id``), with its transcript."""

    run = RunSerializer()
    messages = TranscriptMessageSerializer(
        many=True, help_text="The child run's own transcript (text, tool calls and results), oldest first."
    )
    children = serializers.SerializerMethodField(help_text="Nested cards: the child's own child runs.")

    @extend_schema_field({"type": "array", "items": {"$ref": "#/components/schemas/SubagentCard"}})
    def get_children(self, card: Any) -> list[dict[str, Any]]:
        return SubagentCardSerializer(card.children, many=True).data


class LiveTurnSerializer(serializers.Serializer):
    """The running turn to tail: attach with ``last_index`` = recording.index and ``offset`` = its text's length."""

    state = serializers.ChoiceField(
        choices=["queued", "alive", "dead", "handing_off"],
        help_text="queued: waiting for a worker (TURN_RUNNER tasks; tail it); alive: tail it; dead: its producer died "
        "(resume it); handing_off: its server shuts down and another resumes it (tail it).",
    )
    message_id = serializers.UUIDField()
    run_id = serializers.UUIDField(allow_null=True)
    epoch = serializers.IntegerField()
    heartbeat_age = serializers.FloatField(allow_null=True)
    recording = RecordingSerializer(allow_null=True, help_text="The in-flight answer so far, or null.")


class ReconstructionSerializer(serializers.Serializer):
    """Everything a client needs to repaint a conversation after a reload."""

    conversation = ConversationSerializer()
    messages = MessagePageSerializer(help_text="The newest page of the transcript (or the page before ``before``), oldest first.")
    activities = ActivitySerializer(many=True, help_text="The activity rows, in list order; never part of the transcript.")
    subagents = SubagentCardSerializer(many=True, help_text="One card per child run of the page's turns.")
    interrupts = InterruptSerializer(many=True, help_text="The pending interrupts, oldest first.")
    live_turn = LiveTurnSerializer(allow_null=True, help_text="The running turn to tail, or null.")
