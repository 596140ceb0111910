"""Shared pieces of the game methods: the extension's errors and parameter rules (protocol-game §1)."""

from __future__ import annotations

from typing import Any

from ..agent import ToolDefinition, parse_tool_definitions
from ..agent.tools import check_timeout
from ..bridge.params import Params, is_object_id, preview
from ..errors import ErrorCode, ProtocolError, invalid_params

__all__ = [
    "MAX_DEADLINE_SECONDS",
    "client_id",
    "conversation_exists",
    "conversation_not_found",
    "deadline_seconds",
    "limit_reached",
    "npc_exists",
    "npc_not_found",
    "subscription_not_found",
    "timeout_seconds",
    "tools_array",
    "tools_param",
    "world_exists",
    "world_not_found",
]


def npc_not_found(npc: str) -> ProtocolError:
    return ProtocolError(ErrorCode.NPC_NOT_FOUND, f"No NPC with id '{npc}'.", npc=npc)


def npc_exists(npc: str) -> ProtocolError:
    return ProtocolError(ErrorCode.NPC_EXISTS, f"An NPC with id '{npc}' already exists.", npc=npc)


def world_not_found(world: str) -> ProtocolError:
    return ProtocolError(ErrorCode.WORLD_NOT_FOUND, f"No world with id '{world}'.", world=world)


def world_exists(world: str) -> ProtocolError:
    return ProtocolError(ErrorCode.WORLD_EXISTS, f"A world with id '{world}' already exists.", world=world)


def subscription_not_found(subscription: str) -> ProtocolError:
    return ProtocolError(
        ErrorCode.SUBSCRIPTION_NOT_FOUND, f"No world subscription with id '{subscription}'.", subscription=subscription
    )


def conversation_not_found(conversation: str) -> ProtocolError:
    return ProtocolError(ErrorCode.CONVERSATION_NOT_FOUND, f"No conversation with id '{conversation}'.",
                         conversation=conversation)


def conversation_exists(conversation: str) -> ProtocolError:
    return ProtocolError(ErrorCode.CONVERSATION_EXISTS, f"A conversation with id '{conversation}' already exists.",
                         conversation=conversation)


def limit_reached(limit: int, kind: str) -> ProtocolError:
    """``kind`` is ``NPCs``, ``worlds``, ``world subscriptions`` or ``conversations``."""
    message = f"The limit of {limit} {kind} is reached; delete some first."
    return ProtocolError(ErrorCode.LIMIT_REACHED, message, limit=limit)


def client_id(params: Params, name: str) -> str | None:
    """A client-chosen NPC or world id (1-128 code points, no control or format characters), or
    ``None`` when absent (the caller generates one)."""
    raw = params.raw(name)
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise invalid_params(f"Parameter '{params.path(name)}' must be a string; got {preview(raw)}.")
    if not is_object_id(raw):
        raise invalid_params(f"'{name}' must be 1-128 printable characters; got '{raw}'.")
    return raw


def timeout_seconds(params: Params, name: str) -> float | None:
    """A ``…TimeoutSeconds`` param: a finite number from 0 to 86400 (0 = no limit)."""
    return check_timeout(params.raw(name), params.path(name))


MAX_DEADLINE_SECONDS = 86_400.0


def deadline_seconds(params: Params, name: str = "deadlineSeconds") -> float | None:
    """A request's ``deadlineSeconds``: how long from its arrival its model steps may wait for
    quota, a number greater than 0 (0 or less is a deadline already past) and at most a day;
    ``None`` when absent (the server's queue time for the priority applies)."""
    raw = params.raw(name)
    if raw is None:
        return None
    seconds = params.number(name)
    assert seconds is not None
    if seconds <= 0:
        raise invalid_params(
            f"Parameter '{params.path(name)}' must be greater than 0 seconds; got {preview(raw)} (a deadline in the past)."
        )
    if seconds > MAX_DEADLINE_SECONDS:
        raise invalid_params(f"Parameter '{params.path(name)}' must be at most {MAX_DEADLINE_SECONDS:g} seconds; got {preview(raw)}.")
    return seconds


def tools_array(value: Any, path: str) -> list[Any]:
    """Client tool definitions as sent (``None`` = none), checked to be an array."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_params(f"'{path}' must be an array of tool definitions.")
    return value


def tools_param(value: Any, path: str) -> tuple[list[ToolDefinition], list[str]]:
    """Client tool definitions (``None`` = none) and their warnings."""
    return parse_tool_definitions(tools_array(value, path), path=path)
