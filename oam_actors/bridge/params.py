"""Typed accessors over a request's ``params`` object (reference §2, "Param accessor rules").

Contract
--------
:class:`Params` wraps one JSON object and reads members by name. A member set to ``null`` is
treated as absent. Every failure raises ``-32602 invalid_params``
(:class:`~oam_actors.errors.ProtocolError`) naming the parameter by its path, i.e. the prefix
given at construction (``"options."``, ``"tools[0]."``) followed by the member name:

- missing: ``Missing required parameter '<path>'.``
- wrong type: ``Parameter '<path>' must be <kind>; got <value>.`` with kind one of ``a string``,
  ``an integer``, ``a number``, ``a boolean``, ``an object``, ``an array`` and ``<value>`` a short
  JSON preview of what was sent;
- out of range: ``Parameter '<path>' must be at least <min>; got <value>.`` (or ``at most``).

Integers accept integral numbers (``3`` or ``3.0``), reject fractions and booleans, and must fit a
signed 32-bit integer (out of that range is a range error with the int32 bound). Numbers must be
finite. Defaults are returned as given, unchecked.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec

from oam_actors.errors import ProtocolError, invalid_params

__all__ = ["INT32_MAX", "INT32_MIN", "Params", "is_object_id", "preview"]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_PREVIEW_CHARS = 40
_Shape = TypeVar("_Shape", bound=msgspec.Struct)
_ENCODE = msgspec.json.Encoder().encode


class Params:
    """Read-only typed access to one params object; see the module docstring for the messages."""

    __slots__ = ("_prefix", "_values")

    def __init__(self, values: dict[str, Any], prefix: str = "") -> None:
        self._values = values
        self._prefix = prefix

    def raw(self, name: str) -> Any:
        """The member's value as sent; ``None`` when absent or ``null``."""
        return self._values.get(name)

    def present(self, name: str) -> bool:
        """Whether the member was sent at all (even as ``null``): "a present key wins" rules."""
        return name in self._values

    def sent_any(self, names: frozenset[str]) -> bool:
        """Whether any of ``names`` was sent (even as ``null``)."""
        return not names.isdisjoint(self._values)

    def path(self, name: str) -> str:
        """The member's full parameter path for messages (``options.toolChoice``)."""
        return self._prefix + name

    def string(self, name: str, *, required: bool = False, default: str | None = None) -> str | None:
        """A string member."""
        value = self._get(name, required)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._wrong_type(name, "a string", value)
        return value

    def integer(
        self,
        name: str,
        *,
        required: bool = False,
        default: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        """An integral number that fits int32 and lies within ``[minimum, maximum]``."""
        value = self._get(name, required)
        if value is None:
            return default
        if not _is_integral(value):
            raise self._wrong_type(name, "an integer", value)
        number = int(value)
        low = INT32_MIN if minimum is None else max(minimum, INT32_MIN)
        high = INT32_MAX if maximum is None else min(maximum, INT32_MAX)
        self._check_range(name, number, low, high)
        return number

    def number(
        self,
        name: str,
        *,
        required: bool = False,
        default: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None:
        """A finite number within ``[minimum, maximum]``, as a float."""
        value = self._get(name, required)
        if value is None:
            return default
        number = _finite_float(value)
        if number is None:
            raise self._wrong_type(name, "a number", value)
        self._check_range(name, number, minimum, maximum)
        return number

    def boolean(self, name: str, *, required: bool = False, default: bool | None = None) -> bool | None:
        """``true`` or ``false``."""
        value = self._get(name, required)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong_type(name, "a boolean", value)
        return value

    def object(self, name: str, *, required: bool = False) -> dict | None:
        """An object member."""
        value = self._get(name, required)
        if value is not None and not isinstance(value, dict):
            raise self._wrong_type(name, "an object", value)
        return value

    def array(self, name: str, *, required: bool = False) -> list | None:
        """An array member."""
        value = self._get(name, required)
        if value is not None and not isinstance(value, list):
            raise self._wrong_type(name, "an array", value)
        return value

    def nested(self, name: str) -> Params | None:
        """An object member as :class:`Params` whose paths start ``<path>.``; ``None`` if absent."""
        value = self.object(name)
        if value is None:
            return None
        return Params(value, f"{self._prefix}{name}.")

    def fields(self, shape: type[_Shape]) -> _Shape | None:
        """The whole object read as ``shape`` in one msgspec call, for a method's usual request;
        ``None`` when it does not fit (a member unknown, null or of another type): then the
        accessors read it, and word the warning or the error. ``shape`` forbids unknown fields
        and types its members as strictly as the accessors do."""
        try:
            return msgspec.convert(self._values, shape)
        except msgspec.ValidationError:
            return None

    def unknown(self, known: Iterable[str]) -> list[str]:
        """One warning per member not in ``known`` (``null`` ones too: they were sent), in order."""
        known = known if isinstance(known, frozenset) else frozenset(known)
        if known.issuperset(self._values):  # the usual request: nothing to warn about
            return []
        return [
            f"Unknown parameter '{self._prefix}{key}' was ignored."
            for key in self._values
            if key not in known
        ]

    def _get(self, name: str, required: bool) -> Any:
        value = self._values.get(name)
        if value is None and required:
            raise invalid_params(f"Missing required parameter '{self._prefix}{name}'.")
        return value

    def _wrong_type(self, name: str, kind: str, value: Any) -> ProtocolError:
        return invalid_params(f"Parameter '{self._prefix}{name}' must be {kind}; got {preview(value)}.")

    def _check_range(
        self, name: str, value: int | float, minimum: int | float | None, maximum: int | float | None
    ) -> None:
        if minimum is not None and value < minimum:
            raise self._out_of_range(name, f"at least {preview(minimum)}", value)
        if maximum is not None and value > maximum:
            raise self._out_of_range(name, f"at most {preview(maximum)}", value)

    def _out_of_range(self, name: str, bound: str, value: int | float) -> ProtocolError:
        return invalid_params(f"Parameter '{self._prefix}{name}' must be {bound}; got {preview(value)}.")


def is_object_id(text: str) -> bool:
    """Whether ``text`` may name a session, NPC or world: 1-128 code points, no control or format
    characters (each method words its own error)."""
    if not 1 <= len(text) <= 128:
        return False
    if text.isascii():  # printable ASCII has no control or format characters
        return text.isprintable()
    return not any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


def preview(value: Any) -> str:
    """A short JSON rendering of ``value`` for error messages (``…`` when cut)."""
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no spelling for these; msgspec would write null.
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    try:
        text = _ENCODE(value).decode()
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"


def _is_integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value) and value.is_integer()


def _finite_float(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer literal beyond float range
        return None
    return number if math.isfinite(number) else None
