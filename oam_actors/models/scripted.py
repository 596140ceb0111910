"""The scripted model: a deterministic :class:`LanguageModel` that plays a list of steps.

Two styles:

- **native** (what the protocol's ``{"type":"scripted","steps":[…]}`` means): the script describes a
  natively tool-calling model. A ``toolCalls`` step is one tool round, an answer is the reply. The
  envelope loop's requests are mapped onto it: a decide step plays the envelope of the head call
  (consuming that call only), a reply step plays the next answer (discarding leading tool rounds).
- **envelope** (library tests): every model request plays the next step verbatim.

Step forms: ``{"text", "chunks"?}`` (a streamed step's text comes in ``chunks`` pieces; unstreamed, in one), ``{"toolCalls": [{"name", "arguments"?, "id"?}]}``,
``{"json"}``, ``{"template", "chunks"?}`` (``{prompt}``, ``{toolOutput}``, ``{toolOutputs}``),
``{"error", "message"?}``; any step may carry ``delayMs``. Precedence when several keys exist:
text > toolCalls > json > template > error.

Its position in the script is :class:`~oam_actors.agent.Resumable` progress: ``[steps played,
tool calls played of the next step]``, which a session or NPC checkpoints with its conversation.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
import msgspec

from ..agent.cancellation import checkpoint_if_cancelled
from ..agent.model import Availability, GenerationRequest, ModelCapabilities, StepKind, Usage
from ..errors import AGENT_CODES, AgentError, ErrorCode, invalid_params
from ..runtime import current_flow, fair_pause

__all__ = ["ScriptCall", "ScriptStep", "ScriptStyle", "ScriptedModel", "StepForm"]

_AGENT_WIRE_NAMES = [code.wire for code in AGENT_CODES]
_FALLBACK_TEXT = "(script exhausted)"
_RESPOND_ENVELOPE = '{"action":"respond","arguments":{}}'


class StepForm(enum.Enum):
    TEXT = "text"
    TOOL_CALLS = "toolCalls"
    JSON = "json"
    TEMPLATE = "template"
    ERROR = "error"
    ENVELOPE = "envelope"  # envelope style only: a literal step envelope
    DYNAMIC = "dynamic"    # envelope style only: a function of the request


class ScriptCall(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None


class ScriptStep(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted step; build them with the class methods or :meth:`ScriptedModel.from_wire`."""

    form: StepForm
    text: str = ""
    chunks: int = 3
    calls: tuple[ScriptCall, ...] = ()
    value: Any = None
    error: ErrorCode | None = None
    delay_ms: int = 0
    dynamic: Callable[[GenerationRequest], ScriptStep] | None = None

    @classmethod
    def say(cls, text: str, *, chunks: int = 3, delay_ms: int = 0) -> ScriptStep:
        return cls(form=StepForm.TEXT, text=text, chunks=chunks, delay_ms=delay_ms)

    @classmethod
    def tool_calls(cls, *calls: ScriptCall, delay_ms: int = 0) -> ScriptStep:
        return cls(form=StepForm.TOOL_CALLS, calls=calls, delay_ms=delay_ms)

    @classmethod
    def json(cls, value: Any, *, delay_ms: int = 0) -> ScriptStep:
        return cls(form=StepForm.JSON, value=value, delay_ms=delay_ms)

    @classmethod
    def template(cls, text: str, *, chunks: int = 3, delay_ms: int = 0) -> ScriptStep:
        return cls(form=StepForm.TEMPLATE, text=text, chunks=chunks, delay_ms=delay_ms)

    @classmethod
    def fail(cls, code: ErrorCode, message: str | None = None, *, delay_ms: int = 0) -> ScriptStep:
        return cls(form=StepForm.ERROR, error=code, text=message or f"Scripted {code.wire}.", delay_ms=delay_ms)

    @classmethod
    def call(cls, action: str, arguments: dict[str, Any] | None = None) -> ScriptStep:
        """Envelope style: answer ``{"action": action, "arguments": arguments}``."""
        return cls(form=StepForm.ENVELOPE, value={"action": action, "arguments": arguments or {}})

    @classmethod
    def respond(cls) -> ScriptStep:
        """Envelope style: answer the respond envelope."""
        return cls.call("respond")

    @classmethod
    def from_function(cls, fn: Callable[[GenerationRequest], ScriptStep]) -> ScriptStep:
        """Envelope style: the step is computed from the request."""
        return cls(form=StepForm.DYNAMIC, dynamic=fn)

    @property
    def is_answer(self) -> bool:
        return self.form in (StepForm.TEXT, StepForm.JSON, StepForm.TEMPLATE)


