"""What a runtime that moves actors to other processes must know about the objects they hold.

A remote runtime (``RaySystem``) ships an actor pickled, and its messages and replies too. Most
state pickles by value; two kinds of object must not, and only the layer that defines them knows
which they are (the runtime knows no protocol). That layer declares them here, on import:

- An **endpoint** stays in its process (a connection's outlet writes to a socket). An actor in
  another process holds a *stand-in* instead, which turns every call into a plain value that
  travels back in order; there a *relay* replays those values on the real object. An
  :class:`EndpointKind` recognises its endpoints and makes both ends. Calls travel one way: a
  stand-in whose call must answer at once answers with an id of its own (``new_id``) and its
  relay maps that id to the real answer.
- A **shared** object is state one actor hands to others in its process by reference (a world's
  document, which the NPCs on it read and write). A copy would silently diverge, so a remote
  runtime gives holders beside the owner the owner's live object, and holders in another
  process a *replica* kept in step (a :class:`Replication`: the owner's changes are pushed to
  it in order, and each write made through it is also sent to the owner actor as a message). It
  needs to know which types are shared, how to copy one without its process-bound parts
  (observers, callbacks) when a reply carries one out of its process, and how to replicate it:
  :func:`register_shared`.

How an actor's state is checkpointed is the actor's own hook (``Actor.snapshot`` / ``restore``).
State that holds endpoints (a world's subscribers) is written with :func:`dumps_state` and read
with :func:`loads_state`: an endpoint in it becomes a reference that the runtime hosting the actor
(:func:`use_endpoint_references`) resolves to a stand-in again after a restart, the driver's
endpoint being still there; in one process it is written as ``None`` (an endpoint does not outlive
its process, a checkpoint may).

Registration is per process, as with :mod:`copyreg`: it runs when the declaring module is
imported, and that module defines the classes of the actors holding such objects, so it is
imported wherever one is pickled or unpickled. An endpoint's reference carries its kind (pickled
by reference), so the receiving side needs no lookup.
"""

from __future__ import annotations

import contextvars
import io
import pickle
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = [
    "EndpointKind",
    "EndpointReferences",
    "Relay",
    "Replication",
    "detached_copy",
    "dumps_state",
    "endpoint_kind",
    "held_by_reference",
    "loads_state",
    "register_endpoint",
    "register_shared",
    "replication_of",
    "use_endpoint_references",
]

T = TypeVar("T")


class Relay(Protocol):
    """The end of an endpoint in its own process."""

    def deliver(self, call: Any) -> None:
        """Replay one call a stand-in made, in the order the calls were made."""


class EndpointKind(Protocol):
    """A type of object that stays in its process; see the module docstring.

    The kind itself travels inside pickles by reference: make it a module-level object that
    pickles by name (a class, or an instance whose ``__reduce__`` returns its global name).
    """

    def matches(self, cls: type) -> bool:
        """Whether instances of ``cls`` are endpoints of this kind (asked once per type)."""

    def relay(self, endpoint: Any) -> Relay:
        """The relay replaying calls on ``endpoint``. It should hold it weakly: the runtime
        drops the relay once ``endpoint`` is collected, and a late call has nowhere to go."""

    def stand_in(self, emit: Callable[[Any], None], new_id: Callable[[], str]) -> Any:
        """What actors in another process hold instead of an endpoint: each call on it becomes
        ``emit(call)``, a plain picklable value for :meth:`Relay.deliver`. ``new_id()`` is an id
        unique across processes and restarts, for calls that must answer at once."""


class Replication(Protocol):
    """How a shared type is kept in step across processes (see the module docstring); like an
    :class:`EndpointKind`, a module-level object."""

    def replica(self, copy: Any, forward: Callable[[Any], None]) -> Any:
        """What holders in another process hold, made from a detached ``copy`` of the owner's
        object: it reads as the copy does, and each write made through it also calls
        ``forward(message)``, a picklable message the owner actor handles by making that write.
        Such a message must be idempotent: one whose answer was lost with the owner's process is
        sent again, and the owner's checkpoint may already hold its write."""

    def follow(self, obj: Any, push: Callable[[Any], None]) -> Callable[[], None]:
        """From now on call ``push(change)`` (a picklable value) after each change of the owner's
        ``obj``, in order; returns what stops it."""

    def apply(self, replica: Any, change: Any) -> None:
        """Make in ``replica`` a change ``follow`` pushed (without forwarding it)."""

    def reset(self, replica: Any, copy: Any) -> None:
        """Make ``replica`` the owner's object again, from a newer detached ``copy``."""


