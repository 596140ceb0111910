"""``Durability``: what a runtime with a state store does at each commit.

An object hands the runtime a snapshot at each commit (``Actor.snapshot``); this writes it to
the store before the commit's reply resolves, so whoever answers a client after the reply can
rely on it. Objects never see the store.

- **Durable objects.** Only objects made durable with :meth:`Durability.create` (by the layer
  that created them, with their tenant, kind, id and *recipe*: how that layer builds them
  again) are checkpointed; other actors' commits cost nothing here.
- **Versions.** Each durable object's commits are numbered from the version it was created or
  revived at; the store keeps a record only if its version is higher than the stored one, so a
  stale writer never overwrites a newer state (:class:`StaleVersion`).
- **Group commit.** Commits queue; one writer task takes everything queued by the time the event
  loop comes round to it and writes it in one transaction. A lone commit is one transaction; a
  thousand concurrent ones share a few. The write runs on the event loop: without a sync to the
  disk per transaction (the store's default) it is a write to the page cache, and a thread hop
  per batch cost more CPU per turn than the write itself (bench_durability.py).
- **Shared state.** An object that writes another's state through a shared reference (an NPC
  writing its world's document) is declared with :meth:`Durability.share`; each of its commits
  then checkpoints that owner too, in the same batch, unless the owner's snapshot is the very
  bytes it handed out last (nothing changed).
- **Failure.** If a batch cannot be written (a full disk, a read-only file), every commit in it
  raises :class:`CheckpointFailed` (chained from the cause); the runtime fails that message and
  evicts the actor, so its next use revives it from its last durable state.

Use it as ``async with Durability(store) as durability`` on the event loop that hosts the
actors, and give it to the runtime (``LocalSystem(durability=…)``). ``store`` stays its
caller's to close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from oam_actors.runtime._address import Address
from oam_actors.runtime._errors import RuntimeErrorBase
from oam_actors.runtime._store import SqliteStore, StoreRecord

__all__ = ["CheckpointFailed", "Durability", "StaleVersion"]

_log = logging.getLogger("oam_actors.runtime")


class CheckpointFailed(RuntimeErrorBase):
    """A commit's checkpoint could not be made durable; the object keeps its last durable state
    (it is evicted and revived from it when next used). The cause is chained."""

    _what = "the commit could not be made durable"


class StaleVersion(RuntimeErrorBase):
    """The store holds a newer version of this object than the one being written (another
    writer got there first); this writer's state is refused."""

    _what = "the store holds a newer version of this object"


class _Durable:
    """One durable object as this process knows it."""

    __slots__ = ("built", "key", "kind", "object_id", "tenant", "version")

    def __init__(self, key: str, tenant: str, kind: str, object_id: str, version: int) -> None:
        self.key, self.tenant, self.kind, self.object_id, self.version = key, tenant, kind, object_id, version
        self.built = version  # the version the actor was built with (created or revived)


