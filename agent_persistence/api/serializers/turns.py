"""Serializers of the turn, run and interrupt endpoints: the request bodies in, the runtime's results out."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models import Interrupt, InterruptKind, InterruptStatus, Run, RunStatus
from .base import JSONObjectField, StrictCharField, StrictSerializer, page_serializer

INTERRUPT_STATUS_FILTERS = [*InterruptStatus.values, "all"]
TURN_STATES = ["idle", "queued", "alive", "dead", "handing_off", "done", "errored"]


# -- requests ------------------------------------------------------------------------------------


class StartTurnSerializer(StrictSerializer):
    """``POST conversations/<id>/turns/``: the user's message and how to answer it."""

    content = serializers.JSONField(help_text="The user message's content: text or a list of content parts (any JSON).")
    agent = StrictCharField(
        required=False,
        max_length=255,
        help_text="The registered agent to answer with; defaults to the conversation's. Required for a new conversation.",
    )
    message_id = serializers.UUIDField(required=False, help_text="The assistant message id that identifies the turn.")
    user_message_id = serializers.UUIDField(required=False, help_text="The id of the stored user message.")
    metadata = JSONObjectField(required=False, help_text="The user message's metadata (a JSON object).")


class ResumeTurnSerializer(StrictSerializer):
    """``POST conversations/<id>/turns/resume/``: which dead turn to take over (the supervised one by default)."""

    message_id = serializers.UUIDField(required=False, help_text="The turn's assistant message id.")


class AnswerSerializer(StrictSerializer):
    """One entry of a batch: ``{"id", "response"}`` resolves the interrupt, ``{"id", "status": "cancelled"}`` cancels it."""

    id = serializers.UUIDField(help_text="The interrupt settled.")
    status = serializers.ChoiceField(
        choices=[InterruptStatus.RESOLVED, InterruptStatus.CANCELLED],
        required=False,
        help_text="resolved (the default: give a response) or cancelled (give no response).",
    )
    response = serializers.JSONField(required=False, allow_null=True, help_text="The answer (any JSON), to resolve.")

    def to_entry(self, data: dict[str, Any]) -> dict[str, Any]:
        """The store's entry: only the keys the client sent (the store judges its shape)."""
        return {"id": str(data["id"]), **{key: data[key] for key in ("status", "response") if key in data}}


class AnswerBatchSerializer(StrictSerializer):
    """``POST conversations/<id>/interrupts/``: one entry for every pending interrupt, committed all or nothing."""

    answers = AnswerSerializer(many=True, allow_empty=False)


# -- responses -----------------------------------------------------------------------------------


class TurnStartedSerializer(serializers.Serializer):
    """A turn whose producer runs on this server: started, continued or resumed."""

    conversation_id = serializers.UUIDField()
    message_id = serializers.UUIDField(help_text="The assistant message that answers the turn.")
    run_id = serializers.UUIDField(help_text="The run this producer drives.")
    epoch = serializers.IntegerField(help_text="The claim's epoch.")


class RecordingSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="How far the stream got.")
    message = serializers.JSONField(help_text="The assistant message so far.")


class StreamStatusSerializer(serializers.Serializer):
    """Which turn is in flight in a conversation, and whether its producer is alive."""

    state = serializers.ChoiceField(
        choices=TURN_STATES,
        help_text="idle: no turn yet; queued: enqueued for a worker (TURN_RUNNER tasks) that has not taken it yet; alive / dead: a turn is running and its producer's heartbeat is fresh / stale; "
        "handing_off: its producer's server shuts down and another resumes it at once; done / errored: the last turn ended.",
    )
    message_id = serializers.UUIDField(allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    epoch = serializers.IntegerField()
    replica = serializers.CharField(allow_blank=True, help_text="The server process producing the turn.")
    heartbeat_age = serializers.FloatField(allow_null=True, help_text="Seconds since the producer's last heartbeat.")
    recording = RecordingSerializer(allow_null=True, help_text="The in-flight answer of this turn, or null.")


class CancelledSerializer(serializers.Serializer):
    run_id = serializers.UUIDField(help_text="The run asked to stop.")


class RunSerializer(serializers.ModelSerializer):
    conversation_id = serializers.UUIDField(read_only=True)
    parent_id = serializers.UUIDField(read_only=True, allow_null=True)
    status = serializers.ChoiceField(choices=RunStatus.choices, read_only=True)
    usage = JSONObjectField(read_only=True, help_text="Counters, e.g. input_tokens.")
    error = serializers.JSONField(read_only=True, allow_null=True, help_text='{"code", "message"} when failed or aborted.')

    class Meta:
        model = Run
        fields = [
            "id",
            "conversation_id",
            "message_id",
            "parent_id",
            "name",
            "status",
            "started_at",
            "finished_at",
            "usage",
            "error",
            "detached_since",
            "cancel_requested",
            "epoch",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    children = serializers.SerializerMethodField(help_text="The run's direct child runs (subagents), oldest first.")

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "children"]
        read_only_fields = fields

    @extend_schema_field(RunSerializer(many=True))
    def get_children(self, run: Run) -> list[dict[str, Any]]:
        return RunSerializer(self.context["children"], many=True).data


RunPageSerializer = page_serializer(RunSerializer, "RunPageSerializer")


class InterruptSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField(read_only=True)
    conversation_id = serializers.UUIDField(read_only=True)
    kind = serializers.ChoiceField(choices=InterruptKind.choices, read_only=True)
    status = serializers.ChoiceField(choices=InterruptStatus.choices, read_only=True)
    payload = JSONObjectField(read_only=True, help_text="The question (a JSON object).")
    response = serializers.JSONField(read_only=True, allow_null=True, help_text="The answer once resolved.")

    class Meta:
        model = Interrupt
        fields = [
            "id",
            "run_id",
            "conversation_id",
            "kind",
            "payload",
            "status",
            "response",
            "requested_at",
            "resolved_at",
            "resolved_by",
            "expires_at",
            "epoch",
        ]
        read_only_fields = fields


class InterruptListSerializer(serializers.Serializer):
    interrupts = InterruptSerializer(many=True)


class AnsweredSerializer(serializers.Serializer):
    interrupts = InterruptSerializer(many=True, help_text="The answered interrupts, in the batch's order.")
    continued = TurnStartedSerializer(
        allow_null=True,
        help_text="The run that drives the turn on, when the answers released it; null when the producer that asked "
        "goes on itself, interrupts are still pending, or the batch repeats one already committed.",
    )
    took_over = serializers.BooleanField(
        help_text="True when the producer that asked had died: the answers were stored and the turn resumed on this "
        "server in the same transaction (continued names the resumed run)."
    )
