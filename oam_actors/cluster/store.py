"""State stores: where committed object state (checkpoints) is kept, keyed by actor address.

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
growing one). :class:`SqliteStore` keeps them in SQLite: ``":memory:"`` (its default) lives as
long as the process; a file path survives it (WAL mode, no fsync per write: a committed turn
survives a crashed shard, and the operating system's crash only if the file system kept the write).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

__all__ = ["MemoryStore", "SqliteStore", "StateStore"]

_UPSERT = "INSERT INTO checkpoints (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"


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


class SqliteStore:
    """A :class:`StateStore` in one SQLite database (one table, one row per key)."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        # The owner's event loop may be driven from any thread; calls never overlap.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS checkpoints (key TEXT PRIMARY KEY, value BLOB NOT NULL)")

    def get(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT value FROM checkpoints WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, key: str, value: bytes) -> None:
        """One pair; usable as ``LocalSystem(checkpoint=…)`` through a lambda taking an address."""
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        # One transaction per batch: a drained batch of checkpoints costs one commit; a batch of
        # one (a lone turn's) is one statement, its own transaction, at half the cost.
        pairs = list(items)
        if len(pairs) == 1:
            self._db.execute(_UPSERT, pairs[0])
            return
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(_UPSERT, pairs)

    def delete(self, key: str) -> None:
        self._db.execute("DELETE FROM checkpoints WHERE key = ?", (key,))

    def keys(self) -> list[str]:
        """Every key, sorted (for inspection and tests)."""
        return [row[0] for row in self._db.execute("SELECT key FROM checkpoints ORDER BY key")]

    def close(self) -> None:
        self._db.close()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"