_endpoint_kinds: list[EndpointKind] = []
_kind_by_type: dict[type, EndpointKind | None] = {}
_detachers: dict[type, Callable[[Any], Any]] = {}
_replications: dict[type, Replication] = {}


def register_endpoint(kind: EndpointKind) -> None:
    """Declare an endpoint kind (once; registering it again changes nothing)."""
    if kind not in _endpoint_kinds:
        _endpoint_kinds.append(kind)
        _kind_by_type.clear()


def endpoint_kind(obj: Any) -> EndpointKind | None:
    """The kind ``obj`` is an endpoint of, or ``None`` (cached per type: asked of every object
    a remote runtime pickles)."""
    return _kind_of(type(obj))


def _kind_of(cls: type) -> EndpointKind | None:
    try:
        return _kind_by_type[cls]
    except KeyError:
        kind = _kind_by_type[cls] = next((kind for kind in _endpoint_kinds if kind.matches(cls)), None)
        return kind


def held_by_reference(cls: type) -> bool:
    """Whether instances of ``cls`` may cross to another process by reference (an endpoint or a
    shared type): the only objects a remote runtime's pickler of values must ask about."""
    return cls in _detachers or _kind_of(cls) is not None


def register_shared(cls: type[T], detach: Callable[[T], T], replication: Replication | None = None) -> None:
    """Declare ``cls`` (exactly, not its subclasses) shared by reference; ``detach(obj)`` is a
    copy of ``obj`` fit to leave its process; ``replication``, how holders in another process
    share it (without one, a remote runtime keeps them in the owner's process)."""
    _detachers[cls] = detach
    if replication is not None:
        _replications[cls] = replication


def replication_of(obj: Any) -> Replication | None:
    """How ``obj``'s shared type is replicated, if it is."""
    return _replications.get(type(obj))


def detached_copy(obj: Any) -> Any | None:
    """A copy of ``obj`` fit to leave its process if its type is shared, else ``None``."""
    detach = _detachers.get(type(obj))
    return None if detach is None else detach(obj)


class EndpointReferences(Protocol):
    """How a runtime hosting actors away from their endpoints writes the stand-ins in their
    checkpoints, and finds them again."""

    def reference(self, stand_in: Any) -> Any | None:
        """A picklable reference to the endpoint ``stand_in`` stands for (``None``: unknown)."""

    def resolve(self, reference: Any) -> Any:
        """What actors here hold for the endpoint ``reference`` names."""


_references: contextvars.ContextVar[EndpointReferences | None] = contextvars.ContextVar(
    "oam_actors_endpoint_references", default=None
)
_ENDPOINT = "endpoint"  # persistent ids are (_ENDPOINT, reference or None)


def use_endpoint_references(references: EndpointReferences) -> None:
    """Checkpoints written and read from now on in this context (and the tasks it starts) keep
    endpoints by ``references``; a remote runtime's host calls it once, before hosting actors."""
    _references.set(references)


def dumps_state(value: Any) -> bytes:
    """``value`` pickled for a checkpoint, endpoints by reference (see the module docstring)."""
    buffer = io.BytesIO()
    _StatePickler(buffer, _references.get()).dump(value)
    return buffer.getvalue()


def loads_state(data: bytes) -> Any:
    """What :func:`dumps_state` wrote; an endpoint no runtime here can resolve is ``None``."""
    return _StateUnpickler(io.BytesIO(data), _references.get()).load()


class _StatePickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, references: EndpointReferences | None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._refs = references

    def persistent_id(self, obj: Any) -> Any:
        if endpoint_kind(obj) is None:
            return None
        return _ENDPOINT, None if self._refs is None else self._refs.reference(obj)


class _StateUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, references: EndpointReferences | None) -> None:
        super().__init__(file)
        self._refs = references

    def persistent_load(self, pid: Any) -> Any:
        tag, reference = pid
        if tag != _ENDPOINT:
            raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")
        return None if reference is None or self._refs is None else self._refs.resolve(reference)
