"""The client's own errors, and the server's errors turned back into the library's.

An answer with an ``error`` is raised as the :mod:`oam_actors.errors` class the server raised:
:class:`~oam_actors.errors.AgentError` for the twelve agent codes, else
:class:`~oam_actors.errors.ProtocolError`, with the same code, message and ``data``. Everything
that goes wrong *between* the two peers is a :class:`ClientError`::

    ClientError               the connection, not the server, failed the call
    ├── ConnectError          could not connect: refused, unreachable, handshake, process start, timeout
    │   └── AuthenticationFailed   the server refused the token (TCP ``auth``, WebSocket HTTP 401)
    ├── ConnectionLost        the connection ended (or was never there) while the call waited
    │   └── MalformedMessage  the server sent a line that is not a JSON-RPC message; the client
    │                         closed the connection, since nothing after it can be trusted
    ├── RequestTimeout        no answer within the call's timeout; the connection stays up
    └── UnexpectedResult      an answer whose result lacks what the typed helper reads (another
                              server, or another version); the connection stays up
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import AGENT_CODES, AgentError, ErrorCode, OamError, ProtocolError

__all__ = [
    "AuthenticationFailed",
    "ClientError",
    "ConnectError",
    "ConnectionLost",
    "MalformedMessage",
    "RequestTimeout",
    "UnexpectedResult",
    "error_from_wire",
]


class ClientError(Exception):
    """A call failed on the way, not at the server. ``cause`` says why in a few words."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


    def fresh(self) -> ClientError:
        """A copy to raise in one more place: many calls fail with one cause, and raising a single
        instance again and again would grow its traceback with every caller's frames."""
        error = copy.copy(self)
        error.__traceback__ = None
        error.__cause__ = self.__cause__
        return error


class ConnectError(ClientError):
    """Opening the connection failed (``connect``, or a reconnect)."""


class AuthenticationFailed(ConnectError):
    """The server refused the token (or needed one): ``reason`` is ``"required"`` or ``"failed"``."""

    def __init__(self, cause: str, reason: str) -> None:
        super().__init__(cause)
        self.reason = reason


class ConnectionLost(ClientError):
    """The connection ended before the call was answered; the call's outcome is unknown."""


class MalformedMessage(ConnectionLost):
    """The server sent something that is not a JSON-RPC message; ``line`` holds (the start of) it."""

    def __init__(self, cause: str, line: bytes = b"") -> None:
        super().__init__(cause)
        self.line = line


class RequestTimeout(ClientError):
    """No answer to ``method`` within ``timeout`` seconds."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"no answer to {method} within {timeout:g} s")
        self.method = method
        self.timeout = timeout


class UnexpectedResult(ClientError):
    """The result of ``method`` is not what the protocol says it answers; ``result`` holds it."""

    def __init__(self, method: str, detail: str, result: Any) -> None:
        super().__init__(f"the server's answer to {method} is not the protocol's: {detail}")
        self.method = method
        self.result = result


_BY_NUMBER = {code.number: code for code in ErrorCode}


def error_from_wire(error: Any) -> OamError:
    """The library exception for a JSON-RPC ``error`` object. ``data.code`` names the class (the
    number when it is absent); a code this library does not know becomes ``internal_error`` with
    the server's number kept in ``data.remoteCode``."""
    if not isinstance(error, dict):
        return ProtocolError(ErrorCode.INTERNAL_ERROR, f"The server sent an error that is not an object: {error!r}.")
    number = error.get("code")
    message = error.get("message") if isinstance(error.get("message"), str) else "(no message)"
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    extra = {k: v for k, v in data.items() if k != "code"}
    try:
        code = ErrorCode.from_wire(data.get("code"))  # type: ignore[arg-type]
    except (KeyError, TypeError):
        code = _BY_NUMBER.get(number) if isinstance(number, int) else None
    if code is None:
        return ProtocolError(ErrorCode.INTERNAL_ERROR, message, remoteCode=number, **extra)
    if code in AGENT_CODES:
        agent = AgentError(code, message, **extra)
        seconds = extra.get("retryAfterSeconds")
        agent.retry_after = float(seconds) if isinstance(seconds, (int, float)) else None
        return agent
    return ProtocolError(code, message, **extra)
