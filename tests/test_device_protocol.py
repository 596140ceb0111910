"""The device protocol's pure parts: the ML Kit table, wire shapes, the NDJSON framer, the
availability mapping and the client's error/request translation (no I/O)."""

from __future__ import annotations

import msgspec
import pytest

from oam_actors import ErrorCode, GenerationRequest, Sampling, StepKind
from oam_actors.models import device
from oam_actors.models.device import protocol as wire
from oam_actors.models.device.client import FailureKind, error_from_body, generate_body

# protocol-core §4.3, row by row
MLKIT_TABLE = [
    (9, ErrorCode.RATE_LIMITED),
    (27, ErrorCode.RATE_LIMITED),
    (28, ErrorCode.RATE_LIMITED),
    (30, ErrorCode.RATE_LIMITED),
    (4, ErrorCode.GUARDRAIL_VIOLATION),
    (11, ErrorCode.GUARDRAIL_VIOLATION),
    (15, ErrorCode.GUARDRAIL_VIOLATION),
    (12, ErrorCode.CONTEXT_SIZE_EXCEEDED),
    (8, ErrorCode.MODEL_UNAVAILABLE),
    (16, ErrorCode.MODEL_UNAVAILABLE),
    (501, ErrorCode.MODEL_UNAVAILABLE),
    (604, ErrorCode.MODEL_UNAVAILABLE),
    (-101, ErrorCode.MODEL_UNAVAILABLE),
    (7, ErrorCode.CANCELLED),
    (-100, ErrorCode.INVALID_REQUEST),
    (-102, ErrorCode.INVALID_REQUEST),
    (-104, ErrorCode.INVALID_SCHEMA),
    (0, ErrorCode.GENERATION_FAILED),
    (-103, ErrorCode.GENERATION_FAILED),
    (12345, ErrorCode.GENERATION_FAILED),
]


@pytest.mark.parametrize(("mlkit", "expected"), MLKIT_TABLE)
def test_each_mlkit_code_maps_to_its_agent_code(mlkit: int, expected: ErrorCode) -> None:
    assert wire.agent_code_for(mlkit) is expected


def test_only_quota_codes_are_quota_codes() -> None:
    assert [code for code, _ in MLKIT_TABLE if wire.is_quota_code(code)] == [9, 27, 28, 30]


def test_mlkit_names_and_http_statuses() -> None:
    assert wire.mlkit_name(9) == "BUSY"
    assert wire.mlkit_name(-101) == "AICORE_INCOMPATIBLE"
    assert wire.mlkit_name(77) == "CODE_77"
    assert [wire.http_status_for(c) for c in (9, 30, 4, 12, 8, -100, 0)] == [429, 429, 422, 413, 503, 400, 500]


def test_the_package_exports_exactly_its_api() -> None:
    assert sorted(device.__all__) == device.__all__
    assert all(hasattr(device, name) for name in device.__all__)


# --- wire shapes ---------------------------------------------------------------------------------


def test_generate_body_carries_sampling_and_drops_what_is_unset() -> None:
    request = GenerationRequest(kind=StepKind.DECIDE, system="Be brief.", prompt="Hi", temperature=0.0,
                                max_output_tokens=256, sampling=Sampling(top_k=1, top_p=0.9, seed=7))
    encoded = msgspec.json.decode(wire.encode(generate_body(request, "r1")))
    assert encoded == {"prompt": "Hi", "systemInstruction": "Be brief.", "temperature": 0.0, "topK": 1,
                       "seed": 7, "maxOutputTokens": 256, "requestId": "r1"}
    bare = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="Hi")
    assert msgspec.json.decode(wire.encode(generate_body(bare, "r2"))) == {"prompt": "Hi", "requestId": "r2"}


def test_stream_events_decode_by_type() -> None:
    assert wire.decode_event(b'{"type":"text","text":"Hel"}') == wire.TextEvent("Hel")
    done = wire.decode_event(b'{"type":"done","inputTokens":10,"outputTokens":3,"finishReason":"max_tokens"}')
    assert done == wire.DoneEvent(input_tokens=10, output_tokens=3, finish_reason=wire.FinishReason.MAX_TOKENS)
    error = wire.decode_event(b'{"type":"error","error":{"name":"BUSY","message":"m","mlkitCode":9,"retryAfterMs":1500}}')
    assert error == wire.ErrorEvent(wire.ErrorBody(name="BUSY", message="m", mlkit_code=9, retry_after_ms=1500))
    for bad in (b'{"type":"thinking","text":"x"}', b'{"type":"text"}', b"\x00\xff", b"[1]"):
        with pytest.raises(msgspec.DecodeError):
            wire.decode_event(bad)


