"""A request in flight: its events, its result, and its cancellation."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from ..errors import OamError
from ._connection import Connection, EventStream, Pending
from ._errors import ClientError, ConnectionLost, RequestTimeout
from ._params import UNSET

if TYPE_CHECKING:
    from ._link import ClientLink

__all__ = ["CANCEL_GRACE", "Turn"]

CANCEL_GRACE = 2.0
"""Seconds a cancelled call spends sending its ``…/cancel`` before it gives up on it."""

R = TypeVar("R")


class Turn(Generic[R]):
    """One request in flight: ``await turn`` for its result; ``async for event in turn`` (or
    ``turn.events()``) for its events first, for streamed turns. The request is sent when the
    turn is first awaited or iterated. The timeout counts from then, for events and result alike.
    Cancelling the task that awaits or iterates it sends the turn's cancel notification."""

    def __init__(self, client: ClientLink, method: str, params: Mapping[str, Any] | None, decode_as: Callable[[Any], R],
                 *, cancel: tuple[str, dict[str, Any]] | None, timeout: float | None, events: bool = False) -> None:
        self._client = client
        self.method = method
        self._params = dict(params) if params is not None else None
        self._decode = decode_as
        self._cancel = cancel
        self._timeout = client.timeout if timeout is UNSET else timeout
        self._events = EventStream() if events else None
        self._pending: Pending | None = None
        self._connection: Connection | None = None
        self._deadline = math.inf
        self._sent: anyio.Event | None = None  # set once the request is sent (or failed to be)

    async def _start(self) -> None:
        """Send the request once, whoever (awaiting, iterating) gets here first."""
        if self._sent is not None:
            await self._sent.wait()
            if self._pending is None:
                raise ConnectionLost(f"{self.method} could not be sent")
            return
        self._sent = anyio.Event()
        try:
            self._connection = await self._client._live()
            if self._timeout is not None:
                self._deadline = anyio.current_time() + self._timeout
            self._pending = await self._connection.start(self.method, self._params, self._events)
        finally:
            self._sent.set()

    @contextlib.contextmanager
    def _cancelling(self) -> Generator[None]:
        try:
            yield
        except BaseException as exc:
            sent = self._pending is not None
            if sent and self._cancel is not None and isinstance(exc, (anyio.get_cancelled_exc_class(), RequestTimeout)):
                self._client._task_group.start_soon(self._send_cancel)
            raise

    async def _send_cancel(self) -> None:
        assert self._cancel is not None and self._connection is not None
        with anyio.move_on_after(CANCEL_GRACE), contextlib.suppress(ClientError):
            await self._connection.notify(*self._cancel)

    def _remaining(self) -> float | None:
        return None if self._timeout is None else max(0.0, self._deadline - anyio.current_time())

    async def result(self) -> R:
        """The decoded result (the events, if not read, are dropped)."""
        with self._cancelling():
            await self._start()
            assert self._connection is not None and self._pending is not None
            raw = await self._connection.wait(self._pending, timeout=self._remaining())
        return self._decode(raw)

    def __await__(self) -> Generator[Any, None, R]:
        return self.result().__await__()

    def events(self) -> Turn[R]:
        return self

    def __aiter__(self) -> Turn[R]:
        if self._events is None:
            raise TypeError(f"{self.method} was not sent as a stream")
        return self

    async def __anext__(self) -> dict[str, Any]:
        """The next event (``event`` of ``session/event`` / ``npc/event`` /
        ``conversation/event``); the iteration ends when the answer arrives, or raises
        ``ConnectionLost``. A server error is raised by ``await turn``, not here."""
        assert self._events is not None
        with self._cancelling():
            await self._start()
            remaining = self._remaining()
            with anyio.move_on_after(math.inf if remaining is None else remaining) as waited:
                try:
                    return await self._events.__anext__()
                except OamError:
                    raise StopAsyncIteration from None
            assert waited.cancelled_caught
            raise RequestTimeout(self.method, self._timeout)  # type: ignore[arg-type]
