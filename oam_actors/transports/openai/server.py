"""Serving the front door's ASGI app with uvicorn, embedded in the running event loop.

``listener = openai_listener(host, port)`` binds at once (so ``:0`` is known and a busy port
fails before anything is printed); ``await serve_openai(door, listener)`` serves until
cancelled, then cancels the door's requests in flight, closes the connections (waiting at most
``grace`` seconds for answers being written) and the socket. The server process keeps SIGINT
and SIGTERM: uvicorn's own signal capture is turned off.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import anyio
import uvicorn

from .app import FrontDoor

__all__ = ["openai_listener", "serve_openai"]


def openai_listener(host: str | None, port: int) -> socket.socket:
    """A listening TCP socket on ``host`` (``None`` or ``""``: every interface); ``OSError``
    if it cannot be bound."""
    dualstack = not host and socket.has_dualstack_ipv6()
    family = socket.AF_INET6 if dualstack or (host and ":" in host) else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off only on sockets that say they are TCP, and
    # with Nagle on, a response's body waits for the client's delayed ACK of its head (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dualstack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host or "", port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


class _Embedded(uvicorn.Server):
    """uvicorn without its signal handlers: the embedding server decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_openai(door: FrontDoor, listener: socket.socket, *, grace: float = 2.0) -> None:
    """Serve ``door`` on ``listener`` until cancelled; closes ``listener`` at the end."""
    config = uvicorn.Config(
        door.app,
        http="h11",  # pure Python and already a dependency: the same parser everywhere
        lifespan="off",
        log_config=None,  # the server's logging stays as it is (stderr); no access log on stdout
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=grace,
    )
    server = _Embedded(config)
    try:
        await server.serve(sockets=[listener])
    finally:
        with anyio.CancelScope(shield=True):
            door.cancel_all()
            if server.started:
                await server.shutdown(sockets=[listener])
            listener.close()
