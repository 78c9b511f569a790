"""One JSON policy for REST bodies, websocket frames and store values.

Every JSON text this app accepts goes through :func:`parse`, and every value a
store writes to a JSON or text column goes through :func:`check`, so the same
input is refused the same way wherever it arrives:

- **Nesting** deeper than the ``JSON_MAX_DEPTH`` setting (default 64 levels of
  arrays and objects) is refused. :func:`parse` measures the depth with one
  linear scan of the text *before* it calls :func:`json.loads`, so a 100,000
  deep array never reaches the decoder's recursion; :func:`check` walks a
  Python value with an explicit stack, never recursing.
- **Lone surrogates** (``"\\ud800"`` escaped, or a raw surrogate in a ``str``)
  and **NUL** (``"\\u0000"``) anywhere in a string or an object key are
  refused: neither can be stored as UTF-8 text, and PostgreSQL refuses NUL in
  ``text`` and ``jsonb``.
- **Numbers out of range** are refused: integers outside
  [:data:`MIN_INTEGER`, :data:`MAX_INTEGER`] (the signed 64-bit range every
  backend and most JSON clients hold exactly), non-finite floats (``1e999``)
  and the ``NaN`` / ``Infinity`` / ``-Infinity`` literals, which are not JSON.

Errors are :class:`~agent_persistence.exceptions.Validation`: code
``malformed_request`` when the text is not JSON or nests too deep (the
request could not be read), code ``invalid`` for a readable value the policy
refuses (and for a Python value nested too deep, given to :func:`check`).
``details["field"]`` names the field, ``details["limit"]`` the bound crossed.

Stored JSON is read back with :func:`loads`: exactly what :func:`json.loads`
gives, decoded by orjson wherever orjson gives the same value.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Callable

import orjson

from .conf import app_settings
from .exceptions import Validation

#: The largest and smallest integers accepted (signed 64-bit).
MAX_INTEGER = 2**63 - 1
MIN_INTEGER = -(2**63)
#: Digits (and sign) past which an integer literal is out of range without converting it.
_MAX_INTEGER_LITERAL = len(str(MIN_INTEGER))

# A JSON string (possessive: once a string starts it never backtracks; an unterminated one runs to
# the end of the text), or one bracket outside strings (captured). Linear in the text's length.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)|([\[\]{}])', re.DOTALL)
_DEPTH_STEP = {"": 0, "[": 1, "{": 1, "]": -1, "}": -1}


def max_depth() -> int:
    """The configured nesting limit (``JSON_MAX_DEPTH``)."""
    return int(app_settings.JSON_MAX_DEPTH)


def text_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text``, brackets inside strings not counted.

    One pass of a regular expression and a running sum, with no recursion: the
    cost is linear in the text whatever it holds. For text that is not JSON the
    figure is an upper bound of what a decoder would meet.
    """
    steps = map(_DEPTH_STEP.__getitem__, _STRING_OR_BRACKET.findall(text))
    return max(accumulate(steps), default=0)


def _refuse_constant(name: str) -> Any:
    raise Validation(f"{name} is not a JSON number.", code="invalid", field="body")


def _parse_int(literal: str) -> int:
    if len(literal) > _MAX_INTEGER_LITERAL:
        raise _out_of_range("body")
    value = int(literal)
    if not MIN_INTEGER <= value <= MAX_INTEGER:
        raise _out_of_range("body")
    return value


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise Validation(
            "A number is too large to be held (it is not finite).", code="invalid", field="body"
        )
    return value


def _out_of_range(field_name: str) -> Validation:
    return Validation(
        f"{field_name} holds an integer outside -2**63 .. 2**63-1.",
        code="invalid",
        field=field_name,
        minimum=MIN_INTEGER,
        maximum=MAX_INTEGER,
    )


def parse(raw: bytes | str, *, field_name: str = "body") -> Any:
    """The value of JSON text ``raw`` (UTF-8 when bytes), checked by :func:`check`.

    Raises Validation ``malformed_request`` when the text is not UTF-8, not
    JSON, or nests deeper than ``JSON_MAX_DEPTH`` (checked before decoding);
    ``invalid`` for lone surrogates, NUL and numbers out of range.
    """
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise Validation(f"{field_name} is not UTF-8 text.", code="malformed_request", field=field_name) from None
    elif isinstance(raw, str):
        text = raw
    else:
        raise TypeError("parse() takes JSON text as str or bytes.")
    limit = max_depth()
    if text_depth(text) > limit:
        raise Validation(
            f"{field_name} nests deeper than {limit} levels.", code="malformed_request", field=field_name, limit=limit
        )
    try:
        value = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant
        )
    except Validation as error:
        error.details["field"] = field_name
        raise
    except (ValueError, RecursionError) as error:
        # JSONDecodeError is a ValueError; RecursionError cannot happen below the depth limit.
        raise Validation(
            f"{field_name} is not valid JSON: {error}.", code="malformed_request", field=field_name
        ) from None
    check(value, field_name)
    return value


def check_text(value: str, field_name: str) -> None:
    """Refuse NUL and lone surrogates in one string."""
    if "\x00" in value:
        raise Validation(f"{field_name} may not contain NUL characters.", code="invalid", field=field_name)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Validation(
                f"{field_name} contains a lone surrogate (not a Unicode character).", code="invalid", field=field_name
            ) from None


