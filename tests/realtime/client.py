"""What a careful websocket client does with the frames, for the tests and the benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamClient:
    """Applies server frames: appends what it lacks, checks indexes rise, keeps the final state."""

    message_id: str | None = None
    index: int = 0
    text: str = ""
    final: dict[str, Any] | None = None
    frames: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    states: list[str] = field(default_factory=list)

    def apply(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        kind = frame["type"]
        if kind == "status":
            self.states.append(frame["state"])
            if frame["message_id"] != self.message_id:
                self.message_id, self.index, self.text, self.final = frame["message_id"], 0, "", None
        elif kind == "delta":
            assert frame["message_id"] == self.message_id, frame
            assert frame["index"] > self.index, (frame["index"], self.index)
            assert frame["offset"] <= len(self.text), (frame["offset"], len(self.text))
            self.index = frame["index"]
            self.text += frame["text"][len(self.text) - frame["offset"]:]
        elif kind == "final":
            assert frame["message_id"] == self.message_id, frame
            self.final = frame
        elif kind == "error":
            self.errors.append(frame)

    @property
    def final_text(self) -> str | None:
        return self.final["message"]["content"] if self.final else None

    def attach_frame(self) -> dict[str, Any]:
        frame: dict[str, Any] = {"type": "attach"}
        if self.message_id:
            frame.update(last_index=self.index, offset=len(self.text), message_id=self.message_id)
        return frame
