"""Serializers of websocket tickets (``POST ws-ticket/``)."""

from __future__ import annotations

from rest_framework import serializers


class WebsocketTicketSerializer(serializers.Serializer):
    """A ticket for one socket: pass it as ``?ticket=`` on the websocket URL."""

    ticket = serializers.CharField(help_text="Opaque, signed; single-use. Send it as the socket URL's ?ticket= query parameter.")
    expires_at = serializers.DateTimeField(help_text="The ticket is refused (close code 4403) after this instant.")
    expires_in = serializers.FloatField(help_text="Seconds the ticket is valid from now (WS_TICKET_TTL).")
    conversation_id = serializers.UUIDField(
        allow_null=True, help_text="The only conversation the ticket opens; null: any conversation the user may read."
    )
