"""Fuzzing the codec: decode never raises, and every answer it asks for is well formed.

Three sources of lines: hypothesis (random bytes, random text, random JSON values checked against an
independent restatement of the §1.3 table, and mutated requests), and a deterministic corpus of
thousands of malformed lines (every truncation, deletion and a byte substitution at every position
of a set of seed messages, plus handwritten oddities).
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oam_actors.bridge.jsonrpc import (
    MAX_SAFE_INTEGER,
    Invalid,
    Notification,
    Request,
    Response,
    decode,
    encode_error,
    encode_result,
)
from oam_actors import ErrorCode

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Structured inputs are slow to generate; the corpus below covers breadth cheaply.
FUZZ_STRUCTURED = settings(FUZZ, max_examples=150)

# --- invariants ----------------------------------------------------------------------------------


def is_valid_id(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and (not math.isfinite(value) or value.is_integer()):
        return False  # integral ids must have been normalised to int
    return abs(value) <= MAX_SAFE_INTEGER


def check(result: Any) -> None:
    """The invariants every decode result satisfies."""
    if result is None:
        return
    if isinstance(result, Invalid):
        check_invalid(result)
    elif isinstance(result, Request):
        assert is_valid_id(result.id) and isinstance(result.method, str) and result.method
        assert isinstance(result.params, dict)
        assert json.loads(encode_result(result.id, {}))["id"] == result.id
    elif isinstance(result, Notification):
        assert isinstance(result.method, str) and result.method and isinstance(result.params, dict)
    else:
        assert isinstance(result, Response), result
        assert is_valid_id(result.id) and (result.error is None or isinstance(result.error, dict))


def check_invalid(result: Invalid) -> None:
    assert result.error.code in (ErrorCode.PARSE_ERROR, ErrorCode.INVALID_MESSAGE)
    assert result.id is None or is_valid_id(result.id)
    if result.error.code is ErrorCode.PARSE_ERROR:
        assert result.id is None
    line = encode_error(result.id, result.error)
    assert b"\n" not in line
    wire = json.loads(line)
    assert list(wire) == ["jsonrpc", "id", "error"] and wire["jsonrpc"] == "2.0"
    error = wire["error"]
    assert list(error) == ["code", "message", "data"]
    assert (
        error["code"] == result.error.code.number and isinstance(error["message"], str) and error["message"]
    )
    assert error["data"] == {"code": result.error.code.wire}


def strict_json(line: bytes) -> Any:
    """Python's json as a second opinion, made strict; raises ValueError when not strict JSON."""

    def reject(constant: str) -> Any:
        raise ValueError(constant)

    return json.loads(line.decode("utf-8"), parse_constant=reject)


def check_line(line: bytes) -> None:
    result = decode(line)
    check(result)
    try:
        value = strict_json(line)
    except (ValueError, RecursionError):
        return
    if isinstance(value, dict) and "method" in value and "id" in value:
        # Request-shaped: a request, or an error the bridge can send.
        assert isinstance(result, Request | Invalid), (line, result)


# --- an independent restatement of §1.3 for JSON values -------------------------------------------


def oracle_id(raw: Any) -> tuple[bool, Any]:
    if isinstance(raw, str):
        return True, raw
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return False, None
    if abs(raw) > MAX_SAFE_INTEGER:  # infinities included
        return False, None
    return True, int(raw) if raw == int(raw) else raw


def oracle(value: Any) -> tuple[type, Any]:
    """(expected result type, expected id) for a decoded JSON value."""
    if not isinstance(value, dict):
        return Invalid, None
    ok, request_id = oracle_id(value["id"]) if "id" in value else (True, None)
    if value.get("jsonrpc") != "2.0":
        return Invalid, request_id
    if not ok:
        return Invalid, None
    if "method" in value:
        method = value["method"]
        if not isinstance(method, str) or method == "":
            return Invalid, request_id
        return (Request if "id" in value else Notification), request_id
    if "id" in value and ("result" in value or "error" in value):
        return Response, request_id
    return Invalid, request_id


# --- strategies ----------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=8,
)
IDS = (
    st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([8.0, -0.0, 1.5, 2.0**53, 2.0**53 - 1, 1e300, True, False, None])
    | TEXT
    | JSON
)
METHODS = st.sampled_from(["ping", "session/respond", "", "tool/call"]) | JSON
MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0, None]),
        "id": IDS,
        "method": METHODS,
        "params": JSON,
        "result": JSON,
        "error": JSON,
        "extra": JSON,
    },
)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_never_raise(line: bytes) -> None:
    check_line(line)


@FUZZ
@given(st.text(max_size=200))
def test_random_text_never_raises(line: str) -> None:
    check(decode(line))


@FUZZ_STRUCTURED
@given(MESSAGES)
def test_json_messages_match_the_validation_table(message: dict[str, Any]) -> None:
    line = json.dumps(message).encode()
    result = decode(line)
    check(result)
    expected_type, expected_id = oracle(message)
    assert type(result) is expected_type, (message, result)
    if expected_type is not Notification:
        assert result.id == expected_id and type(result.id) is type(expected_id)
    if isinstance(result, Request | Notification):
        params = message.get("params")
        assert result.params == (params if isinstance(params, dict) else {})
        assert result.params_error is (params is not None and not isinstance(params, dict))


