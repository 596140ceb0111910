"""``SettledReply``: a ``Reply`` whose outcome arrives from elsewhere (a shard's ``Done`` in the
driver, an ``Answer`` in a shard) and is handed to it with :meth:`SettledReply.finish`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from ..runtime import Reply

__all__ = ["SettledReply"]


class SettledReply(Reply):
    """See the module docstring; subclasses add ``cancel``."""

    __slots__ = ("_callbacks", "_done", "_error", "_event", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._event: anyio.Event | None = None  # made by the first waiter: most replies have none
        self._callbacks: list[Callable[[Any, BaseException | None], None]] = []

    def done(self) -> bool:
        return self._done

    async def wait(self) -> Any:
        if not self._done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        else:
            await anyio.lowlevel.checkpoint()
        if self._error is not None:
            raise self._error
        return self._value

    def add_done_callback(self, fn: Callable[[Any, BaseException | None], None]) -> None:
        if self._done:
            fn(self._value, self._error)
        else:
            self._callbacks.append(fn)

    def finish(self, value: Any, error: BaseException | None) -> None:
        """The outcome is known: callbacks run (in the order they were added), then waiters wake."""
        self._done = True
        self._value, self._error = value, error
        for fn in self._callbacks:
            fn(value, error)
        self._callbacks.clear()
        if self._event is not None:
            self._event.set()
