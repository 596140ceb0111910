"""The one seam between the agent and every backend: :class:`LanguageModel`.

A backend receives a :class:`GenerationRequest` (what kind of step this is, the byte-stable system
prefix, the step prompt, sampling and limits) and streams text back. It reports failures as
:class:`~oam_actors.errors.AgentError` with one of the twelve agent codes. It may also yield one
:class:`Usage` record (anywhere in the stream) when it knows real token counts; otherwise the agent
estimates them at about four characters per token.

Scripted models, proxy backends and the Nano device pool all implement this protocol; the agent
knows nothing else about them. A model whose own progress is state (a scripted model's position in
its script) also implements :class:`Resumable`, so whoever checkpoints the conversation keeps it.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..clock import Budget

__all__ = [
    "Availability",
    "BarkItem",
    "BatchItem",
    "DecisionItem",
    "DelegatingModel",
    "GenerationRequest",
    "ItemOption",
    "LanguageModel",
    "ModelCapabilities",
    "ReplyItem",
    "Resumable",
    "Sampling",
    "StepKind",
    "StructuredReplyItem",
    "ToolChoiceItem",
    "ToolSpec",
    "Usage",
    "estimate_tokens",
    "estimate_tokens_of_length",
]


class StepKind(enum.StrEnum):
    """What a model request is for; the wire names of the protocol's ``steps[].kind``."""

    DECIDE = "decide"
    TOOL_ARGUMENTS = "toolArguments"
    RESPOND = "respond"
    STRUCTURED = "structured"
    SUMMARY = "summary"
    TEXT = "text"


class Sampling(msgspec.Struct, frozen=True, omit_defaults=True):
    """Token sampling. ``top_k == 1`` is greedy. ``top_p`` is accepted for backends that have it."""

    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool as offered to a model step (for native tool calling and scripted models)."""

    name: str
    description: str
    parameters: Any


class BarkItem(msgspec.Struct, frozen=True, kw_only=True, tag="bark"):
    """A one-line ambient remark: ``speaker``'s name, ``character`` (a few short lines: role,
    personality, speaking style), ``situation`` (the moment, and the game state if any). The
    answer is the line."""

    speaker: str
    character: str = ""
    situation: str = ""


class ItemOption(msgspec.Struct, frozen=True):
    """One option of a :class:`DecisionItem`."""

    id: str
    description: str = ""


class DecisionItem(msgspec.Struct, frozen=True, kw_only=True, tag="decision"):
    """A choice among ``options`` for ``actor`` (``""``: for nobody in particular); the answer is
    the decision step's JSON object ``{"reasoning", "choice", "confidence"}``."""

    actor: str = ""
    character: str = ""
    situation: str = ""
    options: tuple[ItemOption, ...] = ()


class ReplyItem(msgspec.Struct, frozen=True, kw_only=True, tag="reply"):
    """A plain-text dialogue reply of ``speaker`` to the player: ``character`` (persona
    essentials and this turn's context: memory, game state, situation), the whole earlier
    ``conversation`` and this turn's ``tool_results`` as the step shows them (labelled lines),
    the player's ``line``, at most ``sentences`` sentences. The answer is the reply text as the
    step itself would have written it (``[emotion] words``). ``unlabelled``: a line of a
    conversation among NPCs, whose batch answers each item without the speaker's name (its
    item already says who speaks): ``3. [emotion] words``; its ``members`` are the names of the
    conversation's other members, whom no other item's answer may name (content carried across
    the batch). ``private``: what of ``character`` only this NPC knows (remembered facts, heard
    lines, a summary): no other item's answer may carry it."""

    speaker: str
    character: str = ""
    conversation: tuple[str, ...] = ()
    tool_results: tuple[str, ...] = ()
    line: str = ""
    user_label: str = "Player"
    sentences: int = 2
    unlabelled: bool = False
    members: tuple[str, ...] = ()
    private: tuple[str, ...] = ()


class ToolChoiceItem(msgspec.Struct, frozen=True, kw_only=True, tag="decide"):
    """The decide step of an NPC talk: what the NPC of ``talk`` (its character and conversation,
    as its reply would show them) does next, one of ``tools`` (the catalog lines the step shows,
    ``- name: description Arguments: {...}``, with ``- respond: ...`` when answering without a
    tool is allowed). ``names`` are the tools' names. The answer is the step envelope the step
    itself would have written (``{"action": ..., "arguments": {...}}``)."""

    talk: ReplyItem
    tools: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    allow_respond: bool = True


class StructuredReplyItem(msgspec.Struct, frozen=True, kw_only=True, tag="structuredReply"):
    """The structured reply step of an NPC talk (``replyFormat`` automatic or structured): the
    reply of ``talk``, and what that NPC's reply schema asks of it: one of its ``emotions`` (the
    schema's enum, in its order), ``player_options`` suggestions for the player (0: none, the
    schema has no such key), an ``ends_conversation`` flag only where ``can_end`` (the schema
    has the key). The answer is the JSON object the step itself would have written
    (``{"emotion", "line", "player_options"?, "ends_conversation"?}``)."""

    talk: ReplyItem
    emotions: tuple[str, ...] = ()
    player_options: int = 0
    can_end: bool = False


BatchItem = BarkItem | DecisionItem | ReplyItem | StructuredReplyItem | ToolChoiceItem
"""What a short, independent step says about itself so that a coalescing backend may answer it
together with others (:mod:`oam_actors.agent.batch`). A tagged union: it pickles and encodes."""


class GenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One model inference.

    ``system`` is byte-stable across every step and turn of a session (instructions + context note),
    so backends with prefix caching can reuse it. ``prompt`` is the step prompt. The remaining
    context fields (``user_prompt``, ``tool_outputs``, ``tools``, ``tool_name``, ``schema``) are for
    backends that need more than text: scripted templates, native tool calling, response formats.
    ``owner`` and ``priority`` are hints for quota scheduling; ``queue_seconds`` caps how long the
    step may wait for admission (``None``: the backend's own limit for its priority); ``budget``
    is the request's deadline counted from its arrival, read when the step queues
    (:meth:`queue_left`), and the backend's limit then counts from arrival too. ``item``
    describes a short, independent step that a coalescing backend may answer together with others
    (:mod:`oam_actors.agent.batch`); every other backend ignores it. ``follow_up`` marks a later
    step of a turn (after a tool round, a repair): fair queuing counts an owner's actions, and the
    turn's first step stood for this one. ``streamed`` says that the step's pieces are
    shown as they come (a reply or partial values the caller watches); a backend that produces
    its text at once (the scripted model) lets the event loop run between pieces only then.
    """

    kind: StepKind
    system: str
    prompt: str
    temperature: float | None = None
    max_output_tokens: int | None = None
    sampling: Sampling | None = None
    stop_at_json: bool = False
    is_repair: bool = False
    user_prompt: str = ""
    tool_outputs: tuple[str, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_name: str | None = None
    schema: Any = None
    owner: str | None = None
    priority: str = "dialogue"
    queue_seconds: float | None = None
    budget: Budget | None = None
    item: BatchItem | None = None
    follow_up: bool = False
    streamed: bool = False

    def queue_left(self) -> float | None:
        """The step's own queue time left now: ``queue_seconds`` or what is left of ``budget``,
        the shorter (``None``: neither is set)."""
        left = None if self.budget is None else self.budget.left()
        if self.queue_seconds is None:
            return left
        return self.queue_seconds if left is None else min(left, self.queue_seconds)

    def waited(self) -> float:
        """Seconds since the request arrived (0 without a ``budget``)."""
        return 0.0 if self.budget is None else self.budget.spent()


class Usage(msgspec.Struct, frozen=True):
    """Token counts a backend reports for one inference."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0


class ModelCapabilities(msgspec.Struct, frozen=True):
    """What the agent may assume about a backend.

    ``context_size`` is the input budget in tokens (Nano ≈ 4000). ``native_tool_calling`` says the
    backend turns offered ``tools`` into the envelope text itself; the envelope loop stays the same.
    ``coalesces`` says the backend may answer steps together and reads their ``item``: callers
    build items only for such a backend.
    """

    context_size: int = 4000
    max_output_tokens: int = 4096
    native_tool_calling: bool = False
    system_instructions: bool = True
    coalesces: bool = False


class Availability(msgspec.Struct, frozen=True, omit_defaults=True):
    """The ``model/availability`` result (Android field order)."""

    available: bool
    reason: str | None = None
    contextSize: int = 4000
    variant: str | None = None
    supportedLanguages: list[str] = msgspec.field(default_factory=list)
    status: str | None = None
    detail: str | None = None
    maxOutputTokens: int | None = None
    bytesDownloaded: int | None = None
    totalBytes: int | None = None

    def to_wire(self) -> dict[str, Any]:
        """The ``model/availability`` result: optional fields left out when unknown."""
        wire: dict[str, Any] = {"available": self.available}
        if not self.available:
            wire["reason"] = self.reason or "unknown"
        wire["contextSize"] = self.contextSize
        if self.variant is not None:
            wire["variant"] = self.variant
        wire["supportedLanguages"] = list(self.supportedLanguages)
        for name in ("status", "detail", "maxOutputTokens", "bytesDownloaded", "totalBytes"):
            if (value := getattr(self, name)) is not None:
                wire[name] = value
        return wire


@runtime_checkable
class LanguageModel(Protocol):
    """A backend the agent can drive.

    ``stream`` is an async generator: it yields text pieces (and optionally one :class:`Usage`) and
    raises :class:`~oam_actors.errors.AgentError` on failure. Closing the generator early (the agent
    does, once a decide step holds a complete JSON object) must release the backend's resources.
    """

    @property
    def capabilities(self) -> ModelCapabilities: ...

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]: ...

    async def availability(self) -> Availability: ...


class DelegatingModel:
    """A :class:`LanguageModel` in front of another one: capabilities, availability and stream
    pass through; a wrapper that meters or times the steps overrides :meth:`stream` only."""

    def __init__(self, model: LanguageModel) -> None:
        self._model = model

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._model.capabilities

    async def availability(self) -> Availability:
        return await self._model.availability()

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        return self._model.stream(request)


@runtime_checkable
class Resumable(Protocol):
    """A model whose progress is state. ``progress()`` is a JSON value; ``resume(progress)``
    brings a model built as this one was (the same script, not yet played) to that point."""

    def progress(self) -> Any: ...

    def resume(self, progress: Any) -> None: ...


def estimate_tokens(text: str) -> int:
    """About four characters per token, rounded up."""
    return estimate_tokens_of_length(len(text))


def estimate_tokens_of_length(characters: int) -> int:
    """:func:`estimate_tokens` of a text of ``characters`` characters."""
    return (characters + 3) // 4
