"""An in-memory JSON-RPC client of one :class:`~oam_actors.bridge.Bridge`.

The simulator drives the bridge exactly as a game engine would — protocol lines in, protocol
lines out — without a socket in between. Requests return their ``result`` or raise
:class:`RpcError`; ``tool/call`` requests go to a handler that answers them (or not).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import msgspec

from ..bridge import Bridge

__all__ = ["BridgeClient", "RpcError"]

_log = logging.getLogger(__name__)
_encode = msgspec.json.encode
_decode = msgspec.json.Decoder().decode

ToolHandler = Callable[[dict[str, Any]], Awaitable[None]]


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", "error"))
        self.error = error
        data = error.get("data")
        self.code: str = data.get("code", "unknown") if isinstance(data, dict) else "unknown"


class BridgeClient:
    """Use inside ``async with``: it runs the bridge in its own task group."""

    def __init__(self, make_bridge: Callable[[Callable[[bytes], Awaitable[None]]], Bridge]) -> None:
        self._send, self._lines = anyio.create_memory_object_stream[bytes](max_buffer_size=1 << 16)
        self.bridge = make_bridge(self._receive)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self.on_tool_call: ToolHandler | None = None
        self.on_notification: Callable[[dict[str, Any]], None] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> BridgeClient:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self.bridge.serve, self._lines)
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._task_group is not None
        self._send.close()
        return await self._task_group.__aexit__(*exc)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and wait for its result; raises :class:`RpcError` for an error."""
        request_id = next(self._ids)
        done = anyio.Event()
        slot: list[Any] = []
        self._pending[request_id] = (done, slot)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self._send.send(_encode(message))
        try:
            await done.wait()
        finally:
            self._pending.pop(request_id, None)
        response = slot[0]
        if "error" in response:
            raise RpcError(response["error"])
        return response.get("result")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send.send(_encode(message))

    async def reply(self, tool_id: str, result: Any) -> None:
        await self._send.send(_encode({"jsonrpc": "2.0", "id": tool_id, "result": result}))

    async def _receive(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if line:
                self._dispatch(_decode(line))

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "tool/call":
            if self.on_tool_call is not None and self._task_group is not None:
                self._task_group.start_soon(self.on_tool_call, message)
            return
        if method is not None:
            if self.on_notification is not None:
                self.on_notification(message)
            return
        pending = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if pending is None:
            _log.debug("response to an unknown request: %s", message)
            return
        done, slot = pending
        slot.append(message)
        done.set()
