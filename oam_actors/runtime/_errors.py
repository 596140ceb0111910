"""Errors raised by the actor runtime.

::

    RuntimeErrorBase
    ├── ActorStopped       the actor is stopping or gone: raised by ``ask_nowait``/``tell_nowait``/
    │                      ``ask_control`` on a stopped actor, and by ``Reply.wait()`` for messages
    │                      the actor dropped while stopping
    ├── ActorExists        ``spawn`` on an address that is already taken
    ├── MailboxFull        ``ask_nowait``/``tell_nowait`` when the bounded mailbox is full
    ├── MessageCancelled   ``Reply.wait()`` for a message cancelled by ``Reply.cancel()`` or
    │                      ``ActorRef.cancel_all()``
    └── HostFailed         ``Reply.wait()``/``ask_control``/``stop`` when the process hosting the
                           actor died meanwhile (remote runtimes); the actor comes back from its
                           last checkpoint when next used

These know nothing of the protocol; the bridge maps them onto protocol errors. Each carries the
``address`` of the actor concerned and pickles with it, so a remote runtime can send them back.
"""

from __future__ import annotations

from oam_actors.runtime._address import Address

__all__ = [
    "ActorExists",
    "ActorStopped",
    "HostFailed",
    "MailboxFull",
    "MessageCancelled",
    "RuntimeErrorBase",
]


class RuntimeErrorBase(Exception):
    """Base of every runtime error; ``address`` names the actor concerned."""

    _what = "runtime error"

    def __init__(self, address: Address) -> None:
        # Keep the constructor's arguments as ``args`` so pickling rebuilds the same error.
        super().__init__(address)
        self.address = address

    def __str__(self) -> str:
        return f"{self.address}: {self._what}"


class ActorStopped(RuntimeErrorBase):
    """The actor is stopping or stopped; the message was not (or no longer) handled."""

    _what = "actor is stopped"


class ActorExists(RuntimeErrorBase):
    """``spawn`` found the address already taken (a stopping actor still holds it)."""

    _what = "an actor with this address already exists"


class MailboxFull(RuntimeErrorBase):
    """The ordered lane already holds ``max_queue`` waiting messages."""

    def __init__(self, address: Address, max_queue: int) -> None:
        Exception.__init__(self, address, max_queue)
        self.address = address
        self.max_queue = max_queue

    def __str__(self) -> str:
        return f"{self.address}: mailbox full ({self.max_queue} messages queued)"


class MessageCancelled(RuntimeErrorBase):
    """The message was cancelled before it ran, or while it ran before its point of no return."""

    _what = "message cancelled"


class HostFailed(RuntimeErrorBase):
    """The process hosting the actor died while this message was queued or running.

    The message may have run up to any point before its commit; committed state survives in the
    runtime's state store, and the actor is re-created from it when it is next used.
    """

    _what = "the actor's host process failed"
