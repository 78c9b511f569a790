"""The JSON policy (``agent_persistence.json_policy``): what parse and check accept and refuse."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from agent_persistence import json_policy
from agent_persistence.exceptions import Validation


def refused(raw: bytes | str) -> Validation:
    with pytest.raises(Validation) as caught:
        json_policy.parse(raw)
    return caught.value


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{"a": [1, 2.5, "x", true, null]}', {"a": [1, 2.5, "x", True, None]}),
        (b'"caf\xc3\xa9 \\ud83d\\ude00"', "café 😀"),  # an escaped surrogate pair is one character
        ('"[[[[ not brackets {{{{"', "[[[[ not brackets {{{{"),
        ('"a \\" quote ]]]]"', 'a " quote ]]]]'),
        (str(2**63 - 1), 2**63 - 1),
        (str(-(2**63)), -(2**63)),
        ("1e308", 1e308),
    ],
)
def test_parse_accepts_json_within_the_policy(raw: bytes | str, expected: Any) -> None:
    assert json_policy.parse(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["", "{", "[1,]", "{'a': 1}", b"\xff\xfe", "\ufeff{}", '"unterminated', '"ends in a backslash\\'],
)
def test_text_that_is_not_json_is_malformed_request(raw: bytes | str) -> None:
    assert refused(raw).code == "malformed_request"


@pytest.mark.parametrize(
    "raw",
    [
        '"\\ud800"',
        '{"\\udfff": 1}',
        '["ok", "\\ud83d"]',
        '"\ud800"',  # a raw lone surrogate in str input
        '"\\u0000"',
        '{"key\\u0000": "v"}',
        '{"k": ["deep", {"x": "a\\u0000b"}]}',
        str(2**63),
        str(-(2**63) - 1),
        "1" * 5000,  # past Python's int digit limit: still invalid, not a ValueError
        "1e999",
        "-1e999",
        "NaN",
        "Infinity",
        "-Infinity",
        '{"n": [NaN]}',
    ],
)
def test_values_the_policy_refuses_are_invalid(raw: str) -> None:
    error = refused(raw)
    assert error.code == "invalid", error.message
    assert error.details["field"] == "body"


def test_depth_at_the_limit_parses_and_one_more_level_is_malformed(settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "JSON_MAX_DEPTH": 10}
    assert json_policy.parse("[" * 10 + "]" * 10) is not None
    error = refused("[" * 11 + "]" * 11)
    assert error.code == "malformed_request"
    assert error.details["limit"] == 10
    assert json_policy.parse('{"a":' * 10 + "1" + "}" * 10) is not None
    assert refused('{"a":' * 11 + "1" + "}" * 11).code == "malformed_request"


@pytest.mark.parametrize("depth", [1_000, 100_000, 1_000_000])
def test_deep_nesting_is_refused_quickly_without_recursing(depth: int) -> None:
    """Deep nesting is refused by a linear scan, closed or not, arrays or objects, in well under a second."""
    for raw in ("[" * depth + "]" * depth, "[" * depth, '{"a":' * depth, "[" * depth + '"' + "]" * depth):
        started = time.perf_counter()
        error = refused(raw)
        assert error.code == "malformed_request"
        assert time.perf_counter() - started < 5


def test_text_depth_ignores_brackets_in_strings_and_escaped_quotes() -> None:
    assert json_policy.text_depth('["[[[", {"k": "\\"]]]{{{"}]') == 2
    assert json_policy.text_depth("") == 0
    assert json_policy.text_depth('"' + "\\" * 3 + '"[[') == 0  # one escaped quote: the string never ends


def test_the_default_depth_limit_is_64() -> None:
    assert json_policy.max_depth() == 64
    json_policy.parse("[" * 64 + "]" * 64)
    assert refused("[" * 65 + "]" * 65).code == "malformed_request"


@pytest.mark.parametrize(
    "value",
    [
        "\ud800",
        {"\udfff": 1},
        ["a", {"b": "\x00"}],
        {"key\x00": None},
        2**63,
        -(2**63) - 1,
        float("nan"),
        float("inf"),
        ("tuple", "\ud800"),
    ],
)
def test_check_refuses_the_same_python_values(value: Any) -> None:
    with pytest.raises(Validation) as caught:
        json_policy.check(value, "metadata")
    assert caught.value.code == "invalid"
    assert caught.value.details["field"] == "metadata"


def test_check_refuses_deep_python_values_without_recursing() -> None:
    value: Any = "leaf"
    for _ in range(200_000):
        value = [value]
    with pytest.raises(Validation) as caught:
        json_policy.check(value, "state")
    assert caught.value.code == "invalid"
    assert caught.value.details["limit"] == 64


def test_check_accepts_ordinary_values_and_leaves_other_types_to_the_encoder() -> None:
    import datetime
    import uuid

    json_policy.check({"a": [1, 2.5, True, None, "é😀"], 3: "int keys are the encoder's"}, "metadata")
    json_policy.check({"when": datetime.datetime(2026, 1, 1), "id": uuid.uuid4()}, "metadata")
    json_policy.check([[[]]] * 3, "content")


def _nested(depth: int, leaf: Any = 1, *, in_dicts: bool = False) -> Any:
    """``depth`` levels of lists (or of objects) around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = {"k": value} if in_dicts else [value]
    return value


