"""WorldState: the shared JSON document a world's NPCs read and change (protocol-game §6.12).

Contract:

- The document's root is always a JSON object; key order is kept. Values are plain JSON values
  (``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite ``float``, ``bool``, ``None``);
  anything else passed in raises ``ValueError``. Values go in and come out as copies, so callers
  can never change the document behind its back.
- Paths are :class:`WorldPath` values or strings parsed leniently (``party[0].name``,
  ``$.player.gold``, ``/player/gold``); a malformed path raises :class:`WorldStateError`, except
  in :meth:`WorldState.get` and :meth:`WorldState.summary`, where it reads as absent.
- Every mutating call returns the :class:`Change` list it made. An empty list means the call was a
  no-op: the version did not move and no observer ran. A call that raises changed nothing.
- ``version`` starts at 0 (or the checkpointed value) and increments once per call that changed
  the document.
- Observers run synchronously after the change is committed, in registration order, for every
  change whose path is at, inside or above the observed path.
- :meth:`WorldState.derived` keeps values its readers derive from the document (the world tools
  of a crowd's NPCs) until the version moves.

Not thread-safe: a WorldState belongs to one owner (the world's actor), which serialises calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec

from ..errors import ErrorCode, ProtocolError

__all__ = [
    "DERIVED_KEPT",
    "MAX_MERGE_DEPTH",
    "MISSING",
    "Change",
    "Missing",
    "Observation",
    "WorldPath",
    "WorldState",
    "WorldStateError",
    "compact_json",
    "copy_value",
    "json_equal",
    "lookup",
    "resolve_case",
    "to_json_value",
    "type_name",
]

MISSING = msgspec.UNSET
"""The absence of a value (distinct from a stored JSON ``null``, which is ``None``)."""

Missing: TypeAlias = msgspec.UnsetType

DERIVED_KEPT = 64
"""Values :meth:`WorldState.derived` keeps per version (then it starts again)."""

MAX_MERGE_DEPTH = 64
"""Below this many levels a merge patch object replaces instead of merging (bounds recursion)."""

_ROOT_NOT_OBJECT = "The world state root must be a JSON object."
_SUMMARY_MAX_DEPTH = 4
_SUMMARY_MAX_CHARS = 200
_NORMALIZE_SEPARATORS = str.maketrans({"[": ".", "/": ".", "]": None})


class WorldStateError(Exception):
    """A malformed path, a write through a scalar, a bad list index, or a non-object root.

    ``message`` is the exact protocol text; ``path`` is the path involved, as given. The bridge
    answers it with ``-32054 world_error`` (see :meth:`to_protocol`).
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def to_protocol(self, world: str, path: str | None = None) -> ProtocolError:
        """The ``world_error`` for ``world``; ``path`` (as the client sent it) defaults to ours."""
        return ProtocolError(
            ErrorCode.WORLD_ERROR, self.message, world=world, path=self.path if path is None else path
        )


class WorldPath(msgspec.Struct, frozen=True):
    """A location in the document: keys and list indices from the root (``()`` is the root)."""

    segments: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> WorldPath:
        """Parse ``text`` leniently, since small models write paths in several styles.

        ``$``, ``/``, ``.`` and blank mean the root; ``$.`` and one leading ``/`` are dropped;
        ``[``/``/`` separate like ``.`` and ``]`` is dropped. Raises :class:`WorldStateError` on
        an empty segment (``a..b``, ``player.``).
        """
        trimmed = text.strip()
        if trimmed in ("$", "/", "."):
            return cls()
        trimmed = trimmed.removeprefix("$.").removeprefix("/")
        if not trimmed:
            return cls()
        segments = trimmed.translate(_NORMALIZE_SEPARATORS).split(".")
        if trimmed.startswith("[") and segments[0] == "":
            segments = segments[1:]  # "[0].x" addresses index 0 of the root
        if "" in segments:
            raise WorldStateError(
                text, f"'{text}' is not a valid path. Use dot-separated keys such as 'player.gold'."
            )
        return cls(tuple(segments))

    @property
    def canonical(self) -> str:
        """The segments joined with ``.`` (``""`` for the root)."""
        return ".".join(self.segments)

    @property
    def is_root(self) -> bool:
        return not self.segments

    @property
    def parent(self) -> WorldPath | None:
        """The enclosing path, or ``None`` for the root."""
        return WorldPath(self.segments[:-1]) if self.segments else None

    def child(self, segment: str) -> WorldPath:
        return WorldPath((*self.segments, segment))

    def prefix(self, length: int) -> WorldPath:
        """The first ``length`` segments."""
        return WorldPath(self.segments[:length])

    def is_within(self, other: WorldPath) -> bool:
        """True if this path equals ``other`` or lies inside it."""
        return self.segments[: len(other.segments)] == other.segments

    def overlaps(self, other: WorldPath) -> bool:
        """True if one path contains the other."""
        return self.is_within(other) or other.is_within(self)

    def __str__(self) -> str:
        return self.canonical


