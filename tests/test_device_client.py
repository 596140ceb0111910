"""``DeviceModel`` against real simulated phones on loopback (and a few hand-written raw servers):
every ML Kit error path, availability and downloads, token counting, streaming, hangs,
disconnects, garbage and unreachable phones."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import h11
import httpx
import pytest

from oam_actors.agent.model import GenerationRequest, StepKind, Usage, estimate_tokens
from oam_actors import ErrorCode
from oam_actors.models.device import (
    DeviceError,
    DeviceModel,
    DeviceTimeouts,
    FailureKind,
    ManualClock,
    PhoneConfig,
    SimulatedPhone,
)
from oam_actors.models.device.protocol import ModelStatus, UnavailableReason

GUARD = 10.0  # seconds; only so that a broken test fails instead of hanging the suite
FAST = PhoneConfig(time_scale=0.001, tokens_per_s=0.0)
ASK = GenerationRequest(kind=StepKind.RESPOND, system="You are Gorm.", prompt="What does the ale cost?")


@contextlib.asynccontextmanager
async def phone(config: PhoneConfig = FAST, *, clock: ManualClock | None = None,
                **model: Any) -> AsyncIterator[tuple[SimulatedPhone, DeviceModel]]:
    with anyio.fail_after(GUARD):
        async with SimulatedPhone(config, clock=clock) as running, DeviceModel(running.url, **model) as client:
            yield running, client


async def collect(model: DeviceModel, request: GenerationRequest = ASK) -> tuple[str, list[Usage]]:
    pieces = [piece async for piece in model.stream(request)]
    return "".join(p for p in pieces if isinstance(p, str)), [p for p in pieces if isinstance(p, Usage)]


async def failure(model: DeviceModel, request: GenerationRequest = ASK) -> tuple[DeviceError, str]:
    """The error a generation ends with, and the text that had arrived before it."""
    text: list[str] = []
    with pytest.raises(DeviceError) as caught:
        async for piece in model.stream(request):
            if isinstance(piece, str):
                text.append(piece)
    return caught.value, "".join(text)


# --- streaming -----------------------------------------------------------------------------------


async def test_a_generation_streams_text_then_its_usage() -> None:
    async with phone() as (_, model):
        pieces = [piece async for piece in model.stream(ASK)]
    text = "".join(p for p in pieces if isinstance(p, str))
    assert len(pieces) > 3 and text.startswith(("Aye.", "Well now.", "Hm.", "Of course.", "Right.", "Ah."))
    assert "About cost: I can help with that." in text
    assert pieces[-1] == Usage(input_tokens=estimate_tokens("You are Gorm.") + estimate_tokens(ASK.prompt),
                               output_tokens=estimate_tokens(text))


async def body_chunks(url: str, request: dict[str, Any], *, stall: float = 0.0) -> list[bytes]:
    """The chunks of a ``/v1/generate`` answer as the phone wrote them (h11 marks where each
    begins, however TCP cut them up). ``stall``: seconds to block the event loop (the phone's
    too) once the first chunk is in."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps(request).encode()
    http = h11.Connection(h11.CLIENT)
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(http.send(h11.Request(method="POST", target="/v1/generate", headers=[
            ("Host", host), ("Content-Type", "application/json"), ("Content-Length", str(len(body)))])) or b"")
        await stream.send((http.send(h11.Data(data=body)) or b"") + (http.send(h11.EndOfMessage()) or b""))
        chunks: list[bytes] = []
        while not isinstance(event := http.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                http.receive_data(await stream.receive())
            elif isinstance(event, h11.Data):
                if event.chunk_start or not chunks:
                    chunks.append(b"")
                    if len(chunks) == 1 and stall:
                        time.sleep(stall)
                chunks[-1] += event.data
    return chunks


async def test_without_a_token_rate_the_whole_answer_leaves_in_one_write() -> None:
    # A write per word costs a turn of both event loops per word: under load a long answer (a
    # coalesced batch) then held the phone, one generation at a time, for many pacing intervals.
    ask = {"prompt": "What is on the menu today, and what does the ale cost?", "systemInstruction": "You are Gorm."}
    async with phone() as (running, _):
        at_once = await body_chunks(running.url, ask)
    async with phone(PhoneConfig(time_scale=0.02, tokens_per_s=1.0)) as (running, _):
        paced = await body_chunks(running.url, ask)
    lines = at_once[0].splitlines()
    assert len(at_once) == 1 and len(lines) > 3 and b'"type":"done"' in lines[-1].replace(b" ", b"")
    assert len(paced) > 1 and b"".join(paced) == at_once[0]  # the same text, in pieces as it decodes


async def test_a_paced_phone_keeps_its_rate_when_the_loop_wakes_it_late() -> None:
    # A phone decodes on its own hardware: when the shared event loop was busy past the time its
    # next words were due, they all leave at once instead of each waiting its own interval again.
    ask = {"prompt": "What is on the menu today, and what does the ale cost?", "systemInstruction": "You are Gorm."}
    config = PhoneConfig(time_scale=0.02, tokens_per_s=1.0)
    async with phone(config) as (running, _):
        steady = await body_chunks(running.url, ask)
    async with phone(config) as (running, _):
        stalled = await body_chunks(running.url, ask, stall=3.0)
    assert b"".join(stalled) == b"".join(steady)
    assert len(steady) > 4 and len(stalled) <= 3  # the first word; then everything due, and the end


async def test_the_same_seed_streams_the_same_text() -> None:
    async with phone(PhoneConfig(time_scale=0.001, seed=9)) as (_, first):
        one = await collect(first)
    async with phone(PhoneConfig(time_scale=0.001, seed=9)) as (_, second):
        assert await collect(second) == one


async def test_the_output_cap_truncates_the_text() -> None:
    async with phone() as (_, model):
        text, [usage] = await collect(model, GenerationRequest(kind=StepKind.RESPOND, system="", prompt="Hi there",
                                                               max_output_tokens=3))
    assert len(text) <= 12 and usage.output_tokens <= 3


async def test_the_second_request_with_the_same_system_reuses_the_prefix() -> None:
    async with phone() as (_, model):
        _, [first] = await collect(model)
        _, [second] = await collect(model)
    assert (first.cached_input_tokens, second.cached_input_tokens) == (0, estimate_tokens("You are Gorm."))


async def test_closing_a_stream_early_leaves_the_phone_serving() -> None:
    async with phone(PhoneConfig(time_scale=0.001, tokens_per_s=200.0)) as (running, model):
        stream = model.stream(ASK)
        assert isinstance(await stream.__anext__(), str)
        await stream.aclose()
        text, [_] = await collect(model)
        assert text and running.statistics().admitted == 2


# --- ML Kit errors ---------------------------------------------------------------------------


async def test_busy_after_the_quota_is_rate_limited_with_the_window_as_retry_delay() -> None:
    clock = ManualClock()
    config = PhoneConfig(time_scale=0.01, tokens_per_s=0.0)
    async with phone(config, clock=clock) as (_, model):
        for _ in range(36):
            await collect(model)
        clock.advance(20.0)
        error, text = await failure(model)
        assert (error.code, error.kind, error.mlkit_code, text) == (ErrorCode.RATE_LIMITED, FailureKind.MLKIT, 9, "")
        assert error.retry_after == pytest.approx(0.4)  # 40 phone seconds left × time_scale
        assert error.to_wire()["data"]["retryAfterSeconds"] == 1
        clock.advance(40.0)
        assert (await collect(model))[0]


@pytest.mark.parametrize("code", [27, 28])
async def test_battery_quotas_are_rate_limited_for_a_long_time(code: int) -> None:
    config = PhoneConfig(time_scale=0.001, battery_requests=1, battery_code=code)
    async with phone(config, clock=ManualClock()) as (_, model):
        await collect(model)
        error, _ = await failure(model)
    assert (error.code, error.mlkit_code, error.retry_after) == (ErrorCode.RATE_LIMITED, code, pytest.approx(86.4))


async def test_background_use_is_rate_limited_while_availability_still_answers() -> None:
    async with phone() as (running, model):
        running.set_foreground(False)
        error, _ = await failure(model)
        availability = await model.availability()
        status = await model.status()
        running.set_foreground(True)
        assert (await collect(model))[0]
    assert (error.code, error.mlkit_code, error.retry_after) == (ErrorCode.RATE_LIMITED, 30, None)
    assert availability.available and "background" in (availability.detail or "")
    assert status.foreground is False


@pytest.mark.parametrize(("code", "text_arrives"), [(4, False), (15, True), (11, True)])
async def test_safety_blocks_are_guardrail_violations(code: int, text_arrives: bool) -> None:
    async with phone(PhoneConfig(time_scale=0.001, blocked_words={"dragon": code})) as (_, model):
        error, text = await failure(model, GenerationRequest(kind=StepKind.RESPOND, system="",
                                                             prompt="Tell me of the dragon"))
    assert (error.code, error.mlkit_code, bool(text)) == (ErrorCode.GUARDRAIL_VIOLATION, code, text_arrives)


async def test_a_prompt_over_the_input_budget_exceeds_the_context_size() -> None:
    async with phone(PhoneConfig(time_scale=0.001, input_token_limit=8)) as (_, model):
        error, _ = await failure(model)
    assert (error.code, error.mlkit_code) == (ErrorCode.CONTEXT_SIZE_EXCEEDED, 12)


async def test_an_unknown_failure_fails_the_generation() -> None:
    async with phone(PhoneConfig(time_scale=0.001, fault_unknown=1.0)) as (_, model):
        error, _ = await failure(model)
    assert (error.code, error.mlkit_code, error.http_status) == (ErrorCode.GENERATION_FAILED, 0, 500)


async def test_a_model_still_downloading_is_unavailable_then_becomes_available() -> None:
    clock = ManualClock()
    config = PhoneConfig(time_scale=0.001, status=ModelStatus.DOWNLOADABLE, download_bytes=1000,
                         download_bytes_per_s=100.0)
    async with phone(config, clock=clock) as (_, model):
        error, _ = await failure(model)
        before = await model.availability()
        await model.download()
        clock.advance(4.0)
        during = await model.availability()
        with pytest.raises(DeviceError) as counting:
            await model.count_tokens("hello")
        clock.advance(6.0)
        after = await model.availability()
        text, _ = await collect(model)
    assert (error.code, error.mlkit_code) == (ErrorCode.MODEL_UNAVAILABLE, 8)
    assert before.to_wire() == {"available": False, "reason": "model_not_ready", "contextSize": 4000,
                                "variant": "nano-v3", "supportedLanguages": [], "status": "downloadable",
                                "maxOutputTokens": 256, "totalBytes": 1000}
    assert (during.status, during.bytesDownloaded, during.totalBytes) == ("downloading", 400, 1000)
    assert counting.value.code is ErrorCode.MODEL_UNAVAILABLE
    assert (after.available, after.status) == (True, "available") and text


async def test_an_ineligible_phone_is_unavailable_and_cannot_download() -> None:
    config = PhoneConfig(time_scale=0.001, status=ModelStatus.UNAVAILABLE,
                         unavailable_reason=UnavailableReason.NOT_ENOUGH_DISK_SPACE)
    async with phone(config) as (_, model):
        availability = await model.availability()
        with pytest.raises(DeviceError) as downloading:
            await model.download()
        error, _ = await failure(model)
    assert (availability.available, availability.reason) == (False, "not_enough_disk_space")
    assert (downloading.value.code, downloading.value.mlkit_code) == (ErrorCode.MODEL_UNAVAILABLE, 501)
    assert (error.code, error.mlkit_code) == (ErrorCode.MODEL_UNAVAILABLE, 501)


# --- status, features, tokens, auth --------------------------------------------------------------


async def test_status_updates_the_capabilities_from_the_detected_features() -> None:
    config = PhoneConfig(time_scale=0.001, input_token_limit=3000, max_output_tokens=4096, model_name="nano-v2")
    async with phone(config) as (_, model):
        status = await model.status()
    assert (status.features.model_name, status.features.prefix_caching) == ("nano-v2", True)
    assert (model.capabilities.context_size, model.capabilities.max_output_tokens) == (3000, 4096)


async def test_tokens_are_counted_by_the_phone() -> None:
    async with phone() as (_, model):
        assert await model.count_tokens("12345678", system="abcd") == 3
        assert await model.count_tokens("") == 0


async def test_a_token_protected_phone_needs_its_token() -> None:
    config = PhoneConfig(time_scale=0.001, token="s3cret")
    async with phone(config) as (running, anonymous):
        error, _ = await failure(anonymous)
        async with DeviceModel(running.url, token="s3cret") as trusted:
            assert (await collect(trusted))[0]
    assert (error.code, error.kind, error.http_status) == (ErrorCode.MODEL_UNAVAILABLE, FailureKind.REJECTED, 401)


# --- broken phones -------------------------------------------------------------------------------


async def test_a_phone_that_hangs_mid_stream_fails_after_the_read_timeout() -> None:
    config = PhoneConfig(time_scale=0.001, fault_hang=1.0)
    async with phone(config, timeouts=DeviceTimeouts(read=0.3)) as (_, model):
        error, text = await failure(model)
    assert (error.code, error.kind) == (ErrorCode.GENERATION_FAILED, FailureKind.TIMEOUT) and text


async def test_a_disconnect_mid_stream_fails_the_generation() -> None:
    async with phone(PhoneConfig(time_scale=0.001, fault_disconnect=1.0)) as (_, model):
        error, text = await failure(model)
    assert (error.code, error.kind) == (ErrorCode.GENERATION_FAILED, FailureKind.DISCONNECTED) and text


async def test_a_garbage_line_mid_stream_fails_the_generation() -> None:
    async with phone(PhoneConfig(time_scale=0.001, fault_garbage=1.0)) as (_, model):
        error, text = await failure(model)
    assert (error.code, error.kind) == (ErrorCode.GENERATION_FAILED, FailureKind.MALFORMED) and text


async def test_a_random_generation_error_is_a_guardrail_violation_mid_stream() -> None:
    async with phone(PhoneConfig(time_scale=0.001, fault_generation=1.0)) as (_, model):
        error, text = await failure(model)
    assert (error.code, error.mlkit_code) == (ErrorCode.GUARDRAIL_VIOLATION, 15) and text


async def test_an_unreachable_phone_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with DeviceModel(f"http://127.0.0.1:{port}", timeouts=DeviceTimeouts(connect=2.0)) as model:
        error, _ = await failure(model)
        availability = await model.availability()
    assert (error.code, error.kind) == (ErrorCode.MODEL_UNAVAILABLE, FailureKind.UNREACHABLE)
    assert (availability.available, availability.reason, availability.status) == (False, "unknown", "unavailable")


@contextlib.asynccontextmanager
async def raw_server(reply: bytes) -> AsyncIterator[str]:
    """A server that answers every connection with ``reply`` (whatever was asked) and closes."""

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await stream.receive()
                await stream.send(reply)

    with anyio.fail_after(GUARD):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, answer)
            yield f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
            tasks.cancel_scope.cancel()


