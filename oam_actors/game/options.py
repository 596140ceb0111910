"""NPC behaviour settings: :class:`NPCOptions`, the built-in :class:`MemoryTool` set, :class:`ReplyFormat`.

Contract (protocol-game §6.3):

- :meth:`NPCOptions.from_wire` decodes wire JSON under a parameter path (default ``options``):
  every key optional, ``null`` means the default (except ``secretsUnlockAtRelationship: null``,
  which means "no threshold"), unknown keys become warnings, bad values raise ``-32602
  invalid_params`` naming the key. ``toolTimeoutSeconds`` (bridge-only in the protocol) is kept
  here too, so the options round-trip through ``npc/state`` in one piece.
- :meth:`NPCOptions.to_wire` writes the Android encoding: unset optional values left out,
  ``secretsUnlockAtRelationship`` always written (``null`` when unset).
- :func:`check_configuration` raises ``invalid_params`` for settings that cannot work with the
  NPC's tool set (duplicate names, unknown grounding tool, negative budgets, …).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import msgspec

from ..agent.policy import ToolChoice, ToolChoiceKind
from ..agent.tools import check_timeout, compact_json
from ..errors import invalid_params
from ._decode import WireObject
from .persona import Decoded, Emotion, parse_emotion

__all__ = [
    "DEFAULT_FALLBACK_LINES",
    "MAX_PLAYER_OPTIONS",
    "MemoryTool",
    "NPCOptions",
    "ReplyFormat",
    "check_configuration",
]

DEFAULT_FALLBACK_LINES = (
    "Let's talk about something else.",
    "I'd rather not speak of that.",
    "Hmm. Ask me something else.",
)
MAX_PLAYER_OPTIONS = 4
_EXPLICIT = ToolChoice(ToolChoiceKind.EXPLICIT)


class MemoryTool(enum.Enum):
    """A built-in memory tool: ``(wire name, tool name the model sees)``."""

    REMEMBER_FACT = ("rememberFact", "remember_fact")
    CHANGE_RELATIONSHIP = ("changeRelationship", "change_relationship")

    @property
    def wire_name(self) -> str:
        return self.value[0]

    @property
    def tool_name(self) -> str:
        return self.value[1]

    @classmethod
    def matching(cls, name: str) -> MemoryTool | None:
        """The wire name, tool name or enum name, ignoring case and underscores."""
        key = name.replace("_", "").lower()
        for tool in cls:
            if any(form.replace("_", "").lower() == key for form in (*tool.value, tool.name)):
                return tool
        return None


class ReplyFormat(enum.StrEnum):
    """How a turn asks for its reply (§6.5 reply formats)."""

    AUTOMATIC = "automatic"  # structured, one text retry when unusable, then a fallback line
    STRUCTURED = "structured"  # structured only, then a fallback line
    TEXT = "text"  # text with an [emotion] tag, then a fallback line


class NPCOptions(msgspec.Struct, frozen=True, kw_only=True):
    """An NPC's settings; field meanings and defaults are those of protocol-game §6.3."""

    tool_choice: ToolChoice = _EXPLICIT
    grounding_tool: str | None = None
    max_tool_rounds: int = 2
    max_tool_calls: int = 6
    world_readable: tuple[str, ...] = ("",)
    world_writable: tuple[str, ...] = ()
    world_context_paths: tuple[str, ...] = ()
    memory_tools: frozenset[MemoryTool] = frozenset()
    max_facts: int = 12
    max_relationship_change: int = 10
    secrets_unlock_at_relationship: int | None = 50
    reply_format: ReplyFormat = ReplyFormat.AUTOMATIC
    emotions: tuple[Emotion, ...] = tuple(Emotion)
    player_option_count: int = 3
    can_end_conversation: bool = True
    extra_instructions: str | None = None
    compact_after_turns: int = 8
    keep_recent_turns: int = 2
    fallback_on_guardrail: bool = True
    fallback_lines: tuple[str, ...] = ()
    temperature: float | None = None
    maximum_response_tokens: int | None = None
    bark_maximum_tokens: int = 48
    tool_timeout_seconds: float | None = None

    @property
    def effective_player_option_count(self) -> int:
        return min(max(self.player_option_count, 0), MAX_PLAYER_OPTIONS)

    @property
    def allowed_emotions(self) -> tuple[Emotion, ...]:
        """The emotions a structured reply may use: deduplicated, all when none are set."""
        return tuple(dict.fromkeys(self.emotions)) or tuple(Emotion)

    @property
    def own_fallback_lines(self) -> tuple[str, ...]:
        """Trimmed non-blank fallback lines the client set (no defaults)."""
        return tuple(line.strip() for line in self.fallback_lines if line.strip())

    @property
    def fallback_pool(self) -> tuple[str, ...]:
        """Trimmed non-blank fallback lines, or the defaults."""
        return self.own_fallback_lines or DEFAULT_FALLBACK_LINES

    # --- wire form ---------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        """The Android encoding, in §6.3 key order."""
        wire: dict[str, Any] = {"toolChoice": self.tool_choice.to_wire()}
        if self.grounding_tool is not None:
            wire["groundingTool"] = self.grounding_tool
        wire |= {
            "maxToolRounds": self.max_tool_rounds,
            "maxToolCalls": self.max_tool_calls,
            "worldReadable": list(self.world_readable),
            "worldWritable": list(self.world_writable),
            "worldContextPaths": list(self.world_context_paths),
            "memoryTools": [tool.wire_name for tool in MemoryTool if tool in self.memory_tools],
            "maxFacts": self.max_facts,
            "maxRelationshipChange": self.max_relationship_change,
            "secretsUnlockAtRelationship": self.secrets_unlock_at_relationship,
            "replyFormat": self.reply_format.value,
            "emotions": [e.value for e in self.emotions],
            "playerOptionCount": self.player_option_count,
            "canEndConversation": self.can_end_conversation,
        }
        if self.extra_instructions is not None:
            wire["extraInstructions"] = self.extra_instructions
        wire |= {
            "compactAfterTurns": self.compact_after_turns,
            "keepRecentTurns": self.keep_recent_turns,
            "fallbackOnGuardrail": self.fallback_on_guardrail,
            "fallbackLines": list(self.fallback_lines),
        }
        for key, value in (
            ("temperature", self.temperature),
            ("maximumResponseTokens", self.maximum_response_tokens),
        ):
            if value is not None:
                wire[key] = value
        wire["barkMaximumTokens"] = self.bark_maximum_tokens
        if self.tool_timeout_seconds is not None:
            wire["toolTimeoutSeconds"] = self.tool_timeout_seconds
        return wire

    @classmethod
    def from_wire(cls, value: Any, path: str = "options") -> Decoded[NPCOptions]:
        """Decode wire options under ``path``; ``None`` gives the defaults."""
        if value is None:
            return Decoded(cls())
        if not isinstance(value, dict):
            raise invalid_params(f"'{path}' must be an object.")
        # A crowd is created with the same options thousands of times: decode each text once.
        try:
            key = (_encode_key(value), path)
        except (TypeError, msgspec.EncodeError):  # not JSON (an in-process caller): no sharing
            return cls._decode(value, path)
        known = _DECODED.get(key)
        if known is None:
            known = cls._decode(value, path)
            if len(_DECODED) >= _DECODED_LIMIT:
                _DECODED.clear()
            _DECODED[key] = known
        return known

    @classmethod
    def _decode(cls, value: dict[str, Any], path: str) -> Decoded[NPCOptions]:
        wire = WireObject(value, path)
        warnings = tuple(wire.unknown(_WIRE_KEYS))
        timeout = check_timeout(wire.raw("toolTimeoutSeconds"), wire.location("toolTimeoutSeconds"))
        memory_tools = _memory_tools(wire.raw("memoryTools"), wire.location("memoryTools"))
        choice = wire.raw("toolChoice")
        options = cls(
            tool_choice=_EXPLICIT if choice is None else ToolChoice.parse(choice, path=wire.location("toolChoice")),
            grounding_tool=wire.optional_string("groundingTool"),
            max_tool_rounds=wire.integer("maxToolRounds", 2),
            max_tool_calls=wire.integer("maxToolCalls", 6),
            world_readable=wire.string_list("worldReadable", ("",)),
            world_writable=wire.string_list("worldWritable", ()),
            world_context_paths=wire.string_list("worldContextPaths", ()),
            memory_tools=memory_tools,
            max_facts=wire.integer("maxFacts", 12),
            max_relationship_change=wire.integer("maxRelationshipChange", 10),
            secrets_unlock_at_relationship=_threshold(value, wire),
            reply_format=ReplyFormat(wire.choice("replyFormat", tuple(ReplyFormat), ReplyFormat.AUTOMATIC)),
            emotions=_emotions(wire),
            player_option_count=wire.integer("playerOptionCount", 3),
            can_end_conversation=wire.boolean("canEndConversation", True),
            extra_instructions=wire.optional_string("extraInstructions"),
            compact_after_turns=wire.integer("compactAfterTurns", 8),
            keep_recent_turns=wire.integer("keepRecentTurns", 2),
            fallback_on_guardrail=wire.boolean("fallbackOnGuardrail", True),
            fallback_lines=wire.string_list("fallbackLines", ()),
            temperature=wire.optional_number("temperature"),
            maximum_response_tokens=wire.optional_integer("maximumResponseTokens"),
            bark_maximum_tokens=wire.integer("barkMaximumTokens", 48),
            tool_timeout_seconds=timeout,
        )
        if not 0 <= options.player_option_count <= MAX_PLAYER_OPTIONS:
            raise invalid_params(f"'{path}.playerOptionCount' must be between 0 and {MAX_PLAYER_OPTIONS}.")
        return Decoded(options, warnings)