class ScriptStyle(enum.Enum):
    NATIVE = "native"
    ENVELOPE = "envelope"


class ScriptedModel:
    """A :class:`~oam_actors.agent.LanguageModel` that plays a script. ``requests`` records every
    request it received (useful in tests) unless ``record_requests`` is false: a client's model
    (``npc/create`` over the bridge) records nothing, since nobody can read it there and a
    crowd's prompts would pile up, turn after turn."""

    def __init__(
        self,
        steps: Sequence[ScriptStep] = (),
        *,
        fallback: ScriptStep | None = None,
        style: ScriptStyle = ScriptStyle.NATIVE,
        capabilities: ModelCapabilities | None = None,
        record_requests: bool = True,
    ) -> None:
        self._queue: deque[ScriptStep] = deque(steps)
        self._played = 0  # steps consumed whole
        self._head_calls = 0  # tool calls consumed of the step at the head of the queue
        self.fallback = fallback or ScriptStep.say(_FALLBACK_TEXT)
        self.style = style
        self._capabilities = capabilities or ModelCapabilities(context_size=4096)
        self.requests: list[GenerationRequest] = []
        self._record_requests = record_requests

    @classmethod
    def from_wire(cls, value: Any, *, path: str = "model", record_requests: bool = True) -> ScriptedModel:
        """``"scripted"`` or ``{"type":"scripted","steps":[…],"fallback"?}``; bad steps raise
        ``invalid_params`` naming the step path (``model.steps[2]``)."""
        if value == "scripted":
            return cls(record_requests=record_requests)
        if not isinstance(value, dict):
            raise invalid_params(f"Parameter '{path}' must be a string or an object.")
        raw_steps = value.get("steps")
        if raw_steps is None:
            raw_steps = []
        if not isinstance(raw_steps, list):
            raise invalid_params(f"Parameter '{path}.steps' must be an array.")
        steps = [_parse_step(step, f"{path}.steps[{i}]") for i, step in enumerate(raw_steps)]
        fallback = value.get("fallback")
        return cls(
            steps, fallback=None if fallback is None else _parse_step(fallback, f"{path}.fallback"),
            record_requests=record_requests,
        )

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    @property
    def remaining(self) -> int:
        """Steps not yet consumed."""
        return len(self._queue)

    def progress(self) -> list[int]:
        """Where it is in its script (see the module docstring)."""
        return [self._played, self._head_calls]

    def resume(self, progress: Any) -> None:
        """Skip to ``progress`` (from :meth:`progress` of a model with the same script);
        ``ValueError`` if it is not a position in this script."""
        played, head_calls = progress
        queue = self._queue
        if not (
            isinstance(played, int) and isinstance(head_calls, int) and 0 <= played <= len(queue) and head_calls >= 0
            and (head_calls == 0 or (played < len(queue) and head_calls < len(queue[played].calls)))
        ):
            raise ValueError(f"not a position in this script: {progress!r}")
        for _ in range(played):
            self._next_step()
        for _ in range(head_calls):
            self._take_call()

    async def availability(self) -> Availability:
        return Availability(available=True, contextSize=self._capabilities.context_size,
                            variant="Scripted", supportedLanguages=["en"])

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        if self._record_requests:
            self.requests.append(request)
        step, piece_text = self._select(request)
        if step.delay_ms:
            await anyio.sleep(step.delay_ms / 1000)
        if step.form is StepForm.ERROR:
            assert step.error is not None
            raise AgentError(step.error, step.text)
        text = piece_text if piece_text is not None else _render(step, request)
        if request.streamed:
            # Pieces someone watches stream as a real model's would, with the event loop running
            # between them (a cancel at one's event lands right after it). The yield is only to
            # let others run, so it is the turn's connection's fair one: a flood of streamed
            # turns on other connections does not make every round of the loop longer.
            for piece in _pieces(step, text):
                yield piece
                await fair_pause(current_flow())
            return
        # Nobody watches: nothing runs between the pieces that could cancel the step, so one
        # check (for a cancel at the step's own event) does, and no hop (a scripted model waits
        # for nothing; each hop costs the turn a trip through the loop). Nobody sees the pieces
        # either: the text is one piece, unless a decide step's reading stops at its first
        # complete value (a mapped tool call is that value, whole).
        await checkpoint_if_cancelled()
        if piece_text is None and request.stop_at_json:
            for piece in _pieces(step, text):
                yield piece
        elif text:
            yield text

    # --- selection ---------------------------------------------------------------------------

    def _select(self, request: GenerationRequest) -> tuple[ScriptStep, str | None]:
        """The step to play and, for tool-call mappings, the exact text to answer."""
        if self.style is ScriptStyle.ENVELOPE:
            step = self._next_step()
            if step.form is StepForm.DYNAMIC and step.dynamic is not None:
                step = step.dynamic(request)
            if step.form is StepForm.TOOL_CALLS:
                call = step.calls[0]
                return step, _compact({"action": call.name, "arguments": call.arguments})
            return step, None
        if request.kind in (StepKind.DECIDE, StepKind.TOOL_ARGUMENTS):
            return self._select_decision(request.kind)
        while self._queue and self._queue[0].form is StepForm.TOOL_CALLS:
            self._next_step()
        if request.kind is StepKind.STRUCTURED and self._queue:
            self._check_structured(self._queue[0])
        return self._next_step(), None

    def _check_structured(self, head: ScriptStep) -> None:
        """A structured step (a schema turn, an NPC's reply in ``automatic`` or ``structured``
        format, content) needs a ``json`` step, or a text step holding JSON; a plain text step
        of the script cannot serve it. Say so, leaving the script as it was, rather than play
        text that fails validation and let the turn's repairs and text retry eat the following
        steps. (An exhausted script plays its fallback as always.)"""
        if head.form is not StepForm.TEXT or _is_json(head.text):
            return
        raise AgentError(
            ErrorCode.INVALID_REQUEST,
            f"The scripted model cannot answer a structured step with its step {self._played + 1} "
            f"(steps[{self._played}]), a text step ({_compact(head.text[:40])}): a structured step takes a "
            '{"json": …} step (or text holding JSON). An NPC in replyFormat automatic or structured takes one '
            'json step per talk, {"json": {"emotion": "neutral", "line": "…", "player_options": [], '
            '"ends_conversation": false}}; in replyFormat text, one text step.',
        )

    def _select_decision(self, kind: StepKind) -> tuple[ScriptStep, str | None]:
        head = self._queue[0] if self._queue else None
        if head is not None and head.form is StepForm.ERROR:
            return self._next_step(), None
        if head is None or head.form is not StepForm.TOOL_CALLS:
            # The delay of an answer applies at the reply step.
            return _QUIET, _RESPOND_ENVELOPE if kind is StepKind.DECIDE else "{}"
        call = self._take_call()
        # The head step carries the delay (played with its first call only: the rest of its calls
        # stay at the head without one).
        if kind is StepKind.DECIDE:
            return head, _compact({"action": call.name, "arguments": call.arguments})
        return head, _compact(call.arguments)


    def _next_step(self) -> ScriptStep:
        if not self._queue:
            return self.fallback
        self._played += 1
        self._head_calls = 0
        return self._queue.popleft()

    def _take_call(self) -> ScriptCall:
        """The next tool call of the head step (a ``toolCalls`` step), consumed."""
        call, *rest = self._queue[0].calls
        if rest:
            self._queue[0] = ScriptStep.tool_calls(*rest)
            self._head_calls += 1
        else:
            self._next_step()
        return call