@FUZZ_STRUCTURED
@given(JSON)
def test_any_json_value_decodes_to_a_well_formed_result(value: Any) -> None:
    result = decode(json.dumps(value))
    check(result)
    assert type(result) is oracle(value)[0]


REQUEST = b'{"jsonrpc":"2.0","id":17,"method":"session/respond","params":{"session":"gorm","prompt":"Hi\\n\\u00e9"}}'


@FUZZ_STRUCTURED
@given(st.data())
def test_mutated_requests_never_raise(data: st.DataObject) -> None:
    line = bytearray(REQUEST)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(line)))
        action = data.draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
        byte = data.draw(st.sampled_from(list(b'{}[]":,\\ 0e-.nt\xff\x00\x80')))
        if action == "insert":
            line.insert(position, byte)
        elif action == "truncate":
            del line[position:]
        elif position < len(line):
            if action == "delete":
                del line[position]
            else:
                line[position] = byte
    check_line(bytes(line))


# --- the deterministic corpus --------------------------------------------------------------------

SEEDS = [
    REQUEST,
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":"abc","method":"initialize","params":{"client":{"name":"t","version":"1"}}}',
    b'{"jsonrpc":"2.0","method":"session/cancel","params":{"session":"s"}}',
    b'{"jsonrpc":"2.0","id":"t-1","result":{"output":"opened"}}',
    b'{"jsonrpc":"2.0","id":"t-2","error":{"code":-32000,"message":"nope"}}',
    b'{"jsonrpc":"2.0","id":8.0,"method":"ping","params":null}',
    b'{"jsonrpc":"2.0","id":-9007199254740991,"method":"x","params":[1,2.5e3,true,null]}',
    b'{"jsonrpc":"2.0","id":1.5,"method":"tools/validate","params":{"tools":[{"name":"a","parameters":{}}]}}',
    b'[{"jsonrpc":"2.0","id":2,"method":"ping"}]',
    '{"jsonrpc":"2.0","id":3,"method":"session/respond","params":{"prompt":"caf\u00e9 \U0001f600"}}'.encode(),
]

ODDITIES = [
    b"{",
    b"}",
    b"[",
    b'"',
    b"\\",
    b"\x00",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"-",
    b"--1",
    b"01",
    b"1.",
    b".5",
    b"0x10",
    b"tru",
    b"nul",
    b'{"a"}',
    b'{"a":}',
    b"{:1}",
    b'{"a":1,,"b":2}',
    b'{"a":1 "b":2}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"',
    b'{"jsonrpc":"2.0","id":1e-400,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":-0,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1E+2,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":"\\u0000","method":"ping"}',
    b'{"jsonrpc":"2.0","id":"\\ud83d\\ude00","method":"ping"}',
    b'{"jsonrpc":"2.0","id":"\\udc00","method":"ping"}',
    b'{"jsonrpc":"2.0","id":"\\x41","method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping\x01"}',
    b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xaf"}',
    b'{"jsonrpc":"2.0","id":1,"method":"\xed\xa0\x80"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}\x00',
    b'{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"id":{},"method":"ping"}',
    b'{"jsonrpc":"2.0","id":[],"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + b'{"a":' * 3000 + b"1" + b"}" * 3001 + b"}",
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":' + b"9" * 5000 + b"}}",
    b'{"jsonrpc":"2.0","id":' + b"9" * 400 + b',"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1' + b"0" * 400 + b".5e-2}}",
    b" " * 1000 + b"{}",
    b"\t\r\n \t",
    b"\x0b",
    b"\x0c",
]


def corpus() -> list[bytes]:
    rng = random.Random(20240601)
    replacements = b'{}[]":,\\ 0123456789eE+-.ntfu\xff\x00\x7f\x80\xc3'
    lines: list[bytes] = list(ODDITIES)
    for seed in SEEDS:
        for i in range(len(seed) + 1):
            lines.append(seed[:i])
        for i in range(len(seed)):
            lines.append(seed[:i] + seed[i + 1 :])
            lines.append(seed[:i] + bytes([rng.choice(replacements)]) + seed[i + 1 :])
            lines.append(seed[:i] + bytes([rng.choice(replacements)]) + seed[i:])
    return lines


def test_the_corpus_is_thousands_of_lines_and_none_breaks_the_codec() -> None:
    lines = corpus()
    assert len(lines) > 3000
    kinds: dict[str, int] = {}
    for line in lines:
        check_line(line)
        check(decode(line.decode("utf-8", "surrogateescape")))  # the str path, lone surrogates included
        result = decode(line)
        kind = result.error.code.wire if isinstance(result, Invalid) else type(result).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
    # The corpus reaches every outcome, so the invariants were exercised on each.
    assert set(kinds) >= {"parse_error", "invalid_message", "Request", "Notification", "Response", "NoneType"}