_encode_key = msgspec.json.Encoder().encode
# Decoded options by (wire JSON, path); the options and their warnings are immutable, so NPCs
# created with the same options share them. Cleared when full: a few distinct sets are the norm.
_DECODED: dict[tuple[bytes, str], Decoded[NPCOptions]] = {}
_DECODED_LIMIT = 256

_WIRE_KEYS = (
    "toolChoice", "groundingTool", "maxToolRounds", "maxToolCalls", "worldReadable", "worldWritable",
    "worldContextPaths", "memoryTools", "maxFacts", "maxRelationshipChange", "secretsUnlockAtRelationship",
    "replyFormat", "emotions", "playerOptionCount", "canEndConversation", "extraInstructions",
    "compactAfterTurns", "keepRecentTurns", "fallbackOnGuardrail", "fallbackLines", "temperature",
    "maximumResponseTokens", "barkMaximumTokens", "toolTimeoutSeconds",
)


def _threshold(value: dict[str, Any], wire: WireObject) -> int | None:
    # An explicit null means "no threshold" (secrets always included, guarded); absent means 50.
    if "secretsUnlockAtRelationship" in value and value["secretsUnlockAtRelationship"] is None:
        return None
    return wire.integer("secretsUnlockAtRelationship", 50)


def _emotions(wire: WireObject) -> tuple[Emotion, ...]:
    if wire.raw("emotions") is None:
        return tuple(Emotion)
    items = wire.array("emotions")
    parsed = (parse_emotion(item, f"{wire.location('emotions')}[{i}]") for i, item in enumerate(items))
    return tuple(dict.fromkeys(parsed))




