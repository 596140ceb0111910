"""The OpenAI front door over a simulated Nano farm, sharing it with bridge sessions.

``oam-actors serve --model farm:1`` runs one simulated phone behind the device pool. A request
the phone's quota cannot admit within its queue time is a 429 with ``Retry-After`` (never a
5xx); a client that goes away leaves the queue at once; bridge turns (TCP) and OpenAI requests
go through the one pool, so the phone never sees more than its quota (it never answers BUSY).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai import OpenAI

from serve_process import HANG_GUARD, ServeProcess, TcpPeer

USER = [{"role": "user", "content": "Good morning!"}]


def _device(peer: TcpPeer) -> dict[str, Any]:
    return peer.call("model/status")["statistics"]["devices"][0]


def _waiting(peer: TcpPeer) -> int:
    """Steps on the phone or queued for it."""
    device = _device(peer)
    return device["inFlight"] + device["queued"]


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_GUARD  # a hang guard, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def slow_farm() -> Iterator[ServeProcess]:
    """One phone on a very slow clock: once a generation is admitted, the next cannot start for
    100 s (the pacing interval), so every later request waits out its queue time."""
    with ServeProcess(["--model", "farm:1", "--farm-time-scale", "100", "--openai", "127.0.0.1:0",
                       "--tcp", "127.0.0.1:0"]) as process:
        yield process
        assert process.stop() == 0


def test_quota_exhausted_is_429_with_retry_after(slow_farm: ServeProcess) -> None:
    client = OpenAI(base_url=slow_farm.openai_urls[0], api_key="x", max_retries=0, timeout=HANG_GUARD)
    with slow_farm.tcp() as peer:
        peer.call("session/create", {"session": "guard"})
        turn = peer.request("session/respond", {"session": "guard", "prompt": "Halt!"})
        _wait_for(lambda: _waiting(peer) == 1)  # the bridge turn holds the phone (or its pacing does)
        for stream in (False, True):
            with pytest.raises(openai.RateLimitError) as caught:
                client.chat.completions.create(model="system", messages=USER, stream=stream,
                                               extra_headers={"x-oam-queue-timeout": "0.3"})
            response = caught.value.response
            assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1
            assert caught.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
        assert peer.call("model/status")["statistics"]["quotaEventsSurfaced"] == 2
        peer.call("session/cancel", {"session": "guard"})
        assert peer.error(turn)["data"]["code"] == "cancelled"


def test_a_disconnected_client_leaves_the_queue_at_once(slow_farm: ServeProcess) -> None:
    host, port = slow_farm.openai_urls[0].split("//")[1].split("/")[0].split(":")
    body = json.dumps({"model": "system", "messages": USER}).encode()
    with slow_farm.tcp() as peer:
        peer.call("session/create", {"session": "holder"})
        peer.request("session/respond", {"session": "holder", "prompt": "Hold the phone."})
        _wait_for(lambda: _waiting(peer) == 1)
        with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            _wait_for(lambda: _waiting(peer) == 2)  # queued behind the bridge turn
        _wait_for(lambda: _waiting(peer) == 1)  # gone with its client, long before its 20 s deadline
        peer.call("session/cancel", {"session": "holder"})


def test_bridge_sessions_and_openai_requests_share_the_farm_quota() -> None:
    """40 generations on one phone whose quota is 36 per (3 s) window and one at a time: the
    bridge's 20 and the front door's 20 queue in the one pool, so the phone never refuses one.
    (At this time scale the pool's 2 % window margin, 60 ms, outlasts a loaded machine's lag
    between the pool's record of a generation and the phone's; at 0.02 it did not.)"""
    turns = 20
    with ServeProcess(["--model", "farm:1", "--farm-time-scale", "0.05", "--openai", "127.0.0.1:0",
                       "--tcp", "127.0.0.1:0"]) as process:
        client = OpenAI(base_url=process.openai_urls[0], api_key="x", max_retries=0, timeout=HANG_GUARD)
        with process.tcp() as peer:
            for n in range(turns):
                peer.call("session/create", {"session": f"npc{n}"})
            ids = [peer.request("session/respond", {"session": f"npc{n}", "prompt": f"Hello {n}"})
                   for n in range(turns)]

            def ask(n: int) -> str | None:
                messages = [{"role": "user", "content": f"Hello {n}"}]
                return client.chat.completions.create(model="system", messages=messages, user=f"u{n % 3}").choices[0].message.content

            with ThreadPoolExecutor(turns) as pool:
                replies = list(pool.map(ask, range(turns)))
            bridge = [peer.result(i)["text"] for i in ids]
            statistics = peer.call("model/status")["statistics"]
        assert all(replies) and all(bridge)
        (device,) = statistics["devices"]
        assert device["busy"] == 0 and statistics["quotaEventsAbsorbed"] == 0  # never over the quota
        assert device["ok"] == statistics["stepsOk"] == 2 * turns  # every generation went through the pool
        assert process.stop() == 0
