"""The state store: one SQLite file holding every durable object's record.

A record is one object: its ``key`` (the runtime address, ``kind:id``), the ``tenant`` it
belongs to, its ``kind`` and the ``id`` its client knows it by, a ``version`` that grows with each
commit, the ``recipe`` (how to build it again: what its creation said, bytes its layer chose)
and its ``state`` (the bytes its ``Actor.snapshot`` returned at the commit). The store knows
nothing of what the bytes mean.

Contract (:class:`SqliteStore`):

- ``open_store(path)`` opens (or creates) the file and holds it exclusively (SQLite's exclusive
  locking mode on a WAL database) until ``close``: a second process — a second server, or the
  ``state`` command while a server runs — is refused with :class:`StoreLocked`. A file that is
  not one of ours, unreadable, corrupt, of a newer schema, or of the old checkpoint-only format
  is refused (:class:`StoreError` subclasses, each a one-line message) and left as it was; a
  path in a missing folder is refused before anything is created.
- ``write(records, deletions)`` applies a whole batch in one transaction (a group commit). A
  record replaces the stored one only if its version is higher: a stale writer (an older
  incarnation that came back) cannot overwrite a newer state; the keys it lost on are returned.
  A record written without a recipe keeps the stored recipe.
- Reads (``load``, ``version``, ``records``, ``ids``) see every batch whose ``write`` returned.
- Every method may be called from any thread; calls are serialised by the store.

Durability: WAL with ``synchronous=NORMAL`` by default: a committed batch survives the process
being killed at any instant (SIGKILL, an out-of-memory kill); ``synchronous="FULL"`` also syncs
each batch to the disk, so it survives the machine losing power.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence

import msgspec

__all__ = [
    "SCHEMA_VERSION",
    "SqliteStore",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreMissing",
    "StoreRecord",
    "StoreTooNew",
    "StoreTooOld",
    "open_store",
]

SCHEMA_VERSION = 1
"""The store's schema version, kept in its ``meta`` table."""

_APPLICATION = "oam-actors state store"

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE objects (key TEXT PRIMARY KEY, tenant TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL, "
    "version INTEGER NOT NULL, recipe BLOB NOT NULL, state BLOB NOT NULL)",
    "CREATE INDEX objects_by_tenant ON objects (tenant, kind, id)",
)

# A higher version wins; a record without a recipe (a commit) keeps the stored one.
_UPSERT = (
    "INSERT INTO objects (key, tenant, kind, id, version, recipe, state) VALUES (?, ?, ?, ?, ?, coalesce(?, x''), ?) "
    "ON CONFLICT(key) DO UPDATE SET version = excluded.version, state = excluded.state, "
    "recipe = coalesce(?, objects.recipe) WHERE excluded.version > objects.version"
)


class StoreError(Exception):
    """The store cannot be used as given; ``str()`` is one line naming the path and the cause."""


class StoreMissing(StoreError):
    """The path's folder does not exist (or, for the ``state`` command, the file does not)."""


class StoreLocked(StoreError):
    """Another process holds the store (a running server, or a ``state`` command)."""


class StoreCorrupt(StoreError):
    """The file is unreadable, not an SQLite database, or not an oam-actors store."""


class StoreTooNew(StoreError):
    """The store was written by a newer oam-actors (a higher schema version)."""


class StoreTooOld(StoreError):
    """The store has an older format that cannot be migrated (the checkpoint-only one)."""


class StoreRecord(msgspec.Struct, frozen=True):
    """One object as stored (see the module docstring); ``recipe`` is ``None`` in a commit that
    keeps the stored recipe."""

    key: str
    tenant: str
    kind: str
    id: str
    version: int
    recipe: bytes | None
    state: bytes


def open_store(path: str, *, create: bool = True, synchronous: str = "NORMAL") -> SqliteStore:
    """Open the store at ``path`` (see :class:`SqliteStore`); raises a :class:`StoreError`.
    ``create=False`` refuses a path where no file is (:class:`StoreMissing`)."""
    return SqliteStore(path, create=create, synchronous=synchronous)


