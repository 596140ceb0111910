"""Thousands of malformed and random lines through ONE ``oam-actors stdio`` process.

Each line is classified by an independent restatement of the inbound table (reference §1.3): no
reply (blank, notification, reply to a bridge request), ``-32700`` with ``id: null``, ``-32600``
with the id it names, or a request that gets exactly one response with its id. After every batch
the multiset of response ids must equal the predicted one, every response must be well formed, and
the process must still answer a ping.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_process import BridgeProcess, is_response

MAX_SAFE_INTEGER = 2**53 - 1
WIRE_CODES = {
    -32700: "parse_error",
    -32600: "invalid_message",
    -32601: "method_not_found",
    -32602: "invalid_params",
    -32603: "internal_error",
    -32001: "model_unavailable",
    -32007: "invalid_schema",
    -32009: "cancelled",
    -32010: "busy",
    -32011: "invalid_request",
    -32012: "generation_failed",
    -32020: "session_not_found",
    -32021: "session_exists",
    -32022: "session_limit",
}
SESSIONS = ["fz1", "fz2", "fz3"]
# Everything but shutdown (it would end the process) and anything slow.
SEEDS = [
    {"method": "ping"},
    {"method": "initialize", "params": {"client": {"name": "fuzz"}, "protocolVersion": "1.0"}},
    {"method": "model/availability"},
    {"method": "session/list"},
    {
        "method": "session/create",
        "params": {"session": "made", "instructions": "Hi.", "model": {"type": "scripted", "steps": [{"text": "ok"}]}},
    },
    {
        "method": "session/create",
        "params": {"model": "scripted", "options": {"toolChoice": "auto", "maxToolRounds": 2}},
    },
    {"method": "session/respond", "params": {"session": "fz1", "prompt": "hello", "stream": True}},
    {
        "method": "session/respond",
        "params": {
            "session": "fz2",
            "prompt": "x",
            "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
        },
    },
    {"method": "session/cancel", "params": {"session": "fz1"}},
    {"method": "session/transcript", "params": {"session": "fz3"}},
    {"method": "session/setInstructions", "params": {"session": "fz3", "instructions": "Be brief."}},
    {"method": "session/setContextNote", "params": {"session": "fz2", "note": "n"}},
    {"method": "session/setTools", "params": {"session": "fz3", "tools": [{"name": "wave", "description": "Wave."}]}},
    {"method": "session/reset", "params": {"session": "fz2"}},
    {"method": "session/compact", "params": {"session": "fz1", "keepRecentTurns": 1}},
    {"method": "schema/validate", "params": {"schema": {"type": "object", "properties": {"m": {"enum": ["a", "b"]}}}}},
    {"method": "tools/validate", "params": {"tools": [{"name": "open_gate", "parameters": {"type": "object"}}]}},
    {"method": "session/delete", "params": {"session": "made"}},
]
ANSWERED: set[str] = set()  # tool/call ids the fuzz driver answered (one process for the module)
FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


# --- the oracle: an independent restatement of §1.3 ---------------------------------------------


class _NotStrict(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotStrict(name)


def _check_strings(value: Any) -> None:
    """Strict JSON has no lone surrogates (Python's json accepts their escapes)."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)


def _valid_id(value: Any) -> tuple[bool, Any]:
    if isinstance(value, str):
        return True, value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False, None
    if not (math.isfinite(value) and abs(value) <= MAX_SAFE_INTEGER):
        return False, None
    return True, int(value) if isinstance(value, float) and value.is_integer() else value


def expected_reply(line: bytes) -> tuple[int | None, Any] | None:
    """``None``: no reply. Else (code, id): code ``-32700``/``-32600``, or ``None`` for a request
    (any outcome), and the id the reply must carry."""
    text = line[:-1] if line.endswith(b"\r") else line  # the transport strips one "\r"
    if not text.strip(b" \t\r\n"):
        return None
    try:
        value = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
        _check_strings(value)
    except (ValueError, RecursionError):
        return -32700, None
    if not isinstance(value, dict):
        return -32600, None
    has_id = "id" in value
    id_ok, request_id = _valid_id(value["id"]) if has_id else (False, None)
    if value.get("jsonrpc") != "2.0":
        return -32600, request_id
    if has_id and not id_ok:
        return -32600, None
    if "method" in value:
        if not isinstance(value["method"], str) or not value["method"]:
            return -32600, request_id
        return (None, request_id) if has_id else None
    if has_id and ("result" in value or "error" in value):
        return None
    return -32600, request_id


# --- driving the process --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    with BridgeProcess() as process:
        for session in SESSIONS:
            process.call("session/create", {"session": session, "model": "scripted"})
        yield process
        assert process.call("ping") == {}
        assert process.proc.poll() is None
        assert process.close() == 0


def check_well_formed(message: dict[str, Any]) -> None:
    assert message["jsonrpc"] == "2.0"
    if "error" in message:
        assert list(message) == ["jsonrpc", "id", "error"], message
        error = message["error"]
        assert list(error) == ["code", "message", "data"] and isinstance(error["message"], str) and error["message"]
        assert WIRE_CODES.get(error["code"], error["data"]["code"]) == error["data"]["code"], message
    else:
        assert list(message) == ["jsonrpc", "id", "result"], message


def unanswered_tool_calls(log: list[dict[str, Any]], answered: set[str]) -> list[str]:
    return [m["id"] for m in log if m.get("method") == "tool/call" and m["id"] not in answered]


def answer_tool_calls(bridge: BridgeProcess, answered: set[str]) -> None:
    """A forced tool may be called by a fuzzed turn: answer it so the turn can end."""
    for tool_id in unanswered_tool_calls(bridge.since(0), answered):
        answered.add(tool_id)
        bridge.reply(tool_id, {"output": "fuzzed"})


def run_batch(bridge: BridgeProcess, lines: list[bytes]) -> None:
    lines = [line.replace(b"\n", b" ") for line in lines]
    expected = [reply for reply in map(expected_reply, lines) if reply is not None]
    start = bridge.count()
    bridge.send_raw(b"".join(line + b"\n" for line in lines))
    answered = ANSWERED

    def replies(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [m for m in log[start:] if is_response(m)]

    while True:
        bridge.wait_until(lambda log: len(replies(log)) >= len(expected) or bool(unanswered_tool_calls(log, answered)))
        answer_tool_calls(bridge, answered)
        if len(replies(bridge.log)) >= len(expected):
            break
    got = replies(bridge.since(0))
    # Nothing more was owed: the sync ping's answer is the next response (a turn started by a
    # notification may still stream events).
    assert not any(is_response(m) for m in bridge.exchange())
    for message in got:
        check_well_formed(message)
    assert Counter(_key(m["id"]) for m in got) == Counter(_key(i) for _, i in expected)
    for code in (-32700, -32600):
        predicted = sum(1 for c, _ in expected if c == code)
        assert sum(1 for m in got if "error" in m and m["error"]["code"] == code) == predicted, code


def _key(request_id: Any) -> tuple[str, Any]:
    # 1 and "1" are different ids; 8 and 8.0 are the same.
    return ("str", request_id) if isinstance(request_id, str) else ("num", request_id)


# --- strategies ------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
ids = st.one_of(
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from([None, True, [], {}, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER, 8.0, 1.5, "t-1"]),
)
methods = st.one_of(
    st.sampled_from([seed["method"] for seed in SEEDS] + ["npc/dance", "", "tool/call", "session/event"]),
    st.text(max_size=10).filter(lambda m: m != "shutdown"),
    st.integers(),
    st.none(),
)
seed_params = st.sampled_from([seed.get("params", {}) for seed in SEEDS])
params = st.one_of(
    seed_params, values, st.fixed_dictionaries({"session": st.sampled_from(SESSIONS), "prompt": st.text(max_size=5)})
)
valid_ids = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER), st.text(max_size=6), st.sampled_from([8.0, 1.5, -0.0])
)
requests = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": valid_ids,
        "method": st.sampled_from([seed["method"] for seed in SEEDS] + ["npc/dance"]),
        "params": params,
    },
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0, None]),
        "id": ids,
        "method": methods,
        "params": params,
        "result": values,
        "error": values,
    },
)