def test_device_status_round_trips_in_camel_case() -> None:
    body = (b'{"protocolVersion":"1.0","status":"downloading","foreground":true,"reason":"model_not_ready",'
            b'"bytesDownloaded":10,"totalBytes":100,"features":{"modelName":"nano-v3","inputTokenLimit":4000,'
            b'"maxOutputTokens":256,"systemInstructions":true,"prefixCaching":false}}')
    status = wire.decode_status(body)
    assert status.status is wire.ModelStatus.DOWNLOADING
    assert status.features.model_name == "nano-v3"
    assert msgspec.json.decode(wire.encode(status)) == msgspec.json.decode(body.replace(b',"prefixCaching":false', b""))


def test_an_error_body_that_is_not_json_is_not_an_error_object() -> None:
    assert wire.decode_error_response(b"<html>502</html>") is None
    assert wire.decode_error_response(b'{"error":{"name":"NOT_FOUND","message":"x"}}') == wire.ErrorBody("NOT_FOUND", "x")


# --- framing -------------------------------------------------------------------------------------


def test_the_framer_splits_lines_however_the_body_is_chunked() -> None:
    body = b'{"a":1}\r\n\n{"b":2}\n  \n{"c":3}'
    for size in (1, 2, 5, len(body)):
        framer = wire.LineFramer()
        lines = [line for i in range(0, len(body), size) for line in framer.feed(body[i:i + size])]
        assert lines + framer.finish() == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_the_framer_refuses_a_line_without_end() -> None:
    framer = wire.LineFramer(max_line_bytes=8)
    assert framer.feed(b"12345678\n") == [b"12345678"]
    with pytest.raises(ValueError, match="exceeds 8 bytes"):
        framer.feed(b"123456789")


# --- availability and errors ---------------------------------------------------------------------


def _status(**fields: object) -> wire.DeviceStatus:
    return msgspec.convert({"protocolVersion": "1.0", "foreground": True, **fields}, wire.DeviceStatus)


def test_availability_of_a_ready_phone() -> None:
    status = _status(status="available", features={"modelName": "nano-v3", "inputTokenLimit": 3900,
                                                    "maxOutputTokens": 256})
    assert wire.availability_from_status(status).to_wire() == {
        "available": True, "contextSize": 3900, "variant": "nano-v3", "supportedLanguages": [],
        "status": "available", "maxOutputTokens": 256}


def test_availability_while_downloading_reports_progress() -> None:
    status = _status(status="downloading", reason="model_not_ready", bytesDownloaded=5, totalBytes=20)
    assert wire.availability_from_status(status).to_wire() == {
        "available": False, "reason": "model_not_ready", "contextSize": 4000, "supportedLanguages": [],
        "status": "downloading", "bytesDownloaded": 5, "totalBytes": 20}


def test_availability_in_the_background_is_available_with_a_detail() -> None:
    availability = wire.availability_from_status(_status(status="available", foreground=False))
    assert availability.available is True
    assert "background" in (availability.detail or "")


def test_an_mlkit_error_keeps_its_code_and_retry_delay() -> None:
    error = error_from_body(wire.ErrorBody("BUSY", "busy", mlkit_code=9, retry_after_ms=2500), 429)
    assert (error.code, error.kind, error.mlkit_code, error.retry_after) == (
        ErrorCode.RATE_LIMITED, FailureKind.MLKIT, 9, 2.5)
    assert error.data()["retryAfterSeconds"] == 3


@pytest.mark.parametrize(("status", "expected"), [
    (401, ErrorCode.MODEL_UNAVAILABLE), (404, ErrorCode.MODEL_UNAVAILABLE), (429, ErrorCode.RATE_LIMITED),
    (503, ErrorCode.BUSY), (400, ErrorCode.INVALID_REQUEST), (500, ErrorCode.GENERATION_FAILED)])
def test_a_protocol_error_maps_by_http_status(status: int, expected: ErrorCode) -> None:
    error = error_from_body(wire.ErrorBody("X", "x"), status)
    assert (error.code, error.kind, error.mlkit_code) == (expected, FailureKind.REJECTED, None)
