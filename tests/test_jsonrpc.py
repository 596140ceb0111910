"""The JSON-RPC codec: §1.3 validation order, §1.4 ids, §4.1 error objects, §9 items 1-15 and 45."""

from __future__ import annotations

import importlib
import json
import logging

import msgspec
import pytest

from oam_actors.bridge.jsonrpc import (
    Invalid,
    Notification,
    Request,
    Response,
    decode,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    error_for_exception,
    require_params_object,
)
from oam_actors.errors import AgentError, ErrorCode, OamError, ProtocolError, invalid_params

PARSE = ErrorCode.PARSE_ERROR
INVALID = ErrorCode.INVALID_MESSAGE


def invalid(line: str | bytes) -> Invalid:
    result = decode(line)
    assert isinstance(result, Invalid), result
    return result


def reply(line: str | bytes) -> bytes:
    """What a bridge answers to ``line`` when the method is ``ping`` (result ``{}``)."""
    message = decode(line)
    if isinstance(message, Invalid):
        return encode_error(message.id, message.error)
    assert isinstance(message, Request) and message.method == "ping"
    return encode_result(message.id, {})


# --- §1.3 steps, one row each ----------------------------------------------------------------------


@pytest.mark.parametrize("line", ["", "   \t", b"", b" \r\n", "\t\t  "])
def test_step0_blank_lines_decode_to_none(line: str | bytes) -> None:
    assert decode(line) is None


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "id": 1, "method": ',  # §9 item 2
        '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x": bare}}',  # §9 item 3
        '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x": NaN}}',
        '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x": Infinity}}',
        '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x": -Infinity}}',
        "{'jsonrpc':'2.0','id':2,'method':'ping'}",
        '{"jsonrpc":"2.0","id":2,"method":"ping",}',
        '{"jsonrpc":"2.0","id":2,"method":"ping"} {}',
        '{"jsonrpc":"2.0","id":2,"method":"\\ud800"}',
        b'{"jsonrpc":"2.0","id":2,"method":"p\xffing"}',
        b"\xef\xbb\xbf{}",
        "[" * 100_000 + "]" * 100_000,
        '{"jsonrpc":"2.0","id":2,"method":"\ud800"}',  # a str that is not valid Unicode
        "undefined",
    ],
)
def test_step1_text_that_is_not_strict_json_is_a_parse_error_with_null_id(line: str | bytes) -> None:
    result = invalid(line)
    assert result.id is None
    assert result.error.code is PARSE
    assert result.error.message.startswith("Parse error")