class Change(msgspec.Struct, frozen=True):
    """One change: its canonical ``path`` and the values before and after.

    ``old`` is :data:`MISSING` when the value was created, ``new`` when it was removed. Encoded
    with msgspec it is the ``world/changed`` shape ``{"path", "oldValue"?, "newValue"?}``.
    Handlers share one instance: treat it as read-only.
    """

    path: str
    old: Any = msgspec.field(default=MISSING, name="oldValue")
    new: Any = msgspec.field(default=MISSING, name="newValue")


class Observation:
    """A registered observer; :meth:`cancel` stops delivery (safe to call more than once)."""

    __slots__ = ("_key", "_registry")

    def __init__(self, registry: dict[int, _Observer], key: int) -> None:
        self._registry = registry
        self._key = key

    @property
    def active(self) -> bool:
        return self._key in self._registry

    def cancel(self) -> None:
        self._registry.pop(self._key, None)


class _Observer(msgspec.Struct, frozen=True):
    path: WorldPath
    handler: Callable[[Change], None]


_RawChange: TypeAlias = tuple[WorldPath, Any, Any]


class WorldState:
    """A JSON document with paths, versioned changes and observers (see the module docstring)."""

    def __init__(self, document: Mapping[str, Any] | None = None, *, version: int = 0) -> None:
        """Raises :class:`WorldStateError` if ``document`` is not an object, ``ValueError`` if it
        is not JSON or ``version`` is negative."""
        root = {} if document is None else to_json_value(document)
        if not isinstance(root, dict):
            raise WorldStateError("", f"The world state root must be a JSON object, not {type_name(root)}.")
        if version < 0:
            raise ValueError(f"version must be at least 0; got {version}")
        self._document: dict[str, Any] = root
        self._version = version
        self._observers: dict[int, _Observer] = {}
        self._observer_ids = 0
        self._derived: dict[Any, Any] = {}
        self._derived_version = version

    # --- reading ------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """How many calls have changed the document."""
        return self._version

    def derived(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept under the hashable ``key`` while the version stays the same: what
        many readers derive from one document is made once (at most :data:`DERIVED_KEPT` keys)."""
        if self._derived_version != self._version or len(self._derived) >= DERIVED_KEPT:
            self._derived = {}
            self._derived_version = self._version
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def snapshot(self) -> dict[str, Any]:
        """A copy of the whole document."""
        return _copy(self._document)

    @property
    def document(self) -> dict[str, Any]:
        """The document itself, to read without copying it: writes replace the containers on
        their path and never change one in place, so it stays as it was when taken. Never
        modify it; hand out a :func:`copy_value` of what you take from it."""
        return self._document

    def top_level_keys(self) -> list[str]:
        """The root's keys in document order, without copying any value."""
        return list(self._document)

    def get(self, path: str | WorldPath) -> Any | Missing:
        """A copy of the value at ``path`` (exact keys), or :data:`MISSING` if there is none or
        the path is malformed."""
        try:
            parsed = _as_path(path)
        except WorldStateError:
            return MISSING
        return _copy(lookup(self._document, parsed))

    def summary(self, paths: Sequence[str], max_lines: int = 30) -> str:
        """``path: value`` lines for a prompt's ``Game state:`` block (§6.12 Summary).

        Objects are flattened to their leaves (four levels deep), strings are written bare and
        other values as compact JSON, cut to 200 characters. Missing and malformed paths are
        skipped; lines beyond ``max_lines`` (at least 1) become ``(<n> more not shown)``.
        """
        lines: list[str] = []
        for text in paths:
            try:
                path = WorldPath.parse(text)
            except WorldStateError:
                continue
            value = lookup(self._document, path)
            if value is not MISSING:
                lines.extend(_summary_lines(value, path.canonical, 0))
        limit = max(max_lines, 1)
        if len(lines) > limit:
            lines = [*lines[:limit], f"({len(lines) - limit} more not shown)"]
        return "\n".join(lines)

    # --- writing ------------------------------------------------------------------------------

    def set(self, path: str | WorldPath, value: Any) -> list[Change]:
        """Store ``value`` (``None`` stores JSON null) at ``path``.

        Intermediate objects are created, also through a stored null; index ``n`` of an
        ``n``-item list appends. Raises :class:`WorldStateError` for a malformed path, a bad list
        index, a path through a scalar or a non-object root.
        """
        parsed = _as_path(path)
        return self._commit(parsed, lookup(self._document, parsed), to_json_value(value))

    def remove(self, path: str | WorldPath) -> tuple[Any | Missing, list[Change]]:
        """Remove the value at ``path``; return it (or :data:`MISSING`) with the changes.

        Later list items shift down. Removing the root empties the document and returns the old
        one. Raises :class:`WorldStateError` only for a malformed path.
        """
        parsed = _as_path(path)
        old = lookup(self._document, parsed)
        if old is MISSING:
            return MISSING, []
        changes = self._commit(parsed, old, {} if parsed.is_root else MISSING)
        return _copy(old), changes

    def modify(
        self, path: str | WorldPath, transform: Callable[[Any | Missing], Any | Missing]
    ) -> list[Change]:
        """Replace the value at ``path`` with ``transform(copy of it or MISSING)``.

        Returning :data:`MISSING` removes the value. If ``transform`` raises, nothing changes and
        the exception propagates; a result that cannot be stored raises as :meth:`set` does.
        """
        parsed = _as_path(path)
        old = lookup(self._document, parsed)
        new = transform(_copy(old))
        return self._commit(parsed, old, new if new is MISSING else to_json_value(new))

    def merge(self, path: str | WorldPath, patch: Any) -> list[Change]:
        """Apply an RFC 7386 merge patch at ``path``; one change per modified leaf.

        Patch objects merge recursively, ``null`` members delete keys, anything else replaces; an
        object merged into a non-object replaces it (one change at that path). Raises
        :class:`WorldStateError` as :meth:`set` does.
        """
        parsed = _as_path(path)
        changes: list[_RawChange] = []
        merged = _merged(to_json_value(patch), lookup(self._document, parsed), parsed, changes, 0)
        if not changes:
            return []
        return self._publish(self._rewritten(parsed, merged), changes)

    # --- observing ----------------------------------------------------------------------------

    def observe(self, path: str | WorldPath, handler: Callable[[Change], None]) -> Observation:
        """Call ``handler`` for each change at, inside or above ``path`` (``""`` = everything).

        A change above the path reports the ancestor's path and values. Handlers run in
        registration order right after the change is committed and must not raise: if some do,
        the rest still run, then the mutating call raises an ``ExceptionGroup`` of their errors
        (the change stays made). Raises :class:`WorldStateError` for a malformed path.
        """
        self._observer_ids += 1
        self._observers[self._observer_ids] = _Observer(_as_path(path), handler)
        return Observation(self._observers, self._observer_ids)

    # --- replicas -----------------------------------------------------------------------------

    def adopt(self, path: str, new: Any | Missing, version: int) -> None:
        """Take a change the original of this copy made (a replica of a document kept in
        another process): ``new`` (:data:`MISSING`: removed) at the canonical ``path``, and the
        original's ``version``. Observers do not run."""
        parsed = WorldPath.parse(path)
        if not json_equal(lookup(self._document, parsed), new):
            self._document = self._rewritten(parsed, new)
        self._version = version

    def replace(self, other: WorldState) -> None:
        """Become a copy of ``other``'s document and version (observers stay, and do not run)."""
        self._document, self._version = other.snapshot(), other.version

    # --- checkpoints --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The checkpoint ``{"version": …, "document": …}`` (a copy)."""
        return {"version": self._version, "document": self.snapshot()}

    @classmethod
    def from_json(cls, checkpoint: Mapping[str, Any]) -> WorldState:
        """A state from :meth:`to_json` output (observers are not part of it).

        Raises ``ValueError`` for a malformed checkpoint, :class:`WorldStateError` for a
        document that is not an object.
        """
        version = checkpoint.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"a world checkpoint needs an integer 'version'; got {version!r}")
        if "document" not in checkpoint:
            raise ValueError("a world checkpoint needs a 'document'")
        return cls(checkpoint["document"], version=version)

    def __repr__(self) -> str:
        return f"WorldState(version={self._version}, {compact_json(self._document)})"

    # --- internals ----------------------------------------------------------------------------

    def _commit(self, path: WorldPath, old: Any | Missing, new: Any | Missing) -> list[Change]:
        if json_equal(old, new):
            return []
        return self._publish(self._rewritten(path, new), [(path, old, new)])

    def _rewritten(self, path: WorldPath, value: Any | Missing) -> dict[str, Any]:
        """The document with ``value`` (or nothing) at ``path``; the current one is untouched."""
        if path.is_root and not isinstance(value, dict):
            raise WorldStateError("", _ROOT_NOT_OBJECT)
        if value is MISSING:
            return _without(self._document, path, 0)
        return _written(self._document, path, 0, value)

    def _publish(self, document: dict[str, Any], raw: list[_RawChange]) -> list[Change]:
        self._document = document
        self._version += 1
        changes = [Change(path.canonical, _copy(old), _copy(new)) for path, old, new in raw]
        self._deliver([path for path, _, _ in raw], changes)
        return changes

    def _deliver(self, paths: list[WorldPath], changes: list[Change]) -> None:
        errors: list[Exception] = []
        for path, change in zip(paths, changes, strict=True):
            for key, observer in list(self._observers.items()):
                # A handler may cancel a later observer; that one must not be called any more.
                if key in self._observers and observer.path.overlaps(path):
                    try:
                        observer.handler(change)
                    except Exception as error:  # re-raised below, after every observer ran
                        errors.append(error)
        if errors:
            raise ExceptionGroup("world state observers failed", errors)