def http(status: str, body: bytes, content_type: str = "application/x-ndjson") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(("reply", "kind"), [
    (b"\x00\xffSSH-2.0-garbage\r\n\r\n", FailureKind.DISCONNECTED),
    (http("200 OK", b'{"type":"text","text":"Hel"}\n{"type":"text","text":"lo"}\n'), FailureKind.MALFORMED),
    (http("200 OK", b'{"type":"text","text":"Hi"}\n{"type":"text","tex'), FailureKind.MALFORMED),
    (http("200 OK", b'{"type":"text","text":"Hi"}\n{"type":"reasoning","text":"x"}\n'), FailureKind.MALFORMED),
])
async def test_garbage_and_streams_without_their_end_fail_the_generation(reply: bytes, kind: FailureKind) -> None:
    async with raw_server(reply) as url, DeviceModel(url) as model:
        error, _ = await failure(model)
    assert (error.code, error.kind) == (ErrorCode.GENERATION_FAILED, kind)


async def test_a_final_line_without_newline_still_counts() -> None:
    body = b'{"type":"text","text":"Hi"}\n{"type":"done","inputTokens":1,"outputTokens":1}'
    async with raw_server(http("200 OK", body)) as url, DeviceModel(url) as model:
        assert await collect(model) == ("Hi", [Usage(input_tokens=1, output_tokens=1)])


