"""Hosted objects: a third kind of object a runtime that moves actors must treat specially.

Besides endpoints and shared state (:mod:`._crossing`), an actor may hold a *hosted* object: a
service that is one thing however many actors hold it, because what it guards is one thing (a
model backend's quota: every session using one API key must wait in one queue). In one process
the holders simply share the instance. A runtime that moves actors to other processes
(``RaySystem``) must not copy it into each of them; it runs the object once, by name, where
every process can reach it, and gives each holder a stand-in that calls it there.

The layer that defines such a type declares it with :func:`register_hosted`: for an instance,
its :class:`Hosting` says the name it runs under (holders with the same name share one host),
a picklable ``factory`` that builds what the host serves in the host's own process (the first
holder to need it starts it; later ones join), the holder's own ``variant`` of the service
(settings the host applies per call), and ``info``: what a stand-in answers without asking the
host (a model's capabilities). Registration is per process and per exact type, as for
:func:`~._crossing.register_shared`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

__all__ = ["Hosting", "hosting_of", "register_hosted"]

T = TypeVar("T")


class Hosting(NamedTuple):
    """How a hosted object runs elsewhere; see the module docstring."""

    name: str
    factory: Callable[[], Any]
    variant: Any = None
    info: Any = None


_describers: dict[type, Callable[[Any], Hosting]] = {}


def register_hosted(cls: type[T], describe: Callable[[T], Hosting]) -> None:
    """Declare ``cls`` (exactly, not its subclasses) hosted; ``describe(obj)`` is its hosting."""
    _describers[cls] = describe


def hosting_of(obj: Any) -> Hosting | None:
    """``obj``'s hosting if its type is hosted, else ``None`` (a dict lookup: asked of every
    object a remote runtime pickles)."""
    describe = _describers.get(type(obj))
    return None if describe is None else describe(obj)
