"""SSE framing (reference §4) and the framing checks shared by all three codecs (§14, 1-12)."""

from __future__ import annotations

import msgspec
import pytest

from oam_actors import ErrorCode
from oam_actors.models.codecs import (
    Affinity,
    CodecError,
    ErrorKind,
    Outcome,
    SseFrame,
    SseParser,
    Stage,
    StopReason,
    Terminal,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDone,
    Usage,
    UsageEvent,
    assemble,
    codec_for,
)

PROVIDERS = ["openai", "anthropic", "google"]


def sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def frames(*chunks: bytes) -> list[SseFrame]:
    parser = SseParser()
    out: list[SseFrame] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    return out + parser.finish()


# --- the framer -------------------------------------------------------------------------------


def test_multi_line_data_is_joined_with_newline() -> None:  # §14.6
    assert frames(b"data: a\ndata: b\n\n") == [SseFrame(b"a\nb")]


def test_comments_and_event_names() -> None:  # §14.7
    assert frames(b": ping\n\n") == []
    assert frames(b": c\nevent: e\ndata: x\n\n") == [SseFrame(b"x", "e")]


def test_exactly_one_leading_space_is_removed() -> None:  # §14.8
    assert frames(b"data:x\n\n") == [SseFrame(b"x")]
    assert frames(b"data:  x\n\n") == [SseFrame(b" x")]


def test_cr_only_delimiters() -> None:  # §14.9
    assert frames(b"data: x\r\rdata: y\r\r") == [SseFrame(b"x"), SseFrame(b"y")]


def test_reference_wire_example_with_crlf_comment_and_two_data_lines() -> None:  # §4
    wire = (
        b": keep-alive\r\n\r\n"
        b"event: content_block_delta\r\n"
        b'data: {"type":"content_block_delta",\r\n'
        b'data:  "index":0,"delta":{"type":"text_delta","text":"hi"}}\r\n\r\n'
    )
    (frame,) = frames(wire)
    assert frame.event == "content_block_delta"
    assert frame.data == b'{"type":"content_block_delta",\n "index":0,"delta":{"type":"text_delta","text":"hi"}}'
    assert msgspec.json.decode(frame.data)["delta"]["text"] == "hi"


def test_id_retry_unknown_fields_and_bare_data_are_ignored() -> None:
    assert frames(b"id: 7\nretry: 10\nfoo: bar\ndata\n\n") == []
    assert frames(b"id: 7\ndata: x\n\n") == [SseFrame(b"x")]


def test_split_at_every_offset_gives_the_same_frames() -> None:
    wire = b"\xef\xbb\xbfevent: a\r\ndata: h\xc3\xa9\r\n\r\n: c\n\ndata: 1\rdata: 2\r\rdata: end"
    expected = [SseFrame("hé".encode(), "a"), SseFrame(b"1\n2"), SseFrame(b"end")]
    for cut in range(len(wire) + 1):
        assert frames(wire[:cut], wire[cut:]) == expected, cut


def test_byte_by_byte_feeding() -> None:
    wire = b"data: one\r\n\r\ndata: two\n\n"
    assert frames(*(wire[i : i + 1] for i in range(len(wire)))) == [SseFrame(b"one"), SseFrame(b"two")]


def test_bom_is_stripped_only_at_the_start() -> None:
    assert frames(b"\xef\xbb\xbfdata: x\n\n") == [SseFrame(b"x")]
    assert frames(b"data: x\n\n\xef\xbb\xbfdata: y\n\n") == [SseFrame(b"x")]


def test_final_frame_without_blank_line_is_delivered_at_finish() -> None:
    parser = SseParser()
    assert parser.feed(b'data: {"a":1}\n\ndata: last') == [SseFrame(b'{"a":1}')]
    assert parser.finish() == [SseFrame(b"last")]


def test_whitespace_remainder_gives_nothing() -> None:
    parser = SseParser()
    parser.feed(b"data: x\n\n \r\n")
    assert parser.finish() == []


def test_frame_over_the_bound_fails_and_closes() -> None:  # §14.11
    parser = SseParser()
    with pytest.raises(CodecError, match="SSE frame exceeds 262144 bytes") as err:
        parser.feed(b"data: " + b"x" * (262_145 - 6) + b"\n\n")
    assert err.value.kind is ErrorKind.INVALID_REQUEST
    with pytest.raises(CodecError, match="SSE framer is closed"):
        parser.feed(b"data: x\n\n")


def test_frame_at_the_bound_passes() -> None:
    parser = SseParser()
    (frame,) = parser.feed(b"data: " + b"x" * (262_144 - 6) + b"\n\n")
    assert len(frame.data) == 262_144 - 6


def test_unframed_buffer_over_the_bound_fails() -> None:  # §14.12
    parser = SseParser()
    with pytest.raises(CodecError, match="SSE buffer exceeds 524288 bytes"):
        parser.feed(b"x" * 524_289)
    assert parser.closed


def test_bounds_are_configurable() -> None:
    parser = SseParser(max_frame_bytes=10, max_buffer_bytes=20)
    with pytest.raises(CodecError, match="SSE frame exceeds 10 bytes"):
        parser.feed(b"data: 123456\n\n")