def test_step1_parse_error_reply_is_exact() -> None:
    line = reply('{"jsonrpc": "2.0", "id": 1, "method": ')
    assert json.loads(line) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32700,
            "message": json.loads(line)["error"]["message"],
            "data": {"code": "parse_error"},
        },
    }
    assert line.startswith(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error')


@pytest.mark.parametrize(
    ("line", "batch"),
    [
        ('[{"jsonrpc":"2.0","id":2,"method":"ping"}]', True),  # §9 item 5
        ("[]", True),
        ("42", False),  # §9 item 8
        ('"ping"', False),
        ("null", False),
        ("true", False),
    ],
)
def test_step2_non_objects_are_invalid_with_null_id(line: str, batch: bool) -> None:
    result = invalid(line)
    assert (result.id, result.error.code) == (None, INVALID)
    assert ("batches are not supported" in result.error.message) is batch


@pytest.mark.parametrize(
    ("line", "expected_id"),
    [
        ('{"id":1,"method":"ping"}', 1),  # §9 item 4
        ('{"jsonrpc":"1.0","id":"a","method":"ping"}', "a"),
        ('{"jsonrpc":2.0,"id":3,"method":"ping"}', 3),
        ('{"jsonrpc":"2.0 ","id":8.0,"method":"ping"}', 8),
        ('{"jsonrpc":null,"id":3,"method":"ping"}', 3),
        ('{"id":true,"method":"ping"}', None),  # invalid id: null
        ('{"id":9007199254740992,"method":"ping"}', None),
        ('{"method":"ping"}', None),
    ],
)
def test_step3_wrong_version_answers_with_the_id_when_valid(line: str, expected_id: object) -> None:
    result = invalid(line)
    assert result.id == expected_id and type(result.id) is type(expected_id)
    assert result.error.code is INVALID
    assert '"jsonrpc" must be "2.0"' in result.error.message


@pytest.mark.parametrize(
    "raw_id",
    ['{"x":1}', "[1]", "true", "false", "null"],  # §9 item 6 and the §1.4 list
)
def test_step4_ids_of_the_wrong_type_are_invalid_with_null_id(raw_id: str) -> None:
    result = invalid(f'{{"jsonrpc":"2.0","id":{raw_id},"method":"ping"}}')
    assert (result.id, result.error.code) == (None, INVALID)
    assert result.error.message == 'Invalid message: "id" must be a string or a number.'


@pytest.mark.parametrize(
    "raw_id",
    [
        "9007199254740993",
        "9007199254740992",
        "1e999",
        "-1e300",
        "-1e999",
        "1e16",
        "123456789012345678901234567890",
    ],
)
def test_step4_numeric_ids_out_of_range_recommend_a_string_id(raw_id: str) -> None:
    # §9 item 10
    result = invalid(f'{{"jsonrpc":"2.0","id":{raw_id},"method":"ping"}}')
    assert (result.id, result.error.code) == (None, INVALID)
    assert "string id" in result.error.message
    assert reply(f'{{"jsonrpc":"2.0","id":{raw_id},"method":"ping"}}').startswith(
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    )


def test_step4_invalid_id_wins_over_a_bad_method_and_has_null_id() -> None:
    result = invalid('{"jsonrpc":"2.0","id":true,"method":7}')
    assert (result.id, result.error.code) == (None, INVALID)
    assert "id" in result.error.message


@pytest.mark.parametrize(
    ("line", "expected_id"),
    [
        ('{"jsonrpc":"2.0","id":4,"method":7}', 4),  # §9 item 7
        ('{"jsonrpc":"2.0","id":"x","method":""}', "x"),
        ('{"jsonrpc":"2.0","id":4,"method":null}', 4),
        ('{"jsonrpc":"2.0","id":4,"method":["ping"]}', 4),
        ('{"jsonrpc":"2.0","method":false}', None),  # a notification-shaped message
    ],
)
def test_step5_method_must_be_a_non_empty_string(line: str, expected_id: object) -> None:
    result = invalid(line)
    assert (result.id, result.error.code) == (expected_id, INVALID)
    assert result.error.message == 'Invalid message: "method" must be a non-empty string.'


def test_step6_request_and_notification() -> None:
    assert decode('{"jsonrpc":"2.0","id":1,"method":"ping"}') == Request(1, "ping", {})
    assert decode('{"jsonrpc":"2.0","method":"ping"}') == Notification("ping", {})
    assert decode('{"method":"a/b","params":{"x":[1,{"y":null}]},"jsonrpc":"2.0","id":"r"}') == Request(
        "r", "a/b", {"x": [1, {"y": None}]}
    )


@pytest.mark.parametrize("params", ["", ',"params":null'])
def test_step6_absent_or_null_params_are_an_empty_object(params: str) -> None:
    assert decode(f'{{"jsonrpc":"2.0","id":1,"method":"m"{params}}}') == Request(1, "m", {})
    assert decode(f'{{"jsonrpc":"2.0","method":"m"{params}}}') == Notification("m", {})


@pytest.mark.parametrize("params", ["[1, 2]", "[]", '"x"', "3", "true"])
def test_step6_non_object_params_are_flagged_for_the_dispatcher(params: str) -> None:
    # §9 item 15: the dispatcher answers -32602 once it knows the method exists.
    request = decode(f'{{"jsonrpc":"2.0","id":9,"method":"session/list","params":{params}}}')
    assert request == Request(9, "session/list", {}, params_error=True)
    with pytest.raises(ProtocolError) as caught:
        require_params_object(request)
    assert caught.value.to_wire() == {
        "code": -32602,
        "message": "params must be an object.",
        "data": {"code": "invalid_params"},
    }
    notification = decode(f'{{"jsonrpc":"2.0","method":"session/list","params":{params}}}')
    assert notification == Notification("session/list", {}, params_error=True)


def test_require_params_object_returns_the_params() -> None:
    request = decode('{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}')
    assert require_params_object(request) == {"a": 1}


def test_step7_responses_to_bridge_requests() -> None:
    # §9 item 13: decoded as a response; the bridge ignores unknown ids.
    assert decode('{"jsonrpc":"2.0","id":"t-99","result":{"output":"stray"}}') == Response(
        "t-99", {"output": "stray"}
    )
    failed = decode('{"jsonrpc":"2.0","id":"t-1","error":{"code":-1,"message":"no"}}')
    assert failed == Response("t-1", None, {"code": -1, "message": "no"})
    assert decode('{"jsonrpc":"2.0","id":"t-2","result":null}') == Response("t-2", None, None)
    assert decode('{"jsonrpc":"2.0","id":"t-3","result":1,"error":null}') == Response("t-3", 1, None)


@pytest.mark.parametrize(
    ("raw", "message"), [('"boom"', "boom"), ("5", "5"), ("[1]", "[1]"), ("false", "false")]
)
def test_step7_a_non_object_error_is_kept_as_its_message(raw: str, message: str) -> None:
    assert decode(f'{{"jsonrpc":"2.0","id":"t-1","error":{raw}}}') == Response(
        "t-1", None, {"message": message}
    )


@pytest.mark.parametrize(
    ("line", "expected_id"),
    [
        ('{"jsonrpc":"2.0","id":5}', 5),  # §9 item 8
        ('{"jsonrpc":"2.0"}', None),
        ('{"jsonrpc":"2.0","result":{}}', None),  # a response needs an id
        ('{"jsonrpc":"2.0","error":{}}', None),
        ('{"jsonrpc":"2.0","id":"a","params":{}}', "a"),
    ],
)
def test_step8_anything_else_is_invalid(line: str, expected_id: object) -> None:
    result = invalid(line)
    assert (result.id, result.error.code) == (expected_id, INVALID)
    assert "needs" in result.error.message and '"method"' in result.error.message


def test_step_order_version_is_checked_before_method() -> None:
    result = invalid('{"jsonrpc":"1.0","id":4,"method":7}')
    assert '"jsonrpc"' in result.error.message and result.id == 4


# --- §1.4 ids and §9 item 9 ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_id",
    [
        "7",
        "1000000000000000",
        "9007199254740991",
        "-9007199254740991",
        "4503599627370497",
        "0",
        '"abc"',
        '""',
    ],
)
def test_ids_are_echoed_exactly(raw_id: str) -> None:
    line = f'{{"jsonrpc":"2.0","id":{raw_id},"method":"ping"}}'
    assert reply(line) == f'{{"jsonrpc":"2.0","id":{raw_id},"result":{{}}}}'.encode()


