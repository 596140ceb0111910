"""Turn policy: tool choice, budgets, sampling, labels, retries — the knobs of an agent.

:class:`AgentOptions` is the session's policy; :class:`TurnOverrides` holds the per-turn fields the
protocol lets a single ``session/respond`` change.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from ..clock import Budget
from ..errors import ErrorCode, invalid_params
from .model import Sampling

__all__ = ["AgentOptions", "RetryPolicy", "ToolChoice", "ToolChoiceKind", "TurnOverrides"]


class ToolChoiceKind(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    EXPLICIT = "explicit"
    TOOL = "tool"


class ToolChoice(msgspec.Struct, frozen=True):
    """``auto`` / ``none`` / ``required`` / ``explicit`` / a named tool (``{"tool": X}``)."""

    kind: ToolChoiceKind = ToolChoiceKind.AUTO
    tool: str | None = None

    @classmethod
    def parse(cls, value: Any, *, path: str = "toolChoice") -> ToolChoice:
        """Accepts the four words, ``{"tool": X}`` and OpenAI's
        ``{"type":"function","function":{"name":X}}``; anything else is ``invalid_params``."""
        if isinstance(value, str):
            try:
                kind = ToolChoiceKind(value)
            except ValueError:
                kind = None
            if kind is not None and kind is not ToolChoiceKind.TOOL:
                return cls(kind)
        elif isinstance(value, dict):
            name = value.get("tool")
            function = value.get("function")
            if name is None and isinstance(function, dict):
                name = function.get("name")
            if isinstance(name, str) and name:
                return cls(ToolChoiceKind.TOOL, name)
        raise invalid_params(
            f"Parameter '{path}' must be \"auto\", \"none\", \"required\", \"explicit\" "
            f"or {{\"tool\": <name>}}; got {msgspec.json.encode(value).decode()}."
        )

    def to_wire(self) -> Any:
        return {"tool": self.tool} if self.kind is ToolChoiceKind.TOOL else self.kind.value


class RetryPolicy(msgspec.Struct, frozen=True):
    """Retries of one model step (never of a whole turn, so a tool never runs twice).

    ``max_attempts`` counts the first try. Backoff starts at ``initial_backoff`` seconds and
    doubles; a known ``retry_after`` is honoured when longer. Rate limits with a retry delay over
    ``max_retry_after`` are not retried (the caller should see them).
    """

    max_attempts: int = 3
    initial_backoff: float = 0.3
    max_retry_after: float = 5.0
    retries_guardrail_violations: bool = False

    def should_retry(self, code: ErrorCode, retry_after: float | None, attempt: int) -> bool:
        if attempt >= self.max_attempts:
            return False
        if code in (ErrorCode.GENERATION_FAILED, ErrorCode.BUSY):
            return True
        if code is ErrorCode.RATE_LIMITED:
            return retry_after is None or retry_after <= self.max_retry_after
        return code is ErrorCode.GUARDRAIL_VIOLATION and self.retries_guardrail_violations

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` ≥ 1)."""
        backoff = self.initial_backoff * 2 ** (attempt - 1)
        return max(backoff, retry_after or 0.0)


class AgentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """A session's policy. Defaults follow the Android bridge."""

    tool_choice: ToolChoice = ToolChoice()
    max_tool_rounds: int = 4
    max_tool_calls: int = 12
    enabled_tools: frozenset[str] | None = None
    temperature: float | None = None
    max_response_tokens: int | None = None
    sampling: Sampling | None = None
    tool_timeout: float = 120.0
    local_tool_timeout: float = 60.0
    trim_history: bool = True
    reserved_response_tokens: int = 256
    max_input_tokens: int | None = None
    minimum_recent_turns: int = 1
    retry: RetryPolicy = RetryPolicy()
    user_label: str = "User"
    assistant_label: str = "Assistant"
    dedupe_tool_calls: bool = True
    repairs_invalid_output: bool = True
    decision_temperature: float = 0.0
    decision_max_tokens: int = 256
    # Quota-scheduler hint copied onto every step request: "dialogue", "decision" or "background".
    priority: str = "dialogue"
    # Quota-scheduler hint: the longest a step may queue for admission (None: the backend's).
    queue_seconds: float | None = None
    # Quota-scheduler hint: the request's deadline, counted from its arrival (None: none of its
    # own; the backend's queue time then counts from when the step queues). Copied onto every step.
    budget: Budget | None = None


class TurnOverrides(msgspec.Struct, frozen=True, kw_only=True):
    """Per-turn overrides on top of :class:`AgentOptions` (``None`` = the session's value)."""

    tool_choice: ToolChoice | None = None
    max_tool_rounds: int | None = None
    max_tool_calls: int | None = None
    enabled_tools: frozenset[str] | None = None

    def apply(self, options: AgentOptions) -> AgentOptions:
        changes = {
            name: value
            for name in ("tool_choice", "max_tool_rounds", "max_tool_calls", "enabled_tools")
            if (value := getattr(self, name)) is not None
        }
        return msgspec.structs.replace(options, **changes) if changes else options