class SqliteStore:
    """The store in one SQLite file; see the module docstring."""

    def __init__(self, path: str, *, create: bool = True, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = path
        self._lock = threading.Lock()
        existed = _check_path(path, create=create)
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=0)
        except sqlite3.Error as exc:
            raise StoreCorrupt(f"{path}: cannot open ({exc})") from exc
        try:
            self._take(existed, synchronous)
        except BaseException:
            self._db.close()
            if not existed:
                _remove_files(path)  # nothing written for a store refused at its creation
            raise

    def _take(self, existed: bool, synchronous: str) -> None:
        db, path = self._db, self.path
        try:
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            if existed:
                _check_header(path)
            db.execute("BEGIN IMMEDIATE")  # takes the file for as long as this connection lives
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreLocked(f"{path}: the store is in use by another process (a running server?)") from exc
            raise StoreCorrupt(f"{path}: not an oam-actors state store ({exc})") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreCorrupt(f"{path}: not an oam-actors state store ({exc})") from exc
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                for statement in _SCHEMA:
                    db.execute(statement)
                db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                               [("application", _APPLICATION), ("schema_version", str(SCHEMA_VERSION))])
            else:
                _check_schema(path, db, tables)
            db.execute("COMMIT")
            # WAL after the schema: the journal mode is set outside a transaction.
            if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                raise StoreCorrupt(f"{path}: cannot use write-ahead logging here")
            db.execute(f"PRAGMA synchronous={synchronous}")
            db.execute("PRAGMA integrity_check(1)").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreCorrupt(f"{path}: the store is corrupt ({exc})") from exc

    # --- writing -----------------------------------------------------------------------------

    def write(self, records: Sequence[StoreRecord], deletions: Iterable[str] = ()) -> list[str]:
        """Apply ``records`` and ``deletions`` in one transaction; the keys of records refused
        because the stored version is not older (stale writers). Raises ``sqlite3.Error`` (the
        batch then left nothing behind)."""
        rows = [(r.key, r.tenant, r.kind, r.id, r.version, r.recipe, r.state, r.recipe) for r in records]
        deleted = [(key,) for key in deletions]
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if deleted:
                    db.executemany("DELETE FROM objects WHERE key = ?", deleted)
                changed = 0
                if rows:
                    changed = db.executemany(_UPSERT, rows).rowcount
                stale = [] if changed == len(rows) else self._stale(records)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return stale

    def _stale(self, records: Sequence[StoreRecord]) -> list[str]:
        """Of ``records`` (just upserted), those the stored version beat."""
        stale = []
        for record in records:
            row = self._db.execute("SELECT version FROM objects WHERE key = ?", (record.key,)).fetchone()
            if row is not None and row[0] != record.version:
                stale.append(record.key)
        return stale

    # --- reading -----------------------------------------------------------------------------

    def load(self, key: str) -> StoreRecord | None:
        """The stored record of ``key``, or ``None``."""
        with self._lock:
            row = self._db.execute(
                "SELECT key, tenant, kind, id, version, recipe, state FROM objects WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else _record(row)

    def version(self, key: str) -> int | None:
        """The stored version of ``key`` (``None``: not stored), without reading its state."""
        with self._lock:
            row = self._db.execute("SELECT version FROM objects WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def records(self, tenant: str | None = None, *, kind: str | None = None) -> list[StoreRecord]:
        """Every record (of ``tenant``, of ``kind``), by tenant, kind and id."""
        query = "SELECT key, tenant, kind, id, version, recipe, state FROM objects"
        conditions, values = [], []
        if tenant is not None:
            conditions.append("tenant = ?")
            values.append(tenant)
        if kind is not None:
            conditions.append("kind = ?")
            values.append(kind)
        if conditions:
            query += " WHERE " + " AND ".join(conditions)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY tenant, kind, id", values).fetchall()
        return [_record(row) for row in rows]

    def ids(self, tenant: str, kind: str) -> list[str]:
        """The ids of ``tenant``'s objects of ``kind``, sorted (no state read)."""
        with self._lock:
            rows = self._db.execute("SELECT id FROM objects WHERE tenant = ? AND kind = ? ORDER BY id", (tenant, kind))
            return [row[0] for row in rows]

    # --- maintenance -------------------------------------------------------------------------

    def compact(self) -> tuple[int, int]:
        """Fold the write-ahead log into the file and rebuild it without free pages; the file's
        size in bytes before and after."""
        with self._lock:
            before = _size(self.path)
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return before, _size(self.path)

    def close(self) -> None:
        """Release the file (and its lock); nothing may be called after."""
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"


def _record(row: tuple) -> StoreRecord:
    key, tenant, kind, object_id, version, recipe, state = row
    return StoreRecord(key, tenant, kind, object_id, version, bytes(recipe), bytes(state))


def _check_path(path: str, *, create: bool) -> bool:
    """Whether a file is at ``path``; refuses a missing folder, or a missing file without ``create``."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StoreMissing(f"{path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise StoreCorrupt(f"{path}: is a folder, not a state store")
    exists = os.path.exists(path)
    if not exists and not create:
        raise StoreMissing(f"{path}: no such state store")
    if exists and not os.access(path, os.R_OK | os.W_OK):
        raise StoreCorrupt(f"{path}: cannot read and write the file (permissions)")
    return exists


def _check_header(path: str) -> None:
    """Refuse a file that is not an SQLite database before SQLite touches it (an empty file is
    one SQLite would take as a new database: refused too, it is not a store we made)."""
    try:
        with open(path, "rb") as file:
            header = file.read(16)
    except OSError as exc:
        raise StoreCorrupt(f"{path}: cannot read the file ({exc.strerror or exc})") from exc
    if header != b"SQLite format 3\x00":
        raise StoreCorrupt(f"{path}: not an oam-actors state store (not an SQLite database)")


def _check_schema(path: str, db: sqlite3.Connection, tables: set[str]) -> None:
    if "meta" not in tables:
        if tables == {"checkpoints"}:
            raise StoreTooOld(
                f"{path}: a checkpoint-only store of an older oam-actors (Ray shard checkpoints, no object "
                "recipes); it cannot be revived: move it away and start with a new file"
            )
        raise StoreCorrupt(f"{path}: not an oam-actors state store (an SQLite database with other tables)")
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("application") != _APPLICATION or not str(meta.get("schema_version", "")).isdigit():
        raise StoreCorrupt(f"{path}: not an oam-actors state store (its meta table is not ours)")
    version = int(meta["schema_version"])
    if version > SCHEMA_VERSION:
        raise StoreTooNew(
            f"{path}: written by a newer oam-actors (store schema {version}, this one reads {SCHEMA_VERSION}); "
            "upgrade oam-actors to use it"
        )
    if version < SCHEMA_VERSION:
        raise StoreTooOld(f"{path}: store schema {version} is older than {SCHEMA_VERSION} and has no migration")


def _size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _remove_files(path: str) -> None:
    for leftover in (path, path + "-wal", path + "-shm", path + "-journal"):
        try:
            os.remove(leftover)
        except FileNotFoundError:
            pass
