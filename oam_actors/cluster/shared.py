"""State that actors share by reference inside one process, and how RaySystem keeps it shared.

In one process a world actor hands its document (a :class:`~oam_actors.game.WorldState`) to the
NPCs on it (``WorldShare``), and their world tools read and write it directly. Across processes a
copy would silently diverge, so RaySystem keeps such objects shared:

- A shard answering a control call with a shared object sends the driver a detached copy tagged
  with a :class:`~oam_actors.cluster.wire.SharedRef` (owner + control message).
- When the driver ships an actor that holds such a copy, the copy travels as its reference, the
  actor is placed on the owner's shard, and the shard gives it the owner's live object (asking
  the owner again after a restart).
- When an actor holding shared state commits, the shard checkpoints the owners too, so changes
  made through the shared object (an NPC's world tool) are as durable as the owner's own.

:data:`SHARED_TYPES` lists the types shared this way and how to copy each without its
process-bound parts (observers, callbacks).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..game import WorldState
from .wire import SharedRef

__all__ = ["SHARED_TYPES", "SharedCopies", "detached_copy"]

SHARED_TYPES: dict[type, Callable[[Any], Any]] = {
    WorldState: lambda state: WorldState.from_json(state.to_json()),
}


def detached_copy(obj: Any) -> Any | None:
    """A copy of ``obj`` fit to leave its process, if it is of a shared type; else ``None``."""
    copier = SHARED_TYPES.get(type(obj))
    return None if copier is None else copier(obj)


class SharedCopies:
    """The driver's copies of shared objects and the reference each stands for."""

    def __init__(self) -> None:
        self._refs: dict[int, SharedRef] = {}

    def remember(self, copy: Any, ref: SharedRef) -> Any:
        self._refs[id(copy)] = ref
        weakref.finalize(copy, self._refs.pop, id(copy), None)
        return copy

    def reference(self, obj: Any) -> SharedRef | None:
        """The reference ``obj`` stands for, if it is one of our copies."""
        return self._refs.get(id(obj))