@pytest.mark.parametrize(
    ("raw_id", "written"),
    [("8.0", "8"), ("8e0", "8"), ("-0.0", "0"), ("80E-1", "8"), ("1.5", "1.5"), ("-2.25", "-2.25")],
)
def test_integral_number_ids_are_written_as_plain_digits(raw_id: str, written: str) -> None:
    line = f'{{"jsonrpc":"2.0","id":{raw_id},"method":"ping"}}'
    assert reply(line) == f'{{"jsonrpc":"2.0","id":{written},"result":{{}}}}'.encode()


def test_normalised_ids_have_the_expected_types() -> None:
    assert type(decode('{"jsonrpc":"2.0","id":8.0,"method":"ping"}').id) is int
    assert type(decode('{"jsonrpc":"2.0","id":1.5,"method":"ping"}').id) is float
    assert decode('{"jsonrpc":"2.0","id":"8","method":"ping"}').id == "8"


def test_response_ids_are_normalised_too() -> None:
    assert decode('{"jsonrpc":"2.0","id":3.0,"result":1}') == Response(3, 1)
    assert invalid('{"jsonrpc":"2.0","id":1e20,"result":1}').id is None


# --- §9 items 1, 11, 12, 14, 45 ---------------------------------------------------------------------


def test_notifications_decode_as_notifications_and_one_ping_as_a_request() -> None:
    # §9 item 11: the three notifications are never answered; only the ping request is.
    lines = [
        '{"jsonrpc":"2.0","method":"ping"}',
        '{"jsonrpc":"2.0","method":"does/not/exist"}',
        '{"jsonrpc":"2.0","method":"session/respond","params":{"session":"missing","prompt":"hi"}}',
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    ]
    decoded = [decode(line) for line in lines]
    assert [type(message) for message in decoded] == [Notification, Notification, Notification, Request]
    assert decoded[2].params == {"session": "missing", "prompt": "hi"}


def test_unknown_methods_decode_and_method_not_found_encodes_with_data_method() -> None:
    # §9 item 12: the registry answers; the codec writes data.method.
    request = decode('{"jsonrpc":"2.0","id":12,"method":"npc/dance"}')
    assert request == Request(12, "npc/dance", {})
    error = ProtocolError(ErrorCode.METHOD_NOT_FOUND, "Method not found: npc/dance.", method="npc/dance")
    assert encode_error(request.id, error) == (
        b'{"jsonrpc":"2.0","id":12,"error":{"code":-32601,"message":"Method not found: npc/dance.",'
        b'"data":{"code":"method_not_found","method":"npc/dance"}}}'
    )


def test_outbound_lines_never_contain_a_raw_newline() -> None:
    # §9 item 14
    params = {
        "session": "s",
        "requestId": 3,
        "event": {"type": "textDelta", "text": "Line one\nLine two\r\u2028"},
    }
    lines = [
        encode_notification("session/event", params),
        encode_result(3, {"text": "Line one\nLine two", "chunks": 2}),
        encode_request("t-1", "tool/call", {"arguments": {"note": "a\nb"}}),
        encode_error(3, invalid_params("bad\nvalue")),
    ]
    for line in lines:
        assert b"\n" not in line and b"\r" not in line
        assert line.startswith(b'{"jsonrpc":"2.0",')
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert json.loads(lines[1])["result"]["text"] == "Line one\nLine two"


