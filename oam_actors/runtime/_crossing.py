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
  runtime keeps the holders beside the owner and gives them the owner's live object. It needs to
  know which types are shared, and how to copy one without its process-bound parts (observers,
  callbacks) when a reply carries one out of its process: :func:`register_shared`.

How an actor's state is checkpointed is the actor's own hook (``Actor.snapshot`` / ``restore``).

Registration is per process, as with :mod:`copyreg`: it runs when the declaring module is
imported, and that module defines the classes of the actors holding such objects, so it is
imported wherever one is pickled or unpickled. An endpoint's reference carries its kind (pickled
by reference), so the receiving side needs no lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = ["EndpointKind", "Relay", "detached_copy", "endpoint_kind", "register_endpoint", "register_shared"]

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


_endpoint_kinds: list[EndpointKind] = []
_kind_by_type: dict[type, EndpointKind | None] = {}
_detachers: dict[type, Callable[[Any], Any]] = {}


def register_endpoint(kind: EndpointKind) -> None:
    """Declare an endpoint kind (once; registering it again changes nothing)."""
    if kind not in _endpoint_kinds:
        _endpoint_kinds.append(kind)
        _kind_by_type.clear()


def endpoint_kind(obj: Any) -> EndpointKind | None:
    """The kind ``obj`` is an endpoint of, or ``None`` (cached per type: asked of every object
    a remote runtime pickles)."""
    cls = type(obj)
    try:
        return _kind_by_type[cls]
    except KeyError:
        kind = _kind_by_type[cls] = next((kind for kind in _endpoint_kinds if kind.matches(cls)), None)
        return kind


def register_shared(cls: type[T], detach: Callable[[T], T]) -> None:
    """Declare ``cls`` (exactly, not its subclasses) shared by reference; ``detach(obj)`` is a
    copy of ``obj`` fit to leave its process."""
    _detachers[cls] = detach


def detached_copy(obj: Any) -> Any | None:
    """A copy of ``obj`` fit to leave its process if its type is shared, else ``None``."""
    detach = _detachers.get(type(obj))
    return None if detach is None else detach(obj)
