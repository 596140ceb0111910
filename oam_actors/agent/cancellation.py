"""``await checkpoint_if_cancelled()``: anyio's check, without its lookup of the running backend.

``anyio.lowlevel.checkpoint_if_cancelled`` asks sniffio which library runs and looks up its
backend on every call; a turn checks several times (before it starts, at every scripted step).
The agent runs on one event loop library per process (asyncio here: its external tool slots are
asyncio futures), so the backend's own check is looked up once and called directly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio.lowlevel

try:  # the public check's own lookup; private, so a later anyio may move it
    from anyio._core._eventloop import get_async_backend
except ImportError:  # pragma: no cover - depends on the installed anyio
    get_async_backend = None

__all__ = ["checkpoint_if_cancelled"]

_check: Callable[[], Awaitable[None]] | None = None


def checkpoint_if_cancelled() -> Awaitable[None]:
    """What ``anyio.lowlevel.checkpoint_if_cancelled()`` returns: a checkpoint only if the
    enclosing cancel scope has been cancelled (it never lets another task run otherwise)."""
    global _check
    if _check is None:
        _check = (anyio.lowlevel.checkpoint_if_cancelled if get_async_backend is None
                  else get_async_backend().checkpoint_if_cancelled)
    return _check()
