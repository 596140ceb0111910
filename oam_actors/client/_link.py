"""``ClientLink``: what sessions', NPCs' and worlds' handles and a :class:`~._turn.Turn` use of
the :class:`~._client.Client` that made them. A protocol, so that those modules sit below the
client (which imports them to make them) instead of importing it back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import anyio.abc

    from ._connection import Connection, ToolHandler

__all__ = ["ClientLink"]


class ClientLink(Protocol):
    timeout: float | None
    _task_group: anyio.abc.TaskGroup | None

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   timeout: float | None = ..., cancel: tuple[str, dict[str, Any]] | None = None) -> Any: ...

    async def member(self, method: str, params: Mapping[str, Any] | None, key: str, *,
                     timeout: float | None = ...) -> Any: ...

    async def unsubscribe(self, subscription: str) -> dict[str, Any]: ...

    async def _live(self) -> Connection: ...

    def _add_owner_tools(self, kind: str, owner: str, handlers: Mapping[str, ToolHandler] | None) -> None: ...
