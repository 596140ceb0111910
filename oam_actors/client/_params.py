"""Protocol params from Python arguments, and members of results."""

from __future__ import annotations

from typing import Any

from ._errors import UnexpectedResult

__all__ = ["UNSET", "params_of", "pick"]

UNSET: Any = object()
"""The default of a ``timeout=`` argument: the client's own timeout."""


def pick(result: Any, key: str, method: str) -> Any:
    """``result[key]``; :class:`UnexpectedResult` when the result is not an object holding it."""
    if not isinstance(result, dict) or key not in result:
        raise UnexpectedResult(method, f"no '{key}' in the result", result)
    return result[key]


def _camel(name: str) -> str:
    if name.endswith("_id"):  # fallbackOptionID: the protocol spells ids in capitals
        return _camel(name[:-3]) + "ID"
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def params_of(**fields: Any) -> dict[str, Any]:
    """Protocol params from keyword arguments: snake_case names become the protocol's camelCase,
    ``None`` is left out. A name already in camelCase passes unchanged (``**extra``)."""
    return {_camel(name): value for name, value in fields.items() if value is not None}
