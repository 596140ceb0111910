"""Shard checkpoints: where ``RaySystem`` keeps the committed state of objects that are not
durable, keyed by actor address, so a restarted shard restores them. Durable objects (a state
store, ``--state-store``) are kept by ``runtime.Durability`` in the one store format instead.

Contract (:class:`StateStore`):

- ``put_many`` stores every ``(key, value)`` pair, replacing older values, and returns once they
  are durable for this store's notion of durable; a later ``get`` sees them. Keys are actor
  addresses (``"session:guard"``), values the bytes an actor's ``snapshot`` returned.
- ``get`` is the latest value or ``None``; ``delete`` forgets a key (absent keys are fine).
- Methods are called on the event loop of the runtime that owns the store (``RaySystem``'s
  driver), one at a time, so they must be quick: an embedded database, or a client that writes
  to something fast. ``close`` releases the store; nothing is called after it.

:class:`MemoryStore` is ``RaySystem``'s default: a dict, as long-lived as the driver process
(checkpoints outlive a shard's crash, not the driver's), for the cost of keeping a reference
(an in-memory SQLite database copied each checkpoint in and cost 14-80 µs per turn for a session's
growing one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

__all__ = ["MemoryStore", "StateStore"]


@runtime_checkable
class StateStore(Protocol):
    """Checkpoints by key; see the module docstring."""

    def get(self, key: str) -> bytes | None: ...

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None: ...

    def delete(self, key: str) -> None: ...

    def close(self) -> None: ...


class MemoryStore:
    """A :class:`StateStore` in a dict (see the module docstring)."""

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self._values.get(key)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        self._values.update(items)

    def delete(self, key: str) -> None:
        self._values.pop(key, None)

    def keys(self) -> list[str]:
        """Every key, sorted (for inspection and tests)."""
        return sorted(self._values)

    def close(self) -> None:
        self._values.clear()

    def __repr__(self) -> str:
        return "MemoryStore()"
