"""Framing and JSON-RPC rules through the real ``oam-actors stdio`` process (reference §9 items
1-15 and 45, plus oversize lines, invalid UTF-8 and stray or repeated tool replies)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import OPEN_GATE, UNPARSED, BridgeProcess, scripted


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    with BridgeProcess() as process:
        yield process
        assert process.close() == 0


def error_of(message: dict[str, Any]) -> tuple[Any, int, str]:
    """(id, JSON-RPC code, data.code) of an error response."""
    assert message["jsonrpc"] == "2.0" and "result" not in message, message
    return message["id"], message["error"]["code"], message["error"]["data"]["code"]


def test_blank_lines_get_no_reply(bridge: BridgeProcess) -> None:
    assert bridge.exchange("", "   \t", " ") == []


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "id": 1, "method": ',
        '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x": bare}}',
        '{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":NaN}}',
        "not json at all",
    ],
)
def test_text_that_is_not_strict_json_is_a_parse_error_with_null_id(bridge: BridgeProcess, line: str) -> None:
    [reply] = bridge.exchange(line)
    assert error_of(reply) == (None, -32700, "parse_error")


def test_invalid_utf8_is_a_parse_error_and_the_next_line_is_served(bridge: BridgeProcess) -> None:
    bad = b'{"jsonrpc":"2.0","id":"u","method":"ping","params":{"x":"\xff\xfe"}}'
    [reply] = bridge.exchange(bad)
    assert error_of(reply) == (None, -32700, "parse_error")


@pytest.mark.parametrize(
    ("line", "expected_id"),
    [
        ('{"id":1,"method":"ping"}', 1),  # item 4: no jsonrpc member
        ('{"jsonrpc":"1.0","id":"v","method":"ping"}', "v"),
        ('[{"jsonrpc":"2.0","id":2,"method":"ping"}]', None),  # item 5: batch
        ('{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}', None),  # item 6
        ('{"jsonrpc":"2.0","id":null,"method":"ping"}', None),
        ('{"jsonrpc":"2.0","id":true,"method":"ping"}', None),
        ('{"jsonrpc":"2.0","id":4,"method":7}', 4),  # item 7
        ('{"jsonrpc":"2.0","id":6,"method":""}', 6),
        ('{"jsonrpc":"2.0","id":5}', 5),  # item 8
        ("42", None),
        ('"ping"', None),
    ],
)
def test_messages_that_are_not_json_rpc_are_invalid(bridge: BridgeProcess, line: str, expected_id: Any) -> None:
    [reply] = bridge.exchange(line)
    assert error_of(reply) == (expected_id, -32600, "invalid_message")


def test_a_batch_is_refused_by_name(bridge: BridgeProcess) -> None:
    [reply] = bridge.exchange('[{"jsonrpc":"2.0","id":2,"method":"ping"}]')
    assert "batch" in reply["error"]["message"]


def test_ids_are_echoed_exactly_as_plain_digits(bridge: BridgeProcess) -> None:
    ids = ["7", "1000000000000000", "9007199254740991", "-9007199254740991", "4503599627370497", '"abc"', "1.5"]
    start = bridge.count()
    bridge.exchange(
        *[f'{{"jsonrpc":"2.0","id":{i},"method":"ping"}}' for i in ids], '{"jsonrpc":"2.0","id":8.0,"method":"ping"}'
    )
    raw = [line.rstrip(b"\n").decode() for line in bridge.raw_lines[start : start + len(ids) + 1]]
    assert raw == [f'{{"jsonrpc":"2.0","id":{i},"result":{{}}}}' for i in ids] + [
        '{"jsonrpc":"2.0","id":8,"result":{}}'
    ]


def test_ids_beyond_2_to_the_53_are_refused_with_advice(bridge: BridgeProcess) -> None:
    lines = [
        f'{{"jsonrpc":"2.0","id":{i},"method":"ping"}}'
        for i in ("9007199254740993", "9007199254740992", "1e999", "-1e300")
    ]
    replies = bridge.exchange(*lines)
    assert [error_of(r) for r in replies] == [(None, -32600, "invalid_message")] * 4
    assert all("string id" in r["error"]["message"] for r in replies)


def test_notifications_are_never_answered(bridge: BridgeProcess) -> None:
    lines = [
        '{"jsonrpc":"2.0","method":"ping"}',
        '{"jsonrpc":"2.0","method":"does/not/exist"}',
        '{"jsonrpc":"2.0","method":"session/respond","params":{"session":"missing","prompt":"hi"}}',
        '{"jsonrpc":"2.0","method":"session/list","params":[1,2]}',
    ]
    assert bridge.exchange(*lines) == []


def test_unknown_method_names_the_method(bridge: BridgeProcess) -> None:
    [reply] = bridge.exchange('{"jsonrpc":"2.0","id":12,"method":"npc/dance"}')
    assert error_of(reply) == (12, -32601, "method_not_found")
    assert reply["error"]["data"]["method"] == "npc/dance"


def test_unknown_method_is_reported_before_bad_params(bridge: BridgeProcess) -> None:
    [reply] = bridge.exchange('{"jsonrpc":"2.0","id":13,"method":"npc/dance","params":[1]}')
    assert error_of(reply) == (13, -32601, "method_not_found")


@pytest.mark.parametrize("params", ["[1, 2]", '"x"', "3"])
def test_params_that_are_not_an_object_are_invalid_params(bridge: BridgeProcess, params: str) -> None:
    [reply] = bridge.exchange(f'{{"jsonrpc":"2.0","id":15,"method":"session/list","params":{params}}}')
    assert error_of(reply) == (15, -32602, "invalid_params")


def test_null_params_mean_no_params(bridge: BridgeProcess) -> None:
    [reply] = bridge.exchange('{"jsonrpc":"2.0","id":16,"method":"ping","params":null}')
    assert reply == {"jsonrpc": "2.0", "id": 16, "result": {}}


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc":"2.0","id":"t-99","result":{"output":"stray"}}',  # item 13
        '{"jsonrpc":"2.0","id":"t-98","error":{"code":-32000,"message":"stray"}}',
        '{"jsonrpc":"2.0","id":77,"result":"never asked"}',
        '{"jsonrpc":"2.0","id":"t-1","error":"boom"}',
    ],
)
def test_replies_to_requests_that_never_existed_are_ignored(bridge: BridgeProcess, line: str) -> None:
    assert bridge.exchange(line) == []


def test_streamed_text_with_newlines_stays_one_message_per_line(bridge: BridgeProcess) -> None:
    bridge.call(
        "session/create", {"session": "lines", "model": scripted([{"text": "Line one\nLine two", "chunks": 2}])}
    )
    start = bridge.count()
    result = bridge.call("session/respond", {"session": "lines", "prompt": "two lines", "stream": True})
    assert result["text"] == "Line one\nLine two"
    messages = bridge.since(start)
    assert all(UNPARSED not in m and m["jsonrpc"] == "2.0" for m in messages)
    deltas = [
        m["params"]["event"]["delta"]
        for m in messages
        if m.get("method") == "session/event" and m["params"]["event"]["type"] == "text"
    ]
    assert "".join(deltas) == "Line one\nLine two"


def test_large_numeric_request_id_is_written_in_full_everywhere(bridge: BridgeProcess) -> None:
    big = 1234567890123456
    bridge.call(
        "session/create",
        {
            "session": "bigid",
            "tools": [OPEN_GATE],
            "model": scripted(
                [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"text": "Done."}]
            ),
        },
    )
    start = len(bridge.raw_lines)
    bridge.request("session/respond", {"session": "bigid", "prompt": "open", "stream": True}, id=big)
    call = bridge.tool_call(big)
    bridge.reply(call["id"], {"output": "opened"})
    bridge.result(big)
    raw = [line.decode() for line in bridge.raw_lines[start:]]
    about = [line for line in raw if str(big) in line]
    assert any('"method":"session/event"' in line for line in about)
    assert any('"method":"tool/call"' in line for line in about)
    assert all(f'"requestId":{big}' in line for line in about if '"method"' in line)
    assert any(line.startswith(f'{{"jsonrpc":"2.0","id":{big},"result":') for line in raw)
    # no id written as a float (1e+19): an exponent anywhere else (a random hex call id) is fine
    assert not any(re.search(r'"(?:id|requestId)":-?\d+(?:\.\d+)?[eE]', line) for line in about)


def test_a_tool_call_answered_twice_uses_the_first_answer(bridge: BridgeProcess) -> None:
    bridge.call(
        "session/create",
        {
            "session": "twice",
            "tools": [OPEN_GATE],
            "model": scripted(
                [
                    {"toolCalls": [{"name": "open_gate", "arguments": {"gate": "east"}}]},
                    {"template": "got {toolOutput}"},
                ]
            ),
        },
    )
    request = bridge.request("session/respond", {"session": "twice", "prompt": "open"})
    call = bridge.tool_call(request)
    bridge.reply(call["id"], {"output": "first"})
    bridge.reply(call["id"], {"output": "second"})
    result = bridge.result(request)
    assert result["text"] == "got first"
    assert [r["output"] for r in result["toolCalls"]] == ["first"]
    assert bridge.exchange(json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": {"output": "third"}})) == []


def test_every_line_written_is_one_json_rpc_message(bridge: BridgeProcess) -> None:
    bridge.exchange('{"jsonrpc":"2.0","id":"last","method":"session/list"}')
    assert bridge.log, "nothing was written"
    assert all(UNPARSED not in m and m.get("jsonrpc") == "2.0" for m in bridge.log)
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in bridge.raw_lines)


def test_a_line_over_the_limit_is_refused_and_the_next_line_is_served() -> None:
    with BridgeProcess(["--max-line-bytes", "65536"]) as bridge:
        huge = '{"jsonrpc":"2.0","id":"huge","method":"ping","params":{"pad":"' + "x" * (6 * 1024 * 1024) + '"}}'
        fits = '{"jsonrpc":"2.0","id":"fits","method":"ping","params":{"pad":"' + "y" * 60000 + '"}}'
        replies = bridge.exchange(huge, fits)
        assert [error_of(replies[0]), replies[1]] == [
            (None, -32600, "invalid_message"),
            {"jsonrpc": "2.0", "id": "fits", "result": {}},
        ]
        assert "65536" in replies[0]["error"]["message"]
        assert bridge.close() == 0