class _Text(str):
    pass


class _Number(int):
    pass


class _Items(list):
    pass


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        call()
    except Validation as error:
        return ("Validation", (str(error), error.code, error.details))
    except Exception as error:  # noqa: BLE001 - the encoder's own refusal, compared by type
        return ("error", type(error).__name__)
    return ("ok", None)


#: Values at and across every edge of the policy, including the ones orjson alone would let through
#: (2**63 .. 2**64-1, NaN and infinities written as null, NUL written as an escape) or refuse for its own
#: reasons (surrogates, its 254-level recursion limit).
DUMPS_CASES: list[Any] = [
    {"a": [1, 2.5, True, None, "é😀", ("t", -1)]},
    {"nul": "a\x00b"},
    {"key\x00": 1},
    {"ok": "a backslash then u0000: \\u0000"},
    {"\ud800": 1},
    ["\udfff"],
    [2**63 - 1, -(2**63)],
    [2**63],
    [2**64 - 1],
    [2**64],
    [-(2**63) - 1],
    [float("nan")],
    {"x": [float("inf")]},
    [float("-inf")],
    [_Text("sub\x00class")],
    [_Text("\ud800")],
    [_Number(2**63)],
    [_Number(5)],
    _Items([_Items([2**63])]),
    _nested(63),
    _nested(64),
    _nested(65),
    _nested(300),
    _nested(64, in_dicts=True),
    _nested(65, in_dicts=True),
    _nested(63, 2**63),
    {1: "int key", None: "none key"},
    [{1, 2}],
    [object()],
]


@pytest.mark.parametrize("value", DUMPS_CASES, ids=lambda value: repr(value)[:40])
def test_dumps_applies_exactly_the_policy_then_orjson(value: Any) -> None:
    """json_policy.dumps refuses what check() refuses, with the same error, and writes what orjson writes."""
    import orjson

    option = orjson.OPT_NON_STR_KEYS

    def reference() -> bytes:
        json_policy.check(value, "state")
        return orjson.dumps(value, option=option)

    expected, got = _outcome(reference), _outcome(lambda: json_policy.dumps(value, "state", option=option))
    assert got == expected
    if expected[0] == "ok":
        assert json_policy.dumps(value, "state", option=option) == orjson.dumps(value, option=option)


def test_dumps_follows_the_configured_depth(settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**getattr(settings, "AGENT_PERSISTENCE", {}), "JSON_MAX_DEPTH": 3}
    json_policy.dumps([[[]]], "state")
    with pytest.raises(Validation) as caught:
        json_policy.dumps([[[[]]]], "state")
    assert caught.value.details["limit"] == 3


# -- loads: json.loads, decoded by orjson where that is equal ---------------------------------


def decoded(loader: Any, text: Any) -> tuple[str, Any]:
    """What ``loader(text)`` gives, or the type of what it raises."""
    try:
        return "value", loader(text)
    except Exception as error:  # noqa: BLE001 - the exception type is what is compared
        return "raises", type(error)


def assert_identical(left: Any, right: Any) -> None:
    """Equal, of the same types all the way down (``1 == 1.0`` and ``0.0 == -0.0`` are not enough).

    Walked with a stack, not recursion: some values nest deeper than Python's recursion limit.
    """
    import math

    pairs = [(left, right)]
    while pairs:
        left, right = pairs.pop()
        assert type(left) is type(right), (left, right)
        if isinstance(left, float):
            assert left == right or (math.isnan(left) and math.isnan(right)), (left, right)
            assert math.copysign(1, left) == math.copysign(1, right), (left, right)
        elif isinstance(left, dict):
            assert list(left) == list(right)
            pairs.extend((left[key], right[key]) for key in left)
        elif isinstance(left, list):
            assert len(left) == len(right)
            pairs.extend(zip(left, right))
        else:
            assert left == right


def assert_loads_as_json_does(text: Any) -> None:
    import json

    ours, theirs = decoded(json_policy.loads, text), decoded(json.loads, text)
    assert ours[0] == theirs[0], (text[:80], ours, theirs)
    if ours[0] == "raises":
        assert ours[1] is theirs[1], (text[:80], ours, theirs)
    else:
        assert_identical(ours[1], theirs[1])


