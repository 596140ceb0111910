"""State that actors share by reference inside one process, and how RaySystem keeps it shared.

In one process an actor may hand an object of its state to other actors by reference, through a
control message (a world hands its document to the NPCs on it, whose world tools read and write
it directly). Across processes a copy would silently diverge, so for the types their layer
declares shared (``runtime``'s ``register_shared``) RaySystem keeps such objects shared:

- A shard answering a control call with a shared object sends the driver a detached copy
  (``runtime.detached_copy``) tagged with a :class:`~oam_actors.cluster.wire.SharedRef` (owner +
  control message).
- When the driver ships an actor that holds such a copy, the copy travels as its reference (the
  actor is placed by its own address). On the owner's shard it gets the owner's live object
  (asked of the owner again after a restart); when an actor holding it commits, the shard
  checkpoints the owner too, so changes made through the shared object (an NPC's world tool) are
  as durable as the owner's own.
- On any other shard it gets that shard's replica (the type's ``runtime.Replication``), one per
  shard: the shard sends ``Follow``, the driver asks the owner's shard (``Replicate``), which
  answers a detached copy and from then on pushes each change of the live object (``Push``, in
  order, forwarded as ``Apply``). A write made through the replica is made on it at once and
  forwarded to the owner actor as a message (the owner commits and checkpoints it); the replies
  of the actors holding the replica wait for those writes' answers, so what they wrote is durable
  before they answer. A write whose owner's process died before answering is sent again (to
  its next process; the type's writes are idempotent), up to three times. A write the owner
  refuses, and a restart of the owner's shard (``Refollow``), make the replica copy the owner's
  object again.
"""

from __future__ import annotations

import weakref
from typing import Any

from .wire import SharedRef

__all__ = ["SharedCopies"]


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