@pytest.mark.parametrize(("status", "code"), [("502 Bad Gateway", ErrorCode.GENERATION_FAILED),
                                              ("503 Service Unavailable", ErrorCode.BUSY)])
async def test_an_error_page_that_is_not_a_device_error_maps_by_status(status: str, code: ErrorCode) -> None:
    async with raw_server(http(status, b"<html>oops</html>", "text/html")) as url, DeviceModel(url) as model:
        error, _ = await failure(model)
    assert (error.code, error.kind, error.mlkit_code) == (code, FailureKind.REJECTED, None)


async def test_a_phone_speaking_another_major_version_is_refused() -> None:
    body = b'{"protocolVersion":"2.0","status":"available","foreground":true}'
    async with raw_server(http("200 OK", body, "application/json")) as url, DeviceModel(url) as model:
        with pytest.raises(DeviceError, match="protocol 2.0") as caught:
            await model.status()
        availability = await model.availability()
    assert caught.value.code is ErrorCode.MODEL_UNAVAILABLE and availability.available is False


async def test_the_phone_answers_protocol_errors_with_error_bodies_on_one_connection() -> None:
    async with phone() as (running, _), httpx.AsyncClient(base_url=running.url, trust_env=False) as client:
        answers = [
            await client.get("/v2/whatever"),
            await client.get("/v1/generate"),
            await client.post("/v1/generate", content=b"{not json"),
            await client.post("/v1/generate", json={"temperature": 0.5}),
            await client.post("/v1/count-tokens", json={"text": "abcd"}),
        ]
        too_big = await client.post("/v1/generate", content=b"x" * 1_100_000)
    assert [(a.status_code, a.json().get("error", {}).get("name")) for a in answers] == [
        (404, "NOT_FOUND"), (405, "METHOD_NOT_ALLOWED"), (400, "BAD_REQUEST"), (400, "BAD_REQUEST"), (200, None)]
    assert answers[1].headers["allow"] == "POST" and answers[0].headers["oam-device-protocol"] == "1.0"
    assert (too_big.status_code, too_big.json()["error"]["name"]) == (413, "PAYLOAD_TOO_LARGE")
