"""``await checkpoint_if_cancelled()`` and ``cancel_scope()``: anyio's, without its lookup of the
running backend.

``anyio.lowlevel.checkpoint_if_cancelled`` asks sniffio which library runs and looks up its
backend on every call; a turn checks several times (before it starts, at every scripted step).
The agent runs on one event loop library per process (asyncio here: its external tool slots are
asyncio futures), so the backend's own check is looked up once and called directly; a cancel
scope is made by the backend's own class (``anyio.CancelScope()`` looks the backend up and
initialises the scope twice).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

try:  # the public check's own lookup; private, so a later anyio may move it
    from anyio._core._eventloop import get_async_backend
except ImportError:  # pragma: no cover - depends on the installed anyio
    get_async_backend = None

__all__ = ["cancel_scope", "checkpoint_if_cancelled"]

_check: Callable[[], Awaitable[None]] | None = None
_scope_type: type[anyio.CancelScope] | None = None


def cancel_scope() -> anyio.CancelScope:
    """A new cancel scope with no deadline, as ``anyio.CancelScope()`` makes."""
    global _scope_type
    if _scope_type is None:
        _scope_type = type(anyio.CancelScope())
    return _scope_type()


def checkpoint_if_cancelled() -> Awaitable[None]:
    """What ``anyio.lowlevel.checkpoint_if_cancelled()`` returns: a checkpoint only if the
    enclosing cancel scope has been cancelled (it never lets another task run otherwise)."""
    global _check
    if _check is None:
        _check = (anyio.lowlevel.checkpoint_if_cancelled if get_async_backend is None
                  else get_async_backend().checkpoint_if_cancelled)
    return _check()