def _memory_tools(value: Any, path: str) -> frozenset[MemoryTool]:
    """A list of names, ``"all"``, ``"none"``, one name, or open-apple-models' bit mask (1, 2, 3)."""
    if value is None:
        return frozenset()
    if isinstance(value, int) and not isinstance(value, bool):
        return frozenset(tool for bit, tool in enumerate(MemoryTool) if value & (1 << bit))
    if isinstance(value, str):
        word = value.strip().lower()
        if word == "all":
            return frozenset(MemoryTool)
        if word in ("none", ""):
            return frozenset()
        value = [value]
    if not isinstance(value, list):
        raise invalid_params(f"'{path}' must be a list such as [\"rememberFact\", \"changeRelationship\"], \"all\" or \"none\".")
    return frozenset(_memory_tool(item, path) for item in value)


def _memory_tool(item: Any, path: str) -> MemoryTool:
    tool = MemoryTool.matching(item) if isinstance(item, str) else None
    if tool is None:
        known = ", ".join(f'"{t.wire_name}"' for t in MemoryTool)
        raise invalid_params(f"'{path}' contains unknown memory tool {compact_json(item)}; known: {known}.")
    return tool


def check_configuration(options: NPCOptions, tool_names: Sequence[str]) -> None:
    """Raise ``invalid_params`` when ``options`` cannot work with the tools the model would see."""
    seen: set[str] = set()
    for name in tool_names:
        if name in seen:
            raise invalid_params(
                f"Duplicate tool name '{name}' (built-in world and memory tools use read_world_state, "
                "update_world_state, remember_fact and change_relationship)."
            )
        seen.add(name)
    if options.grounding_tool is not None and options.grounding_tool not in seen:
        listed = ", ".join(tool_names) or "(none)"
        raise invalid_params(f"groundingTool '{options.grounding_tool}' is not one of the NPC's tools: {listed}.")
    choice = options.tool_choice
    if choice.kind is ToolChoiceKind.TOOL and choice.tool not in seen:
        raise invalid_params(f"toolChoice names unknown tool '{choice.tool}'.")
    if options.max_tool_rounds < 0 or options.max_tool_calls < 0:
        raise invalid_params("maxToolRounds and maxToolCalls must not be negative.")
    if options.maximum_response_tokens is not None and options.maximum_response_tokens < 1:
        raise invalid_params("maximumResponseTokens must be at least 1.")
    if options.bark_maximum_tokens < 1:
        raise invalid_params("barkMaximumTokens must be at least 1.")
    if options.temperature is not None and not options.temperature >= 0:
        raise invalid_params("temperature must not be negative.")
