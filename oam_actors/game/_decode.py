"""Reading the game's wire objects (persona, options, memory, save state) with exact messages.

A JSON ``null`` member counts as absent (the field's default). Every failure is ``-32602
invalid_params`` naming the full parameter path (``persona.goals``, ``state.persona.name``):

- ``Missing required parameter '<path>'.``
- ``Parameter '<path>' must be <a string|an integer|a number|a boolean|an array|an object>.``
  (no ``; got …`` suffix: that is the shape-check wording of protocol-game §1.1)
- ``Parameter '<path>' must be one of <choices>; got '<text>'.``

Unknown members are warnings: ``Unknown parameter '<path>' was ignored.``
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..errors import ProtocolError, invalid_params

__all__ = ["WireObject", "mistyped"]


def mistyped(path: str, kind: str) -> ProtocolError:
    """``Parameter '<path>' must be <kind>.``"""
    return invalid_params(f"Parameter '{path}' must be {kind}.")


class WireObject:
    """Typed reads of one JSON object whose members are named ``<path>.<member>``."""

    __slots__ = ("_path", "_values")

    def __init__(self, values: dict[str, Any], path: str) -> None:
        self._values = values
        self._path = path

    def location(self, name: str) -> str:
        return f"{self._path}.{name}" if self._path else name

    def raw(self, name: str) -> Any:
        """The member as sent; ``None`` when absent or ``null``."""
        return self._values.get(name)

    def unknown(self, known: Iterable[str]) -> list[str]:
        """Warnings for members outside ``known``, in the order they were sent."""
        allowed = set(known)
        return [
            f"Unknown parameter '{self.location(key)}' was ignored." for key in self._values if key not in allowed
        ]

    def required_string(self, name: str) -> str:
        value = self.raw(name)
        if value is None:
            raise invalid_params(f"Missing required parameter '{self.location(name)}'.")
        return self._string(value, self.location(name))

    def string(self, name: str, default: str = "") -> str:
        value = self.raw(name)
        return default if value is None else self._string(value, self.location(name))

    def optional_string(self, name: str) -> str | None:
        value = self.raw(name)
        return None if value is None else self._string(value, self.location(name))

    def string_list(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.raw(name)
        if value is None:
            return default
        items = self.array(name)
        return tuple(self._item_string(item, f"{self.location(name)}[{i}]") for i, item in enumerate(items))

    def array(self, name: str) -> list[Any]:
        value = self.raw(name)
        if not isinstance(value, list):
            raise mistyped(self.location(name), "an array")
        return value

    def integer(self, name: str, default: int) -> int:
        value = self.optional_integer(name)
        return default if value is None else value

    def optional_integer(self, name: str) -> int | None:
        value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not _integral(value):
            raise mistyped(self.location(name), "an integer")
        return int(value)

    def optional_number(self, name: str) -> float | None:
        value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise mistyped(self.location(name), "a number")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise mistyped(self.location(name), "a boolean")
        return value

    def choice(self, name: str, allowed: tuple[str, ...], default: str) -> str:
        """One of ``allowed`` (exact); the message quotes the choices."""
        text = self.optional_string(name)
        if text is None:
            return default
        if text not in allowed:
            listed = ", ".join(f'"{a}"' for a in allowed)
            raise invalid_params(f"Parameter '{self.location(name)}' must be one of {listed}; got '{text}'.")
        return text

    @staticmethod
    def _string(value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise mistyped(path, "a string")
        return value

    @staticmethod
    def _item_string(value: Any, path: str) -> str:
        if value is None:
            raise invalid_params(f"Missing required parameter '{path}'.")
        return WireObject._string(value, path)


def _integral(value: float) -> bool:
    return isinstance(value, int) or (math.isfinite(value) and value.is_integer())
