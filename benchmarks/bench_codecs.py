"""SSE decoding throughput of each provider codec (not a test).

Builds a synthetic but realistic stream per provider (text deltas, one tool call, usage, the
provider's end), feeds it in fixed-size chunks to a fresh decoder, and prints MB/s of SSE bytes
decoded into canonical events. Usage, from the repository root:
``python3 -m benchmarks.bench_codecs [--mb 8] [--chunk 16384]``.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import time
from collections.abc import Callable

import msgspec

from oam_actors.models.codecs import Affinity, codec_for

_TEXT = "The smith turns the blade over and names a price. "


def _sse(obj: object) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def openai_stream(frames: int) -> bytes:
    model = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4.1-mini"}
    body = [
        _sse({**model, "choices": [{"index": 0, "delta": {"content": _TEXT}, "finish_reason": None}]})
        for _ in range(frames)
    ]
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup_item", "arguments": '{"q":"axe"}'},
    }
    body.append(
        _sse({**model, "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]})
    )
    body.append(
        _sse(
            {
                **model,
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": frames, "total_tokens": 10 + frames},
            }
        )
    )
    return b"".join(body) + b"data: [DONE]\n\n"


def anthropic_stream(frames: int) -> bytes:
    body = [
        b"event: message_start\n"
        + _sse({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 10}}}),
        b"event: content_block_start\n"
        + _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    delta = b"event: content_block_delta\n" + _sse(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": _TEXT}}
    )
    body += [delta] * frames
    body.append(_sse({"type": "content_block_stop", "index": 0}))
    body.append(
        _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": frames}})
    )
    body.append(_sse({"type": "message_stop"}))
    return b"".join(body)


def google_stream(frames: int) -> bytes:
    usage = {"promptTokenCount": 10, "totalTokenCount": 10}
    text = _sse(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": _TEXT}]}, "index": 0}], "usageMetadata": usage}
    )
    body = [text] * frames
    call = {"functionCall": {"name": "lookup_item", "args": {"q": "axe"}}}
    body.append(
        _sse({"candidates": [{"content": {"role": "model", "parts": [call]}, "finishReason": "STOP", "index": 0}]})
    )
    return b"".join(body).replace(b"\n\n", b"\r\n\r\n")


_BUILDERS: dict[str, Callable[[int], bytes]] = {
    "openai": openai_stream,
    "anthropic": anthropic_stream,
    "google": google_stream,
}


def measure(provider: str, wire: bytes, chunk: int) -> tuple[float, int]:
    decoder = codec_for(provider, affinity=Affinity(profile="bench", endpoint="https://bench.invalid")).new_stream(
        model="m"
    )
    events = 0
    start = time.perf_counter()
    for offset in range(0, len(wire), chunk):
        events += len(decoder.feed(wire[offset : offset + chunk]))
    events += len(decoder.finish())
    return time.perf_counter() - start, events


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
    parser.add_argument("--mb", type=float, default=8.0, help="approximate stream size per provider")
    parser.add_argument("--chunk", type=int, default=16_384, help="bytes per feed() call")
    args = parser.parse_args()
    for provider, build in _BUILDERS.items():
        frame_size = len(build(1)) - len(build(0))
        wire = build(max(1, int(args.mb * 1_000_000 / frame_size)))
        seconds, events = measure(provider, wire, args.chunk)
        print(f"{provider:10s} {len(wire) / 1e6:7.2f} MB  {events:8d} events  {len(wire) / 1e6 / seconds:8.1f} MB/s")


if __name__ == "__main__":
    main()