# --- pure document functions ------------------------------------------------------------------


def lookup(document: Any, path: WorldPath) -> Any | Missing:
    """The value at ``path`` inside ``document`` (not a copy), or :data:`MISSING`."""
    current = document
    for segment in path.segments:
        current = _child(current, segment)
        if current is MISSING:
            break
    return current


def resolve_case(document: Any, path: WorldPath) -> WorldPath:
    """``path`` with each key that has no exact match replaced by a case-insensitive match.

    Resolution stops at the first segment that matches nothing; the rest is kept as given.
    """
    current = document
    resolved: list[str] = []
    for offset, segment in enumerate(path.segments):
        key = _matching_key(current, segment)
        child = MISSING if key is None else _child(current, key)
        if child is MISSING:
            return WorldPath((*resolved, *path.segments[offset:]))
        resolved.append(key)
        current = child
    return WorldPath(tuple(resolved))


def to_json_value(value: Any) -> Any:
    """A fresh plain-JSON copy of ``value``; ``ValueError`` if it is not JSON.

    Tuples become lists, ``str``/``int``/``float`` subclasses their base types.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {_json_key(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    raise ValueError(f"a {type(value).__name__} is not a JSON value")


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``1``, ``1.0`` and ``True`` differ; object key order does not matter."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return a == b


def type_name(value: Any) -> str:
    """``an object``, ``a list``, ``a string``, ``a boolean``, ``a number`` or ``null``."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "a boolean" if isinstance(value, bool) else "a number"