def test_finish_closes_and_non_bytes_are_rejected() -> None:
    parser = SseParser()
    parser.finish()
    with pytest.raises(CodecError, match="closed"):
        parser.finish()
    with pytest.raises(CodecError, match="must be bytes"):
        SseParser().feed("data: x\n\n")  # type: ignore[arg-type]


# --- framing through each codec ---------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_frame_that_is_not_json_object(provider: str) -> None:  # §14.1
    decoder = codec_for(provider).new_stream()
    with pytest.raises(CodecError, match="Provider response is not a JSON object") as err:
        decoder.feed(b"data: {\n\n")
    assert (err.value.kind, err.value.stage) == (ErrorKind.INVALID_REQUEST, Stage.WIRE)
    assert err.value.error_code is ErrorCode.GENERATION_FAILED
    with pytest.raises(CodecError, match="closed"):
        decoder.feed(b"data: {}\n\n")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stream_ending_before_completion(provider: str) -> None:  # §14.2
    decoder = codec_for(provider).new_stream()
    assert decoder.feed(b"data") == []
    with pytest.raises(CodecError, match="Provider stream ended before completion") as err:
        decoder.finish()
    assert (err.value.kind, err.value.stage, err.value.outcome) == (
        ErrorKind.UPSTREAM_ERROR,
        Stage.RESPONSE,
        Outcome.KNOWN,
    )
    assert err.value.error_code is ErrorCode.GENERATION_FAILED
    assert err.value.retryable


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cancelled_stream_has_unknown_outcome(provider: str) -> None:  # §14.3
    decoder = codec_for(provider).new_stream()
    decoder.feed(b"data")
    with pytest.raises(CodecError, match="ended before completion") as err:
        decoder.finish(cancelled=True)
    assert err.value.outcome is Outcome.UNKNOWN
    assert err.value.error_code is ErrorCode.CANCELLED
    assert err.value.to_agent_error().code is ErrorCode.CANCELLED


GOOGLE_OK = sse({"candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}]})


def test_google_split_at_every_offset() -> None:  # §14.4
    for cut in range(len(GOOGLE_OK) + 1):
        decoder = codec_for("google").new_stream()
        fed = decoder.feed(GOOGLE_OK[:cut]) + decoder.feed(GOOGLE_OK[cut:])
        assert fed == [TextDelta(0, "ok")], cut
        assert decoder.finish() == [Terminal(StopReason.STOP)], cut


def test_google_mixed_delimiters_and_split_utf8() -> None:  # §14.5
    wire = (
        b'data: {"candidates":[{"content":{"parts":[{"text":"h\xc3\xa9"}]}}]}\r\n\r\n'
        b'data: {"candidates":[{"content":{"parts":[{"text":"llo"}]},"finishReason":"STOP"}]}\n\n'
    )
    decoder = codec_for("google").new_stream()
    events = decoder.feed(wire[:53]) + decoder.feed(wire[53:55]) + decoder.feed(wire[55:]) + decoder.finish()
    assert assemble(events).output == [Text("héllo")]


def test_anthropic_final_frame_without_blank_line() -> None:  # §14.10
    decoder = codec_for("anthropic").new_stream()
    wire = sse({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4}})
    assert decoder.feed(wire + b'data: {"type":"message_stop"}') == [
        UsageEvent(Usage(source="anthropic", output_tokens=4))
    ]
    assert decoder.finish() == [Terminal(StopReason.MAX_OUTPUT_TOKENS)]


def test_error_in_a_feed_closes_the_decoder() -> None:
    decoder = codec_for("openai").new_stream()
    with pytest.raises(CodecError, match="not a JSON object"):
        decoder.feed(sse({"choices": [{"delta": {"content": "lost"}}]}) + b"data: nope\n\n")
    with pytest.raises(CodecError, match="closed"):
        decoder.finish()


# --- assembly ---------------------------------------------------------------------------------


def test_assemble_joins_runs_and_keeps_block_order() -> None:
    call = ToolCall("c1", "look", {"q": 1}, native_id="c1")
    events = [
        TextDelta(0, "a"),
        UsageEvent(Usage(input_tokens=3)),
        TextDelta(0, "b"),
        ToolCallDone(1, call),
        TextDelta(2, "c"),
        TextDelta(3, "d"),
        UsageEvent(Usage(output_tokens=2)),
        Terminal(StopReason.TOOL_USE),
    ]
    response = assemble(events, model="m")
    assert response.output == [Text("ab"), call, Text("c"), Text("d")]
    assert response.usage == Usage(input_tokens=3, output_tokens=2)
    assert (response.stop_reason, response.model) == (StopReason.TOOL_USE, "m")


def test_assemble_without_terminal_is_unknown() -> None:
    assert assemble([TextDelta(0, "x")]).stop_reason is StopReason.UNKNOWN


def test_affinity_rejects_unknown_fields_when_decoded() -> None:  # §14.56 (credential_id)
    with pytest.raises(msgspec.ValidationError, match="credential_id"):
        msgspec.convert({"profile": "p", "credential_id": "x"}, Affinity)