@pytest.mark.parametrize(
    "text",
    [
        # Integers at and past the 64-bit bounds, which orjson would read as floats.
        *(str(n) for k in (53, 63, 64, 65) for n in (2**k - 1, 2**k, 2**k + 1, -(2**k) - 1, -(2**k), -(2**k) + 1)),
        "9999999999999999999",
        "-9999999999999999999",
        "1" + "0" * 300,  # jsonb's text for the float 1e300: an integer literal, read as an int
        '{"usage": {"tokens": 18446744073709551616}, "note": "short"}',
        '[1, 2, "a string of 19 digits 1234567890123456789 only costs the slow read"]',
        "-0",
        "-0.0",
        "0." + "0" * 320 + "1",  # jsonb's text for 1e-321, a subnormal
        "1e400",
        "-1e400",
        "1e-400",
        "1.7976931348623157e308",
        "4.9e-324",
        "2.2250738585072011e-308",
        "1.00000000000000011102230246251565404236316680908203125",  # halfway: ties to even
        "1.000000000000000111022302462515654042363166809082031250001",
        "NaN",
        "Infinity",
        "-Infinity",
        '{"n": [NaN]}',
        # Strings: escapes, surrogate pairs, lone surrogates (escaped and raw), NUL, controls.
        '"\\ud83d\\ude00 \\u00e9 \\/ \\" \\\\ \\b\\f\\n\\r\\t"',
        '"\\ud800"',
        '{"\\udfff": 1}',
        '"\ud800"',
        '"\\u0000"',
        '{"nul\\u0000key": "\\u0000"}',
        '"\x01"',
        '"é😀"',
        # Nesting: the policy's limit, and past orjson's (1,024: both raise RecursionError).
        "[" * 64 + "]" * 64,
        '{"a":' * 64 + "1" + "}" * 64,
        "[" * 1025 + "]" * 1025,
        "[" * 100_000 + "]" * 100_000,
        # Not JSON at all.
        "",
        " ",
        "{",
        "[1,]",
        "{'a': 1}",
        "\ufeff{}",
        "01",
        "1.",
        '{"a": 1} x',
        # Duplicate keys (the last wins), whitespace, key order.
        '{"a": 1, "a": 2}',
        ' \n{ "b" : [ 1 , 2 ] , "a" : null } \t',
        '{"z": 1, "a": 2, "m": 3}',
    ],
)
def test_loads_gives_what_json_loads_gives(text: str) -> None:
    assert_loads_as_json_does(text)


def test_loads_reads_nesting_that_exhausts_json_loads_recursion_up_to_1024_levels() -> None:
    """The one difference left, past the policy: where json.loads runs out of stack (Python before
    3.12, whose C decoder counts against the recursion limit), loads gives the value; elsewhere both do."""
    import json

    text = "[" * 1024 + "]" * 1024
    try:
        expected: Any = json.loads(text)
    except RecursionError:
        assert sys.version_info < (3, 12), "json.loads of 1,024 levels raised RecursionError"
    else:
        assert_identical(json_policy.loads(text), expected)
    value = json_policy.loads(text)
    for _ in range(1023):
        (value,) = value
    assert value == []


def test_loads_takes_bytes_and_what_is_not_text_as_json_loads_does() -> None:
    for text in (b'{"a": [1, 2.5]}', bytearray(b"[18446744073709551616]"), b"\xff", None, 12):
        assert_loads_as_json_does(text)


def test_loads_reads_floats_as_json_loads_does() -> None:
    """Random doubles in every text form, random decimals with exponents, and the halfway points between doubles."""
    import math
    import random
    import struct
    from decimal import Decimal, localcontext

    chooser = random.Random(20261201)
    for _ in range(5_000):
        number = struct.unpack("d", struct.pack("Q", chooser.getrandbits(64)))[0]
        if not math.isfinite(number):
            continue
        for text in (repr(number), f"{number:.17g}", f"{number:.25e}", f"{number:.20g}", format(Decimal(number), "f")):
            assert_loads_as_json_does(text)
        following = math.nextafter(abs(number), math.inf)
        if number and math.isfinite(following):
            with localcontext() as context:
                context.prec = 800
                halfway = (Decimal(abs(number)) + Decimal(following)) / 2
            assert_loads_as_json_does(format(halfway, "e"))
    for _ in range(5_000):
        digits = "".join(chooser.choice("0123456789") for _ in range(chooser.randint(1, 40)))
        point = chooser.randint(1, len(digits))
        whole = digits[:point].lstrip("0") or "0"
        text = f"{chooser.choice(['', '-'])}{whole}.{digits[point:] or '0'}e{chooser.randint(-340, 340)}"
        assert_loads_as_json_does(text)
        assert_loads_as_json_does(f'{{"x": [{text}, "{digits}"]}}')


def test_loads_reads_what_the_stores_write_as_json_loads_does() -> None:
    """Values the policy admits, through the encoder the stores use: the same values back."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    values = [
        {"role": "tool", "content": [{"type": "text", "text": "é😀 \u2028"}], "n": [2**63 - 1, -(2**63), 0.1, 1e300, 5e-324]},
        ["x" * 10_000, {"deep": [[[[{"k": None}]]]]}, True, False],
        "a plain string, the usual content",
        {},
    ]
    for value in values:
        json_policy.check(value, "content")
        for text in (json.dumps(value, cls=DjangoJSONEncoder), json.dumps(value, ensure_ascii=False)):
            assert_loads_as_json_does(text)
