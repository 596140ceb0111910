"""`/health` and `/metrics` of `oam-actors serve`, read before and after real traffic."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("websockets")

from serve_process import OPEN_GATE, TOOL_ROUND, ServeProcess, metric, scripted


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess(["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--model", "scripted"]) as process:
        yield process
        assert process.stop() == 0, process.stderr


def health(server: ServeProcess) -> dict:
    status, content_type, body = server.get("/health")
    assert (status, content_type) == (200, "application/json")
    return json.loads(body)


def metrics(server: ServeProcess) -> str:
    status, _, body = server.get("/metrics")
    assert status == 200
    return body


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll over HTTP until ``condition`` holds (the server closes connections asynchronously)."""
    for _ in range(2000):
        if condition():
            return
    raise AssertionError("condition not reached")


def test_health_counts_connections_and_sessions(server: ServeProcess) -> None:
    assert health(server) == {"status": "ok", "connections": 0, "sessions": 0}
    with server.tcp() as tcp, server.ws() as ws:
        tcp.call("session/create", {"session": "a", "model": "scripted"})
        ws.call("session/create", {"session": "a", "model": "scripted"})
        ws.call("session/create", {"session": "b", "model": "scripted"})
        assert health(server) == {"status": "ok", "connections": 2, "sessions": 3}
    # A private connection's sessions go with it.
    wait_until(lambda: health(server) == {"status": "ok", "connections": 0, "sessions": 0})


def test_request_and_response_counters_move_with_traffic(server: ServeProcess) -> None:
    before = metrics(server)
    with server.tcp() as peer:
        for _ in range(3):
            peer.call("ping")
        peer.error(peer.request("no/such/method"))
        peer.error(peer.request("session/delete", {"session": "ghost"}))
    after = metrics(server)
    delta = {
        sample: metric(after, sample) - metric(before, sample)
        for sample in (
            'oam_requests_total{method="ping"}',
            'oam_requests_total{method="(unknown)"}',
            'oam_requests_total{method="session/delete"}',
            'oam_responses_total{code="ok"}',
            'oam_responses_total{code="method_not_found"}',
            'oam_responses_total{code="session_not_found"}',
            'oam_connections_total{transport="tcp"}',
        )
    }
    assert delta == {
        'oam_requests_total{method="ping"}': 3,
        'oam_requests_total{method="(unknown)"}': 1,
        'oam_requests_total{method="session/delete"}': 1,
        'oam_responses_total{code="ok"}': 3,
        'oam_responses_total{code="method_not_found"}': 1,
        'oam_responses_total{code="session_not_found"}': 1,
        'oam_connections_total{transport="tcp"}': 1,
    }


def test_turns_model_steps_and_queue_depth(server: ServeProcess) -> None:
    before = metrics(server)
    with server.ws() as peer:
        peer.call("session/create", {"session": "sys"})  # the system model: timed
        assert peer.call("session/respond", {"session": "sys", "prompt": "hi"})["text"] == "(script exhausted)"
        peer.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted(TOOL_ROUND)})
        first = peer.request("session/respond", {"session": "g", "prompt": "Open!"})
        peer.tool_call()
        queued = peer.request("session/respond", {"session": "g", "prompt": "Again!"})
        peer.call("ping")  # the second turn is queued behind the first, waiting for its tool
        during = metrics(server)
        assert metric(during, 'oam_queue_depth{kind="session"}') == 1
        assert metric(during, "oam_sessions") == 2
        assert peer.call("session/cancel", {"session": "g"}) == {"session": "g", "cancelled": 2}
        assert peer.error(first)["data"]["code"] == "cancelled"
        assert peer.error(queued)["data"]["code"] == "cancelled"
    after = metrics(server)
    assert metric(after, 'oam_turns_total{outcome="ok"}') - metric(before, 'oam_turns_total{outcome="ok"}') == 1
    assert metric(after, 'oam_turns_total{outcome="cancelled"}') - metric(before, 'oam_turns_total{outcome="cancelled"}') == 2
    steps = 'oam_model_step_seconds_count{kind="respond"}'
    assert metric(after, steps) - metric(before, steps) == 1
    assert 'oam_model_step_seconds_bucket{kind="respond",le="+Inf"}' in after
    assert "# TYPE oam_model_step_seconds histogram" in after