_QUIET = ScriptStep.say("", chunks=1)


def _compact(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _is_json(text: str) -> bool:
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    return True


def _render(step: ScriptStep, request: GenerationRequest) -> str:
    if step.form is StepForm.TEXT:
        return step.text
    if step.form in (StepForm.JSON, StepForm.ENVELOPE):
        return _compact(step.value)
    if step.form is StepForm.TEMPLATE:
        outputs = request.tool_outputs
        return (
            step.text.replace("{prompt}", request.user_prompt)
            .replace("{toolOutputs}", "\n".join(outputs))
            .replace("{toolOutput}", outputs[-1] if outputs else "")
        )
    raise AssertionError(f"unplayable step {step.form}")


def _pieces(step: ScriptStep, text: str) -> list[str]:
    return _chunks(text, step.chunks if step.form in (StepForm.TEXT, StepForm.TEMPLATE) else 3)


def _chunks(text: str, n: int) -> list[str]:
    if n <= 1 or len(text) <= n:
        return [text] if text else []
    size = math.ceil(len(text) / n)
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- wire parsing ----------------------------------------------------------------------------


def _parse_step(value: Any, path: str) -> ScriptStep:
    if not isinstance(value, dict):
        raise invalid_params(f"'{path}' must be an object.")
    delay = _non_negative_int(value.get("delayMs"), f"{path}.delayMs", default=0)
    chunks = _non_negative_int(value.get("chunks"), f"{path}.chunks", default=3, minimum=1)
    if value.get("text") is not None:
        return ScriptStep.say(_string(value["text"], f"{path}.text"), chunks=chunks, delay_ms=delay)
    if value.get("toolCalls") is not None:
        return ScriptStep.tool_calls(*_parse_calls(value["toolCalls"], f"{path}.toolCalls"), delay_ms=delay)
    if "json" in value:
        return ScriptStep.json(value["json"], delay_ms=delay)
    if value.get("template") is not None:
        return ScriptStep.template(_string(value["template"], f"{path}.template"), chunks=chunks, delay_ms=delay)
    if value.get("error") is not None:
        name = value["error"]
        if name not in _AGENT_WIRE_NAMES:
            raise invalid_params(
                f"Parameter '{path}.error' must be one of {', '.join(_AGENT_WIRE_NAMES)}; got {_compact(name)}."
            )
        message = value.get("message")
        if message is not None:
            message = _string(message, f"{path}.message")
        return ScriptStep.fail(ErrorCode.from_wire(name), message, delay_ms=delay)
    raise invalid_params(
        f"'{path}' must have one of \"text\", \"toolCalls\", \"json\", \"template\" or \"error\"."
    )


def _parse_calls(value: Any, path: str) -> list[ScriptCall]:
    if not isinstance(value, list) or not value:
        raise invalid_params(f"Parameter '{path}' must be a non-empty array.")
    calls = []
    for i, call in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(call, dict):
            raise invalid_params(f"'{where}' must be an object.")
        name = _string(call.get("name"), f"{where}.name")
        arguments = call.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise invalid_params(f"Parameter '{where}.arguments' must be an object; got {_compact(arguments)}.")
        call_id = call.get("id")
        if call_id is not None:
            call_id = _string(call_id, f"{where}.id")
        calls.append(ScriptCall(name, arguments, call_id))
    return calls


def _string(value: Any, path: str) -> str:
    if value is None:
        raise invalid_params(f"Missing required parameter '{path}'.")
    if not isinstance(value, str):
        raise invalid_params(f"Parameter '{path}' must be a string; got {_compact(value)}.")
    return value


def _non_negative_int(value: Any, path: str, *, default: int, minimum: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value != int(value) or value < minimum:
        raise invalid_params(f"Parameter '{path}' must be an integer >= {minimum}; got {_compact(value)}.")
    return int(value)