def compact_json(value: Any) -> str:
    """``value`` as JSON text without spaces."""
    return msgspec.json.encode(value).decode()


def _as_path(path: str | WorldPath) -> WorldPath:
    return path if isinstance(path, WorldPath) else WorldPath.parse(path)


def _json_key(key: Any) -> str:
    if not isinstance(key, str):
        raise ValueError(f"JSON object keys must be strings; got {key!r}")
    return str(key)


def _index(segment: str) -> int | None:
    return int(segment) if segment.isascii() and segment.isdigit() else None


def _child(container: Any, segment: str) -> Any | Missing:
    if isinstance(container, dict):
        return container.get(segment, MISSING)
    if isinstance(container, list):
        index = _index(segment)
        if index is not None and index < len(container):
            return container[index]
    return MISSING


def _matching_key(container: Any, segment: str) -> str | None:
    if not isinstance(container, dict) or segment in container:
        return segment
    folded = segment.casefold()
    return next((key for key in container if key.casefold() == folded), None)


def copy_value(value: Any) -> Any:
    """A copy of a document value: its objects and lists are new, its scalars shared."""
    if isinstance(value, dict):
        return {key: copy_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_value(item) for item in value]
    return value


_copy = copy_value


def _written(container: Any, path: WorldPath, at: int, value: Any) -> Any:
    """``container`` with ``value`` stored at ``path.segments[at:]``, copied on the way down."""
    if at == len(path.segments):
        return value
    key = path.segments[at]
    if container is MISSING or container is None:
        return {key: _written(MISSING, path, at + 1, value)}
    if isinstance(container, dict):
        return {**container, key: _written(container.get(key, MISSING), path, at + 1, value)}
    if isinstance(container, list):
        index = _index(key)
        count = len(container)
        if index is None or index > count:
            raise WorldStateError(
                path.canonical,
                f"'{path.prefix(at)}' is a list of {count} items; '{key}' is not a valid index "
                f"(use 0-{count}, where {count} appends).",
            )
        items = list(container)
        if index == count:
            items.append(_written(MISSING, path, at + 1, value))
        else:
            items[index] = _written(items[index], path, at + 1, value)
        return items
    raise WorldStateError(
        path.canonical,
        f"Cannot write '{path}': '{path.prefix(at)}' is {type_name(container)}, not an object or list.",
    )