class Durability:
    """See the module docstring."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self._objects: dict[Address, _Durable] = {}
        self._owners: dict[Address, list[Address]] = {}  # holder -> the owners whose state it writes
        self._owner_states: dict[Address, bytes] = {}  # each owner's last snapshot written
        self._queue: list[tuple[StoreRecord | str, asyncio.Future[None]]] = []
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self.batches = 0  # transactions written (for statistics and benchmarks)
        self.commits = 0  # records written

    async def __aenter__(self) -> Self:
        self._wake = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_forever(), name="state store writer")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._writer is not None and self._wake is not None
        # Everything queued is written first, so no commit is left unanswered.
        self._closing = True
        self._wake.set()
        await asyncio.shield(self._writer)

    # --- what the layers that create objects call --------------------------------------------

    def is_durable(self, address: Address) -> bool:
        return address in self._objects

    def create(self, address: Address, *, tenant: str, kind: str, object_id: str, recipe: bytes,
               state: bytes) -> Awaitable[None]:
        """Make ``address`` durable: its first record, version 1 past any stored one; resolves
        once written (raises :class:`CheckpointFailed`)."""
        version = (self.store.version(str(address)) or 0) + 1
        self._objects[address] = _Durable(str(address), tenant, kind, object_id, version)
        return self._submit(StoreRecord(str(address), tenant, kind, object_id, version, recipe, state))

    def revive(self, address: Address) -> StoreRecord | None:
        """The stored record of ``address`` (``None``: none), now durable here at its version:
        the caller builds the actor from it and spawns it."""
        record = self.store.load(str(address))
        if record is not None:
            self._objects[address] = _Durable(record.key, record.tenant, record.kind, record.id, record.version)
        return record

    def state_to_restore(self, address: Address) -> bytes | None:
        """What a runtime re-hosting the durable ``address`` from the actor it was built as must
        restore: the stored state, or ``None`` when the store holds the very version that actor
        was built with (restoring it twice would replay a model's progress twice)."""
        known = self._objects.get(address)
        record = self.store.load(str(address))
        if record is None or (known is not None and record.version == known.built):
            return None
        return record.state

    def delete(self, address: Address) -> Awaitable[None]:
        """Forget ``address`` for good; resolves once its record is gone from the store."""
        self._objects.pop(address, None)
        return self._submit(str(address))

    def forget(self, address: Address) -> None:
        """Stop checkpointing ``address`` here (its record stays: it was evicted, not deleted)."""
        self._objects.pop(address, None)
        self._owners.pop(address, None)
        self._owner_states.pop(address, None)

    def share(self, holder: Address, owner: Address) -> None:
        """``holder`` writes ``owner``'s state through a shared reference: checkpoint ``owner``
        with each of ``holder``'s commits (see the module docstring)."""
        owners = self._owners.setdefault(holder, [])
        if owner not in owners:
            owners.append(owner)

    # --- what the runtime calls --------------------------------------------------------------

    def checkpoint(self, address: Address, state: bytes,
                   snapshot_of: Callable[[Address], bytes | None] | None = None) -> Awaitable[None] | None:
        """The commit of ``address`` with ``state``: an awaitable resolving once it is durable,
        or ``None`` if the object is not durable. ``snapshot_of(owner)`` is how the runtime
        snapshots the owners ``address`` shares state with (``None``: no owner is checkpointed)."""
        known = self._objects.get(address)
        if known is None:
            return None
        pending = self._commit(address, known, state)
        owners = self._owners.get(address)
        if not owners or snapshot_of is None:
            return pending
        waits = [pending]
        for owner in owners:
            owner_known = self._objects.get(owner)
            owner_state = None if owner_known is None else snapshot_of(owner)
            if owner_known is not None and owner_state is not None and owner_state is not self._owner_states.get(owner):
                self._owner_states[owner] = owner_state
                waits.append(self._commit(owner, owner_known, owner_state))
        return pending if len(waits) == 1 else asyncio.gather(*waits)

    def _commit(self, address: Address, known: _Durable, state: bytes) -> asyncio.Future[None]:
        known.version += 1
        return self._submit(StoreRecord(known.key, known.tenant, known.kind, known.object_id, known.version, None, state))

    # --- the writer ----------------------------------------------------------------------------

    def _submit(self, item: StoreRecord | str) -> asyncio.Future[None]:
        if self._wake is None or self._writer is None or self._writer.done():
            # Nobody waits forever: a commit after the writer ended would never be answered.
            raise RuntimeError("the state store's writer is not running (use the Durability inside 'async with')")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._wake.set()
        return future

    def _take(self) -> list[tuple[StoreRecord | str, asyncio.Future[None]]]:
        batch, self._queue = self._queue, []
        return batch

    async def _write_forever(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            # One more round of the event loop: the commits that become ready in it (other
            # turns finishing now) join this batch instead of waiting for the next transaction.
            await asyncio.sleep(0)
            self._wake.clear()
            if self._queue:
                self._write(self._take())
            if self._closing and not self._queue:
                return

    def _write(self, batch: list[tuple[StoreRecord | str, asyncio.Future[None]]]) -> None:
        # The last write of a key in a batch wins; a deletion and a record keep their order
        # (a record after a deletion is a new object of the same address).
        records: dict[str, StoreRecord] = {}
        deletions: list[str] = []
        for item, _ in batch:
            if isinstance(item, str):
                records.pop(item, None)
                deletions.append(item)
            else:
                earlier = records.get(item.key)
                if earlier is not None and earlier.recipe is not None and item.recipe is None:
                    item = StoreRecord(item.key, item.tenant, item.kind, item.id, item.version, earlier.recipe, item.state)
                records[item.key] = item
        try:
            stale = self.store.write(list(records.values()), deletions)
        except Exception as exc:  # noqa: BLE001 - every commit of the batch fails with the cause
            _log.error("state store %s: a batch of %d commits could not be written", self.store.path, len(batch),
                       exc_info=exc)
            for item, future in batch:
                if not future.done():
                    failed = CheckpointFailed(_address_of(item))
                    failed.__cause__ = exc
                    future.set_exception(failed)
            return
        self.batches += 1
        self.commits += len(records)
        refused = set(stale)
        for item, future in batch:
            if future.done():
                continue
            key = item if isinstance(item, str) else item.key
            if key in refused and not isinstance(item, str):
                _log.error("state store %s: %s was not written: the store holds a newer version", self.store.path, key)
                future.set_exception(StaleVersion(_address_of(item)))
            else:
                future.set_result(None)


def _address_of(item: StoreRecord | str) -> Address:
    key = item if isinstance(item, str) else item.key
    kind, _, object_id = key.partition(":")
    return Address(kind, object_id)
