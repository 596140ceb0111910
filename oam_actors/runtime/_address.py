"""Actor addresses: ``(kind, id)`` pairs such as ``session:guard`` or ``npc:gorm``."""

from __future__ import annotations

import msgspec

__all__ = ["Address"]


class Address(msgspec.Struct, frozen=True):
    """Where an actor lives in its system; hashable, ordered by nothing, ``str()`` is ``kind:id``."""

    kind: str
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Address:
        """Split ``"kind:id"`` at the first colon (ids may contain colons); ``ValueError`` if none."""
        kind, sep, ident = text.partition(":")
        if not sep:
            raise ValueError(f"not an actor address (kind:id): {text!r}")
        return cls(kind, ident)