@st.composite
def mutated_seed(draw: st.DrawFn) -> bytes:
    seed = draw(st.sampled_from(SEEDS))
    line = json.dumps({"jsonrpc": "2.0", "id": draw(ids), **seed}).encode()
    at = draw(st.integers(0, len(line)))
    edit = draw(st.sampled_from(["truncate", "delete", "insert", "replace"]))
    junk = draw(st.binary(min_size=1, max_size=3))
    if edit == "truncate":
        return line[:at]
    if edit == "delete":
        return line[:at] + line[at + len(junk) :]
    if edit == "insert":
        return line[:at] + junk + line[at:]
    return line[:at] + junk + line[at + len(junk) :]


def encoded(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode()


lines = st.one_of(
    requests.map(encoded),
    requests.map(encoded),
    messages.map(encoded),
    values.map(encoded),
    mutated_seed(),
    st.binary(max_size=30),
    st.text(max_size=30).map(str.encode),
    st.sampled_from(
        [
            b"",
            b"   ",
            b"\r",
            b"[]",
            b"{}",
            b"null",
            b'{"jsonrpc":"2.0"}',
            b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
        ]
    ),
)


# --- tests -------------------------------------------------------------------------------------------


@FUZZ
@given(batch=st.lists(lines, min_size=60, max_size=140))
def test_random_lines_get_exactly_the_replies_they_ask_for(bridge: BridgeProcess, batch: list[bytes]) -> None:
    run_batch(bridge, batch)


def test_every_truncation_and_deletion_of_valid_requests(bridge: BridgeProcess) -> None:
    batch = []
    for number, seed in enumerate(SEEDS[:6]):
        line = json.dumps({"jsonrpc": "2.0", "id": f"cut-{number}", **seed}).encode()
        batch += [line[:cut] for cut in range(len(line))]
        batch += [line[:at] + line[at + 1 :] for at in range(len(line))]
    assert len(batch) > 1000
    run_batch(bridge, batch)


def test_valid_requests_in_bulk_each_get_one_response(bridge: BridgeProcess) -> None:
    batch = [json.dumps({"jsonrpc": "2.0", "id": f"bulk-{n}", **SEEDS[n % len(SEEDS)]}).encode() for n in range(400)]
    run_batch(bridge, batch)
