"""Serializers of the run lifecycle endpoints: a run's subagent runs and the interrupts of one run."""

from __future__ import annotations

from rest_framework import serializers

from .turns import RunSerializer


class RunListSerializer(serializers.Serializer):
    """The child runs (subagents) of one run, oldest first."""

    runs = RunSerializer(many=True)
