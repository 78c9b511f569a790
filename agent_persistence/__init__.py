"""Durable AI-agent conversations and resumable in-flight turns for Django."""

__version__ = "0.1.0"
