"""Codec throughput: decode a ping request and encode its response, per second.

Run from the repository root: ``PYTHONPATH=. python3 benchmarks/bench_jsonrpc.py [seconds]``.
Also times encoding a ``session/event`` notification, the other hot step of a streamed turn.
Not a test.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import sys
import time
from collections.abc import Callable

from oam_actors.bridge.jsonrpc import Request, decode, encode_notification, encode_result

PING = b'{"jsonrpc":"2.0","id":12345,"method":"ping"}'
EVENT = {
    "session": "gorm",
    "requestId": 1234567890123456,
    "event": {"type": "textDelta", "delta": "Hello", "text": "Hello"},
}


def ping_round_trip() -> None:
    request = decode(PING)
    assert isinstance(request, Request)
    encode_result(request.id, {})


def event_encode() -> None:
    encode_notification("session/event", EVENT)


def rate(fn: Callable[[], None], seconds: float) -> float:
    """Calls per second of ``fn`` over about ``seconds``."""
    calls = 0
    batch = 10_000
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(batch):
            fn()
        calls += batch
    return calls / (time.perf_counter() - start)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    print(f"decode+encode ping:  {rate(ping_round_trip, seconds):>12,.0f} /s")
    print(f"encode session/event: {rate(event_encode, seconds):>11,.0f} /s")


if __name__ == "__main__":
    main()
