"""How the admin shows runtime values: live status, short ids, messages as text, JSON.

Pure functions from a row (or a value) to text or safe HTML, so the list
columns, the detail pages and the dashboard say the same thing the same way.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import TurnSupervision
from ..stores.supervision import TurnStatus, status_of

#: Longest tool-call argument or result shown in full; longer ones end with an ellipsis.
TOOL_VALUE_PREVIEW = 300


def short_id(value: uuid.UUID | str | None) -> str:
    """The last 8 hex digits of a UUID.

    Ids are uuid7, whose leading digits are a timestamp shared by every row made
    in the same minute; the trailing ones are random, so they tell rows apart.
    """
    if value is None:
        return ""
    return str(value).replace("-", "")[-8:]


def turn_status(row: TurnSupervision | None) -> TurnStatus:
    """The verdict on a supervision row as of now (the API and the reaper judge the same way)."""
    return status_of(row, now=timezone.now())


def human_age(seconds: float | None) -> str:
    """0.4 s, 7 min, 2 h, 3 d: precise where liveness is decided, short beyond."""
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h"
    return f"{seconds // 86400:.0f} d"


def live_status_text(row: TurnSupervision | None) -> str:
    """``alive · heartbeat 0.4 s ago · epoch 3 · web-2:1234``, or ``idle`` without a row."""
    status = turn_status(row)
    if row is None:
        return "idle"
    return f"{status.state} · heartbeat {status.heartbeat_age:.1f} s ago · epoch {status.epoch} · {status.replica or 'replica ?'}"


def live_status_html(row: TurnSupervision | None, outcome: str | None = None) -> SafeString:
    """The live status on one line: a coloured state, then heartbeat age, epoch and replica.

    ``outcome`` (the conversation's ``last_turn_status``) names a finished
    turn more precisely than the row's done / errored (complete, cancelled).
    """
    status = turn_status(row)
    if row is None:
        return SafeString('<span class="ap-live ap-live-idle">idle</span>')
    word = outcome if outcome and not status.running else status.state
    return format_html(
        '<span class="ap-live ap-live-{state}" title="{full}"><b>{word}</b> {age} · epoch {epoch} · {replica}</span>',
        state=status.state,
        word=word,
        full=live_status_text(row),
        age=human_age(status.heartbeat_age),
        epoch=status.epoch,
        replica=status.replica or "?",
    )


def compact_json(value: Any, limit: int | None = None) -> str:
    """JSON on one line, cut at ``limit`` characters with an ellipsis."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def pretty_json(value: Any) -> SafeString:
    """Indented JSON in a ``<pre>``, escaped."""
    return format_html('<pre class="ap-json">{}</pre>', json.dumps(value, ensure_ascii=False, indent=2, default=str))


def message_text(content: Any) -> str:
    """A message's content as a person reads it.

    Text stays text (never JSON-quoted); a list of parts (``{"type": "text",
    "text": ...}`` and the like) becomes its text parts, other parts named by
    their type; any other JSON shows compact.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict) and part.get("type"):
                pieces.append(f"[{part['type']}]")
            else:
                pieces.append(compact_json(part))
        return "\n".join(pieces)
    return compact_json(content)


def tool_call_parts(call: Any) -> tuple[str, Any, Any]:
    """(name, arguments, result) of a tool call, in the app's shape or OpenAI's ``function`` shape."""
    if not isinstance(call, dict):
        return "?", call, None
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    name = call.get("name") or function.get("name") or "?"
    arguments = call["arguments"] if "arguments" in call else function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return str(name), arguments, call.get("result")


def tool_calls_html(tool_calls: Any) -> SafeString:
    """One line per call: ``name(arguments) → result``."""
    if not tool_calls or not isinstance(tool_calls, list):
        return SafeString("")
    rows = []
    for call in tool_calls:
        name, arguments, result = tool_call_parts(call)
        outcome = "" if result is None else "→ " + compact_json(result, TOOL_VALUE_PREVIEW)
        rows.append((name, compact_json(arguments if arguments is not None else {}, TOOL_VALUE_PREVIEW), outcome))
    items = format_html_join("", '<li><code class="ap-tool-name">{}</code>(<code>{}</code>) <span class="ap-tool-result">{}</span></li>', rows)
    return format_html('<ul class="ap-tool-calls">{}</ul>', items)


def message_html(role: str, content: Any, *, name: str | None = None, tool_call_id: str | None = None, tool_calls: Any = None) -> SafeString:
    """A message as text with its tool calls (and, for a tool message, the call it answers)."""
    answers = ""
    if tool_call_id:
        answers = format_html('<div class="ap-answers">result of <code>{}</code>{}</div>', name or "tool", f" ({tool_call_id})")
    return format_html(
        '<div class="ap-message ap-role-{role}">{answers}<div class="ap-text">{text}</div>{calls}</div>',
        role=role,
        answers=answers,
        text=message_text(content),
        calls=tool_calls_html(tool_calls),
    )