def test_large_integer_ids_have_no_exponent() -> None:
    # §9 item 45
    request_id = decode('{"jsonrpc":"2.0","id":1234567890123456,"method":"session/respond"}').id
    event = encode_notification("session/event", {"session": "s", "requestId": request_id})
    call = encode_request("t-1", "tool/call", {"session": "s", "requestId": request_id, "callId": "c"})
    response = encode_result(request_id, {"text": "ok"})
    assert b'"requestId":1234567890123456' in event and b'"requestId":1234567890123456' in call
    assert response.startswith(b'{"jsonrpc":"2.0","id":1234567890123456,"result":')
    for line in (event, call, response):
        assert b"e+" not in line and b"E" not in line


# --- encoding ------------------------------------------------------------------------------------


def test_encoders_write_keys_in_protocol_order() -> None:
    assert (
        encode_result(1, {"b": 1, "a": [1.5, None, True]})
        == b'{"jsonrpc":"2.0","id":1,"result":{"b":1,"a":[1.5,null,true]}}'
    )
    assert encode_result(None, None) == b'{"jsonrpc":"2.0","id":null,"result":null}'
    assert encode_notification("tool/cancel", {"id": "t-1", "reason": "timeout"}) == (
        b'{"jsonrpc":"2.0","method":"tool/cancel","params":{"id":"t-1","reason":"timeout"}}'
    )
    assert encode_request("t-7", "tool/call", {"name": "open_gate"}) == (
        b'{"jsonrpc":"2.0","id":"t-7","method":"tool/call","params":{"name":"open_gate"}}'
    )


def test_encoders_keep_floats_and_write_big_ints_as_digits() -> None:
    assert encode_result(1, {"x": 2.0, "y": 10**30, "z": 1e16}) == (
        b'{"jsonrpc":"2.0","id":1,"result":{"x":2.0,"y":1000000000000000000000000000000,"z":1e16}}'
    )


def test_encode_error_writes_the_error_object() -> None:
    error = ProtocolError(ErrorCode.SESSION_NOT_FOUND, "Unknown session 'gorm'.", session="gorm")
    assert encode_error("r1", error) == (
        b'{"jsonrpc":"2.0","id":"r1","error":{"code":-32020,"message":"Unknown session \'gorm\'.",'
        b'"data":{"code":"session_not_found","session":"gorm"}}}'
    )


def test_encode_raises_for_values_that_are_not_json() -> None:
    with pytest.raises((TypeError, msgspec.EncodeError)):
        encode_result(1, {"x": object()})
    with pytest.raises(UnicodeEncodeError):
        encode_result(1, "\ud800")


def test_encoded_messages_decode_back() -> None:
    assert decode(encode_request(5, "tool/call", {"a": 1})) == Request(5, "tool/call", {"a": 1})
    assert decode(encode_notification("tool/cancel", {})) == Notification("tool/cancel", {})
    assert decode(encode_result("t-1", {"output": "x"})) == Response("t-1", {"output": "x"})
    assert decode(encode_error("t-2", invalid_params("no"))) == Response(
        "t-2", None, {"code": -32602, "message": "no", "data": {"code": "invalid_params"}}
    )


# --- §4.2 normalisation --------------------------------------------------------------------------


def test_error_for_exception_keeps_protocol_errors() -> None:
    error = ProtocolError(ErrorCode.SESSION_EXISTS, "exists", session="s")
    agent = AgentError(ErrorCode.REFUSAL, "No.")
    assert error_for_exception(error) is error
    assert error_for_exception(agent) is agent


@pytest.mark.parametrize(
    "exc",
    [
        KeyError("secret detail"),
        ValueError("quantity must be positive"),
        TypeError("expected str"),
        json.JSONDecodeError("Expecting value", "x", 0),
        msgspec.ValidationError("Expected `int`, got `str`"),
    ],
)
def test_error_for_exception_hides_bugs_behind_internal_error(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    # A client's mistake is a typed error raised by params validation; whatever else escapes a
    # handler (ValueError and TypeError included) is our bug, never "invalid params".
    with caplog.at_level(logging.ERROR, logger="oam_actors.bridge.jsonrpc"):
        error = error_for_exception(exc, request_id="r-1", method="npc/talk")
    assert error.to_wire() == {
        "code": -32603,
        "message": "Internal error.",
        "data": {"code": "internal_error"},
    }
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[1] is exc
    assert "'r-1'" in record.getMessage() and "npc/talk" in record.getMessage()


@pytest.mark.parametrize(
    "module",
    [
        "oam_actors.bridge.jsonrpc",
        "oam_actors.bridge.params",
        "oam_actors.bridge.outbox",
        "oam_actors.transports.stdio",
    ],
)
def test_exported_names_exist_and_are_documented(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__doc__ and "Contract" in imported.__doc__
    for name in imported.__all__:
        assert hasattr(imported, name), name