def _without(container: Any, path: WorldPath, at: int) -> Any:
    """``container`` without the (existing) value at ``path.segments[at:]``."""
    key = path.segments[at]
    last = at == len(path.segments) - 1
    if isinstance(container, dict):
        if last:
            return {name: item for name, item in container.items() if name != key}
        return {**container, key: _without(container[key], path, at + 1)}
    index = _index(key)
    assert index is not None, "removal paths are looked up first"
    if last:
        return container[:index] + container[index + 1 :]
    return [*container[:index], _without(container[index], path, at + 1), *container[index + 1 :]]


def _merged(patch: Any, target: Any, path: WorldPath, changes: list[_RawChange], depth: int) -> Any:
    """RFC 7386 ``MergePatch(target, patch)``, appending the leaf changes it makes."""
    if not isinstance(patch, dict) or depth >= MAX_MERGE_DEPTH:
        if not json_equal(target, patch):
            changes.append((path, target, patch))
        return patch
    if not isinstance(target, dict):
        # The whole subtree is new: report it as one change rather than one per leaf.
        merged = _merged(patch, {}, path, [], depth + 1)
        changes.append((path, target, merged))
        return merged
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            if key in result:
                changes.append((path.child(key), result.pop(key), MISSING))
        else:
            result[key] = _merged(value, target.get(key, MISSING), path.child(key), changes, depth + 1)
    return result


def _summary_lines(value: Any, label: str, depth: int) -> Iterator[str]:
    if isinstance(value, dict) and value and depth < _SUMMARY_MAX_DEPTH:
        for key, item in value.items():
            yield from _summary_lines(item, f"{label}.{key}" if label else key, depth + 1)
        return
    text = value if isinstance(value, str) else compact_json(value)
    if len(text) > _SUMMARY_MAX_CHARS:
        text = text[: _SUMMARY_MAX_CHARS - 3] + "..."
    yield f"{label or 'state'}: {text}"
