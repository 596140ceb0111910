"""Every conformance scenario replayed over `oam-actors serve`: TCP JSON lines and WebSocket frames.

Scenarios sharing command-line arguments share one server; each replay gets its own connection,
so the scenarios also show that connections are isolated (they reuse session names freely).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("websockets")

from scenarios import Scenario, load_all, replay
from serve_process import Peer, ServeProcess

SCENARIOS = load_all()
STDIO_ONLY = {
    # At end of input stdio lets requests in flight finish; a network client that goes away has
    # its work cancelled instead (docs/game-server.md, "Connection ends").
    "end of input": "a departed network client's work is cancelled, not drained",
}


class NetworkConnection:
    """A ``scenarios.Connection`` over one client of a running server. The connection ending
    stands for the bridge exiting; the server itself must keep running."""

    def __init__(self, peer: Peer, server: ServeProcess) -> None:
        self.peer = peer
        self.server = server

    def send_line(self, line: bytes) -> None:
        self.peer.send_lines(line)  # a sendRaw block may hold several lines

    def receive(self) -> dict[str, Any] | None:
        try:
            return self.peer.next()
        except EOFError:
            return None

    def close_input(self) -> None:
        self.peer.close_input()

    def exit_status(self) -> int:
        self.peer.wait_closed()
        assert self.server.proc.poll() is None, "the server must outlive a connection"
        return 0


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[tuple[str, ...], ServeProcess]]:
    started: dict[tuple[str, ...], ServeProcess] = {}
    yield started
    for server in started.values():
        assert server.stop() == 0, server.stderr
        server.__exit__()


@pytest.mark.parametrize("transport", ["tcp", "ws"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_over_the_network(
    scenario: Scenario, transport: str, servers: dict[tuple[str, ...], ServeProcess]
) -> None:
    if scenario.name in STDIO_ONLY:
        pytest.skip(STDIO_ONLY[scenario.name])
    args = tuple(scenario.args)
    if args not in servers:
        servers[args] = ServeProcess(["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", *args])
    server = servers[args]
    with server.tcp() if transport == "tcp" else server.ws() as peer:
        replay(scenario, NetworkConnection(peer, server))