def check(value: Any, field_name: str) -> None:
    """Apply the policy to a Python value about to be stored or sent as JSON.

    Strings and object keys: no NUL, no lone surrogate. Integers within
    [MIN_INTEGER, MAX_INTEGER]; floats finite. Lists, tuples and dicts nest at
    most ``JSON_MAX_DEPTH`` levels. Other values (dates, UUIDs...) are left to
    the JSON encoder of the caller. Raises Validation (code ``invalid``).
    """
    limit = max_depth()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, field_name)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not MIN_INTEGER <= item <= MAX_INTEGER:
                raise _out_of_range(field_name)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Validation(f"{field_name} holds a number that is not finite.", code="invalid", field=field_name)
        elif isinstance(item, (dict, list, tuple)):
            if depth >= limit:
                raise Validation(
                    f"{field_name} nests deeper than {limit} levels.", code="invalid", field=field_name, limit=limit
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        check_text(key, field_name)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)


def dumps(value: Any, field_name: str, *, default: Callable[[Any], Any] | None = None, option: int = 0) -> bytes:
    """``value``'s JSON as :func:`orjson.dumps` writes it, the policy applied: what :func:`check` then
    ``orjson.dumps`` gives, for less.

    orjson already refuses a lone surrogate (in a string or a key) and writes
    NUL as the escape ``\\u0000``, so the text is searched for that escape
    instead of every string being checked; only numbers and nesting are walked
    (:func:`_check_numbers_and_nesting`). Whenever orjson refuses the value or
    the escape is found, :func:`check` walks it all, so an error is exactly the
    one :func:`check` raises (the escape may also be a backslash the value
    holds, followed by ``u0000``: then the value passes). Raises Validation for
    what the policy refuses, and orjson's own errors for what is not JSON.
    """
    try:
        encoded = orjson.dumps(value, default=default, option=option)
    except (TypeError, orjson.JSONEncodeError):
        check(value, field_name)  # the policy's own error, when the value breaks it
        raise
    if b"\\u0000" in encoded:
        check(value, field_name)
    _check_numbers_and_nesting(value, field_name)
    return encoded


_CONTAINERS = (dict, list, tuple)


def _check_numbers_and_nesting(value: Any, field_name: str) -> None:
    """:func:`check` without its string checks: integers in range, floats finite, nesting bounded.

    Only containers go on the stack; the exact built-in types are told apart by
    ``type()`` (a subclass takes the ``isinstance`` branch, as in :func:`check`).
    """
    if not isinstance(value, _CONTAINERS):
        check(value, field_name)
        return
    limit = max_depth()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            raise Validation(f"{field_name} nests deeper than {limit} levels.", code="invalid", field=field_name, limit=limit)
        for child in item.values() if isinstance(item, dict) else item:
            kind = type(child)
            if kind is str or kind is bool or child is None:
                continue
            if kind is int:
                if not MIN_INTEGER <= child <= MAX_INTEGER:
                    raise _out_of_range(field_name)
            elif kind is float:
                if not math.isfinite(child):
                    raise Validation(f"{field_name} holds a number that is not finite.", code="invalid", field=field_name)
            elif kind is dict or kind is list or kind is tuple or isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1))
            elif not isinstance(child, str):
                check(child, field_name)  # an int or float subclass, or a value left to the encoder


# Every ASCII digit to "1", every other byte to a space: a number's digits become a run of "1"s.
_DIGITS_AS_ONES = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
#: The fewest digits of an integer orjson would read as a float: -9223372036854775809 (-2**63 - 1).
_INEXACT_INTEGER_DIGITS = 19
_INEXACT_INTEGER_RUN = b"1" * _INEXACT_INTEGER_DIGITS


def loads(text: Any) -> Any:
    """``json.loads(text)``: the same value and the same errors, decoded by orjson where that is equal and faster.

    For stored JSON read back (the JSON columns of a page of messages): orjson
    decodes in a fraction of the stdlib's time. Both read numbers correctly
    rounded and strings the same; orjson differs only in refusing texts the
    stdlib accepts (``NaN`` / ``Infinity``, numbers past a double's range, lone
    surrogates, nesting past 1,024 levels) and in reading an integer outside
    [-2**63, 2**64 - 1] as a float. A refused text is read by :func:`json.loads`
    (which then raises, or not, as it always did), and so is any text that holds
    a run of 19 digits, the fewest such an integer has (a run inside a string
    only costs the slower read). Anything but a ``str`` goes to :func:`json.loads`.

    One difference is left, past the policy: on Python 3.11, nesting
    deeper than the interpreter's recursion limit lets :func:`json.loads`
    raise ``RecursionError`` (near 1,000 levels less the caller's stack), where
    this reads the value up to 1,024 levels. Stores refuse such values on write
    (``JSON_MAX_DEPTH``, 64 by default).
    """
    if type(text) is not str:
        return json.loads(text)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    if type(value) is str or len(text) < _INEXACT_INTEGER_DIGITS:
        return value  # a JSON string holds no number; a shorter text no long one
    if _INEXACT_INTEGER_RUN in text.encode().translate(_DIGITS_AS_ONES):
        return json.loads(text)
    return value
