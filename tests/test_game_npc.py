"""NPC turns on the scripted model (native style): formats, retries, fallbacks, memory, world, barks,
compaction, save and restore (protocol-game §6.5–§6.11, §8, §9 library items)."""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio
import pytest

from oam_actors.agent import (
    Agent,
    JsonOutput,
    PromptEntry,
    ResponseEntry,
    Schema,
    StepKind,
    ToolCallAbandoned,
    ToolCallCompleted,
    ToolCallStarted,
    ToolChoice,
    ToolDefinition,
)
from oam_actors import AgentError, ErrorCode, OamError, ScriptedModel
from oam_actors.game import _prompting as prompting
from oam_actors.game import (
    DEFAULT_FALLBACK_LINES,
    NPC,
    Emotion,
    EmotionEvent,
    LineDelta,
    LineReset,
    NPCMemory,
    NPCOptions,
    NPCSaveState,
    Persona,
    WorldState,
)

GORM = Persona.from_wire(
    {"name": "Gorm", "role": "the village blacksmith", "personality": "Gruff but fair.",
     "speakingStyle": "Short, blunt sentences."}
).value
SECRET = "He forged the blade that killed the old king."
INVENTORY_SCHEMA = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
INV = ToolDefinition("check_inventory", "Look up stock and price of an item.", Schema.compile(INVENTORY_SCHEMA))


def scripted(*steps: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel.from_wire({"type": "scripted", "steps": list(steps)})


def reply(line: str, emotion: str = "neutral") -> dict[str, Any]:
    return {"json": {"emotion": emotion, "line": line, "player_options": ["Buy one.", "Goodbye."],
                     "ends_conversation": False}}


def tool_calls(name: str, **arguments: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": name, "arguments": arguments}]}


def options(**wire: Any) -> NPCOptions:
    return NPCOptions.from_wire(wire).value


def local_inventory(calls: list[dict[str, Any]]) -> ToolDefinition:
    async def handler(arguments: dict[str, Any]) -> Any:
        calls.append(arguments)
        return {"item": arguments["item"], "stock": 3, "price_gold": 45}

    return ToolDefinition("check_inventory", "Look up stock and price of an item.",
                          Schema.compile(INVENTORY_SCHEMA), handler=handler)


class Recorder:
    """An event sink that keeps the events and, optionally, answers client tool calls."""

    def __init__(self, npc: NPC | None = None, answer: Any = None) -> None:
        self.events: list[Any] = []
        self.npc = npc
        self.answer = answer
        self.group: Any = None

    async def __call__(self, event: Any) -> None:
        self.events.append(event)
        if isinstance(event, ToolCallStarted) and event.execution == "client" and self.answer is not None:
            self.group.start_soon(self._submit, event.call)

    async def _submit(self, call: Any) -> None:
        await anyio.lowlevel.checkpoint()  # the turn opens its slot right after the event
        assert self.npc is not None and self.npc.submit_tool_result(call.id, JsonOutput(self.answer(call)))

    def displayed(self) -> str:
        shown = ""
        for event in self.events:
            if isinstance(event, LineDelta):
                shown += event.delta
            elif isinstance(event, LineReset):
                shown = event.line
        return shown

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


async def talk_answering(npc: NPC, recorder: Recorder, line: str, **kwargs: Any):
    async with anyio.create_task_group() as group:
        recorder.group = group
        return await npc.talk(line, emit=recorder, **kwargs)


# --- plain turns and formats ----------------------------------------------------------------------


async def test_structured_turn_result_in_wire_order():
    model = scripted(reply("Three swords, lad. Forty-five gold.", "proud"))
    npc = NPC(GORM, model)
    commits: list[int] = []
    turn = await npc.talk("Got any swords?", context="The player just walked in.", on_commit=lambda: commits.append(1))
    wire = turn.to_wire(npc="gorm")
    assert list(wire) == ["npc", "line", "emotion", "playerOptions", "endsConversation", "toolCalls",
                          "relationship", "isFallback", "usage"]
    assert wire["line"] == "Three swords, lad. Forty-five gold." and wire["emotion"] == "proud"
    assert wire["playerOptions"] == ["Buy one.", "Goodbye."] and wire["endsConversation"] is False
    assert wire["toolCalls"] == [] and wire["relationship"] == 0 and wire["isFallback"] is False
    assert isinstance(wire["usage"]["totalTokens"], int) and wire["usage"]["totalTokens"] > 0
    assert turn.to_wire(warnings=["w"])["warnings"] == ["w"]
    assert npc.turn_count == 1 and commits == [1]
    request = model.requests[0]
    assert [r.kind for r in model.requests] == [StepKind.STRUCTURED]
    assert request.priority == "dialogue"
    assert request.system.startswith("You play Gorm, the village blacksmith, a character in a video game.")
    assert request.system.endswith("Situation: The player just walked in.")
    assert "say so in character" in request.system


async def test_streaming_folds_to_the_line_with_one_emotion_first():
    npc = NPC(GORM, scripted(reply("Steel is patient, lad.", "amused")))
    recorder = Recorder()
    turn = await npc.talk("Hello", emit=recorder)
    assert recorder.events[0] == EmotionEvent(Emotion.AMUSED)
    assert len(recorder.of(EmotionEvent)) == 1
    assert recorder.displayed() == turn.line == "Steel is patient, lad."
    assert recorder.of(LineReset) == []


async def test_history_shows_only_the_spoken_line_and_situation_is_one_turn():
    model = scripted(reply("Welcome, lad."), reply("Still here?"))
    npc = NPC(GORM, model)
    await npc.talk("Hello", context={"weather": "rain"})
    await npc.talk("Hello again")
    assert '{"weather":"rain"}' in model.requests[0].system
    prompt = model.requests[1].prompt
    assert "Gorm: Welcome, lad.\n" in prompt and "Player: Hello again" in prompt
    assert "player_options: " not in prompt
    assert "Situation:" not in model.requests[1].system


async def test_text_format_reads_the_emotion_tag():
    model = scripted({"text": "[happy] Welcome to the forge!"})
    npc = NPC(GORM, model, options=options(replyFormat="text"))
    recorder = Recorder()
    turn = await npc.talk("Hi", emit=recorder)
    assert (turn.line, turn.emotion, turn.player_options, turn.ends_conversation) == (
        "Welcome to the forge!", Emotion.HAPPY, (), False)
    assert recorder.displayed() == "Welcome to the forge!"
    assert recorder.of(EmotionEvent) == [EmotionEvent(Emotion.HAPPY)]
    assert [r.kind for r in model.requests] == [StepKind.RESPOND]
    assert "Begin every spoken reply with your current emotion in square brackets" in model.requests[0].system


async def test_text_tag_synonym_label_and_unknown_tag():
    npc = NPC(GORM, scripted({"text": '[gruff] Gorm: "Aye, lad."'}, {"text": "[sighs] Fine."}),
              options=options(replyFormat="text"))
    first = await npc.talk("Well?")
    second = await npc.talk("And?")
    assert (first.line, first.emotion) == ("Aye, lad.", Emotion.ANNOYED)
    assert (second.line, second.emotion) == ("Fine.", Emotion.NEUTRAL)


# --- unusable output: retry and fallback ----------------------------------------------------------


async def test_automatic_retries_a_blocked_turn_as_text():
    model = scripted({"error": "guardrail_violation"}, {"text": "[worried] Let's not speak of it."})
    npc = NPC(GORM, model)
    recorder = Recorder()
    turn = await npc.talk("The war?", emit=recorder)
    assert (turn.line, turn.emotion, turn.is_fallback, turn.player_options) == (
        "Let's not speak of it.", Emotion.WORRIED, False, ())
    assert recorder.displayed() == turn.line
    assert npc.turn_count == 1


async def test_automatic_retries_invalid_structured_output_after_one_repair():
    model = scripted({"json": {"emotion": "flabbergasted"}}, {"json": {"emotion": "flabbergasted"}},
                     {"text": "[confused] Speak plainly, lad."})
    npc = NPC(GORM, model)
    turn = await npc.talk("Hm?")
    assert (turn.line, turn.emotion) == ("Speak plainly, lad.", Emotion.CONFUSED)
    assert [(r.kind, r.is_repair) for r in model.requests] == [
        (StepKind.STRUCTURED, False), (StepKind.STRUCTURED, True), (StepKind.RESPOND, False)]


async def test_blocked_after_a_grounded_lookup_retries_with_the_facts():
    calls: list[dict[str, Any]] = []
    model = scripted(tool_calls("check_inventory", item="axe"), {"error": "guardrail_violation"},
                     {"text": "[proud] Three axes, lad."})
    npc = NPC(GORM, model, tools=[local_inventory(calls)], options=options(groundingTool="check_inventory"))
    turn = await npc.talk("Axes?")
    retry = model.requests[-1]
    assert retry.kind is StepKind.RESPOND
    assert 'Facts you just looked up:\n- check_inventory {"item":"axe"} gave: ' in retry.system
    assert "price_gold" in retry.system
    assert calls == [{"item": "axe"}]
    assert len(turn.tool_calls) == 1 and turn.line == "Three axes, lad."
    assert npc.turn_count == 1
    entries = npc.save_state().transcript.entries
    assert [type(e) for e in entries] == [PromptEntry, ResponseEntry]


async def test_retry_blocked_too_gives_the_fallback_line():
    model = scripted({"error": "guardrail_violation"}, {"error": "refusal"})
    npc = NPC(GORM, model)
    recorder = Recorder()
    turn = await npc.talk("Tell me of the war.", emit=recorder)
    assert turn.is_fallback and turn.line == DEFAULT_FALLBACK_LINES[0]
    assert turn.emotion is Emotion.NEUTRAL and turn.usage.to_wire()["totalTokens"] == 0
    assert recorder.events == [EmotionEvent(Emotion.NEUTRAL), LineDelta(DEFAULT_FALLBACK_LINES[0])]
    assert npc.turn_count == 0 and len(model.requests) == 2


async def test_retry_failing_otherwise_raises():
    npc = NPC(GORM, scripted({"error": "guardrail_violation"}, {"error": "model_unavailable"}))
    with pytest.raises(AgentError) as info:
        await npc.talk("Hm?")
    assert info.value.code is ErrorCode.MODEL_UNAVAILABLE


async def test_structured_only_falls_back_without_retry():
    model = scripted({"error": "guardrail_violation"})
    npc = NPC(GORM, model, options=options(replyFormat="structured", fallbackLines=["Not now, lad."]))
    turn = await npc.talk("Hm?")
    assert (turn.is_fallback, turn.line) == (True, "Not now, lad.")
    assert len(model.requests) == 1


async def test_no_fallback_raises_the_model_error():
    npc = NPC(GORM, scripted({"error": "guardrail_violation"}),
              options=options(replyFormat="structured", fallbackOnGuardrail=False))
    with pytest.raises(AgentError) as info:
        await npc.talk("Hm?")
    assert info.value.to_wire()["code"] == -32002
    refusing = NPC(GORM, scripted({"error": "refusal"}), options=options(replyFormat="structured", fallbackOnGuardrail=False))
    with pytest.raises(AgentError):
        await refusing.talk("Hm?")
    assert refusing.turn_count == 0


@pytest.mark.parametrize("code", ["context_size_exceeded", "model_unavailable", "unsupported_language"])
async def test_other_errors_are_never_masked(code):
    model = scripted({"error": code})
    npc = NPC(GORM, model)
    with pytest.raises(AgentError) as info:
        await npc.talk("Hm?")
    assert info.value.code.wire == code
    assert len(model.requests) == 1


async def test_fallback_lines_rotate_and_blank_lines_fall_back():
    model = scripted(*[{"error": "guardrail_violation"}] * 4)
    npc = NPC(GORM, model, options=options(replyFormat="text"))
    lines = [(await npc.talk("x")).line for _ in range(4)]
    assert lines == [*DEFAULT_FALLBACK_LINES, DEFAULT_FALLBACK_LINES[0]]
    assert npc.turn_count == 0
    blank = NPC(GORM, scripted(reply("  "), {"text": "[sad] *sighs*"}))
    turn = await blank.talk("x")
    assert (turn.is_fallback, turn.line, blank.turn_count) == (True, DEFAULT_FALLBACK_LINES[0], 1)


async def test_a_wordless_reply_is_asked_again_alone_in_words_before_a_fallback():
    model = scripted({"text": "[blessed]"}, {"text": "[happy] Under the anvil, lad."})
    npc = NPC(GORM, model, options=options(replyFormat="text"))
    recorder = Recorder()
    turn = await npc.talk("Where is the key?", emit=recorder)
    assert (turn.line, turn.emotion, turn.is_fallback) == ("Under the anvil, lad.", Emotion.HAPPY, False)
    assert recorder.displayed() == turn.line
    first, again = model.requests
    assert "had no words" not in first.system and again.system.rstrip().endswith(prompting.WORDLESS_REPAIR)
    # The wordless reply is not in the history: one turn, its answer the line in words.
    assert npc.turn_count == 1
    assert [e.text for e in npc.save_state().transcript.entries if isinstance(e, ResponseEntry)] == [
        "[happy] Under the anvil, lad."]


# --- tools ----------------------------------------------------------------------------------------


async def test_client_tool_round_trip_with_grounding():
    model = scripted(tool_calls("check_inventory", item="iron sword"), reply("Three iron swords, forty-five gold each."))
    npc = NPC(GORM, model, tools=[INV], options=options(groundingTool="check_inventory", memoryTools="all"))
    assert npc.tool_names == ["check_inventory", "remember_fact", "change_relationship"]
    assert [t.name for t in npc.client_tools] == ["check_inventory"]
    recorder = Recorder(npc, lambda call: {"item": call.arguments["item"], "stock": 3, "price_gold": 45})
    turn = await talk_answering(npc, recorder, "Iron swords?")
    record = turn.tool_calls[0].to_wire()
    assert record["call"]["name"] == "check_inventory" and record["call"]["arguments"] == {"item": "iron sword"}
    assert record["output"]["stock"] == 3 and record["isError"] is False
    kinds = [type(e) for e in recorder.events if isinstance(e, ToolCallStarted | ToolCallCompleted)]
    assert kinds == [ToolCallStarted, ToolCallCompleted]
    assert recorder.of(ToolCallStarted)[0].execution == "client"
    assert recorder.of(ToolCallStarted)[0].call.id == turn.tool_calls[0].call.id
    assert [r.kind for r in model.requests] == [StepKind.TOOL_ARGUMENTS, StepKind.DECIDE, StepKind.STRUCTURED]


async def test_client_tool_timeout_is_an_error_output_and_abandons_the_call():
    model = scripted(tool_calls("check_inventory", item="bow"), reply("My ledger is slow today."))
    npc = NPC(GORM, model, tools=[INV], options=options(toolTimeoutSeconds=0.05))
    recorder = Recorder()
    turn = await npc.talk("Bows?", emit=recorder)
    assert turn.line == "My ledger is slow today."
    assert turn.tool_calls[0].output.is_error
    assert turn.tool_calls[0].to_wire()["output"] == "Tool 'check_inventory' timed out after 50ms."
    abandoned = recorder.of(ToolCallAbandoned)
    assert len(abandoned) == 1 and abandoned[0].call.id == turn.tool_calls[0].call.id
    assert recorder.events.index(abandoned[0]) > recorder.events.index(recorder.of(ToolCallCompleted)[0])


async def test_per_turn_tool_choice_must_name_an_available_tool():
    model = scripted(reply("Hm."))
    npc = NPC(Persona(name="Ann"), model, options=options(memoryTools="all"))
    assert npc.tool_names == ["remember_fact", "change_relationship"]
    with pytest.raises(AgentError) as info:
        await npc.talk("Hi", tool_choice=ToolChoice.parse({"tool": "nope"}))
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert info.value.message == "Tool 'nope' is not available to Ann."
    assert model.requests == []
    toolless = NPC(Persona(name="Bo"), scripted(reply("Hm.")))
    assert (await toolless.talk("Hi", tool_choice=ToolChoice.parse({"tool": "nope"}))).line == "Hm."


async def test_world_tools_read_and_write_during_a_turn():
    world = WorldState({"player": {"name": "Aria", "gold": 60}})
    changes: list[Any] = []
    world.observe("quests", changes.append)
    model = scripted(tool_calls("read_world_state", path="player.gold"),
                     tool_calls("update_world_state", path="quests.ring", value="started"),
                     reply("Sixty gold, Aria. Find my ring."))
    npc = NPC(GORM, model, world=world,
              options=options(groundingTool="read_world_state", worldWritable=["quests"], maxToolRounds=3))
    assert npc.tool_names == ["read_world_state", "update_world_state"]
    recorder = Recorder()
    turn = await npc.talk("Gold?", emit=recorder)
    assert turn.tool_calls[0].to_wire()["output"] == 60
    assert turn.tool_calls[1].call.name == "update_world_state"
    assert turn.tool_calls[1].to_wire()["output"] == 'Set quests.ring to "started".'
    assert world.get("quests.ring") == "started"
    assert [(c.path, c.new) for c in changes] == [("quests.ring", "started")]
    assert [e.execution for e in recorder.of(ToolCallStarted)] == ["local", "local"]
    assert "Use your tools to check facts" in model.requests[0].system


async def test_world_context_paths_go_into_the_system_text():
    world = WorldState({"player": {"name": "Aria", "gold": 12}, "time": "night"})
    model = scripted(reply("Evening, Aria."))
    npc = NPC(GORM, model, world=world, options=options(worldReadable=[], worldContextPaths=["player.name", "time"]))
    assert npc.tool_names == []
    await npc.talk("Hello", context="The forge is hot.")
    assert model.requests[0].system.endswith("Game state:\nplayer.name: Aria\ntime: night\nSituation: The forge is hot.")


# --- memory and secrets ---------------------------------------------------------------------------


async def test_memory_tools_commit_with_the_turn():
    model = scripted(
        {"toolCalls": [{"name": "remember_fact", "arguments": {"fact": "The player's name is Aria."}},
                       {"name": "change_relationship", "arguments": {"reason": "kind words", "delta": 8}}]},
        reply("Good to meet you, Aria."),
        reply("Aye?"),
    )
    npc = NPC(GORM, model, options=options(memoryTools="all"))
    turn = await npc.talk("I'm Aria.")
    assert turn.relationship == 8
    assert [r.to_wire()["output"] for r in turn.tool_calls] == ["Remembered.", "You now feel neutral toward the player (8)."]
    assert npc.memory.facts == ("The player's name is Aria.",)
    await npc.talk("Hello again.")
    system = model.requests[-1].system
    assert "You remember: The player's name is Aria." in system
    assert "You feel neutral toward the player (8 on a scale from -100 to 100)." in system
    assert "- When the player tells you something worth remembering, call remember_fact." in system


async def test_duplicate_facts_and_clamped_relationship_changes():
    model = scripted(
        {"toolCalls": [{"name": "remember_fact", "arguments": {"fact": "The player's name is Aria."}},
                       {"name": "remember_fact", "arguments": {"fact": "the players name is aria"}}]},
        reply("Aria."),
        tool_calls("change_relationship", reason="insult", delta=-50),
        reply("Get out."),
    )
    npc = NPC(GORM, model, options=options(memoryTools="all"), memory=NPCMemory(relationship=-95))
    first = await npc.talk("I'm Aria.")
    assert [r.to_wire()["output"] for r in first.tool_calls] == ["Remembered.", "You already know that."]
    second = await npc.talk("Your swords are junk.")
    assert second.tool_calls[0].to_wire()["output"] == "You now feel hostile toward the player (-100)."
    assert second.relationship == -100


async def test_staged_memory_survives_a_successful_retry_and_not_a_fallback():
    model = scripted(tool_calls("change_relationship", reason="nice", delta=5), {"error": "guardrail_violation"},
                     {"text": "[happy] Fine."})
    npc = NPC(GORM, model, options=options(memoryTools=["changeRelationship"]))
    assert (await npc.talk("Nice forge.")).relationship == 5
    blocked = NPC(GORM, scripted(tool_calls("change_relationship", reason="nice", delta=5),
                                 {"error": "guardrail_violation"}, {"error": "guardrail_violation"}),
                  options=options(memoryTools=["changeRelationship"]))
    turn = await blocked.talk("Nice forge.")
    assert turn.is_fallback and turn.relationship == 0 and len(turn.tool_calls) == 1
    assert blocked.memory.relationship == 0


async def test_secret_visibility_follows_the_threshold():
    persona = Persona(name="Gorm", secrets=(SECRET,))
    guarded = scripted(reply("Hm."))
    await NPC(persona, guarded, options=options(secretsUnlockAtRelationship=None)).talk("Secrets?")
    assert f"Your secret: {SECRET}" in guarded.requests[0].system
    assert "- Keep your secret unless the player has truly earned your trust." in guarded.requests[0].system

    model = scripted(reply("Hm."), reply("Well..."))
    npc = NPC(persona, model, options=options(secretsUnlockAtRelationship=60), memory=NPCMemory(relationship=10))
    await npc.talk("Secrets?")
    assert "secret" not in model.requests[0].system.lower()
    npc.reconfigure(memory=NPCMemory(relationship=75))
    await npc.talk("Secrets now?")
    assert f"Your secret: {SECRET}" in model.requests[1].system
    assert "You may share your secret if asked." in model.requests[1].system


# --- compaction -----------------------------------------------------------------------------------


async def test_compaction_after_the_nth_turn_consumes_the_next_step():
    model = scripted(reply("One."), reply("Two."), reply("Three."), {"text": "Aria asked about swords three times."},
                     reply("Four."))
    npc = NPC(GORM, model, options=options(compactAfterTurns=3, keepRecentTurns=1))
    await npc.talk("First")
    await npc.talk("Second")
    assert (npc.turn_count, npc.compaction_pending, npc.memory.summary) == (2, False, None)
    await npc.talk("Third")
    assert npc.compaction_pending and model.remaining == 2
    state = await npc.settled_state()
    summary_request = model.requests[3]
    assert summary_request.kind is StepKind.SUMMARY and summary_request.priority == "background"
    assert "Player: First" in summary_request.prompt and "Player: Third" not in summary_request.prompt
    assert summary_request.system.startswith("You keep Gorm's memory of talking with the player in a video game.")
    assert state.memory.summary == "Aria asked about swords three times."
    assert npc.turn_count == 1 and not npc.compaction_pending
    await npc.talk("Fourth")
    last = model.requests[-1]
    assert "- Earlier conversation: Aria asked about swords three times." in last.system
    assert last.prompt.count("Player:") == 2


async def test_pending_compaction_runs_before_the_next_turn_and_failures_change_nothing(
    caplog: pytest.LogCaptureFixture,
):
    model = scripted(reply("One."), {"error": "model_unavailable"}, reply("Two."))
    npc = NPC(GORM, model, options=options(compactAfterTurns=1, keepRecentTurns=0))
    await npc.talk("First")
    assert npc.compaction_pending
    with caplog.at_level(logging.DEBUG, logger="oam_actors.game"):
        await npc.talk("Second")
    assert [r.kind for r in model.requests] == [StepKind.STRUCTURED, StepKind.SUMMARY, StepKind.STRUCTURED]
    assert npc.memory.summary is None and npc.turn_count == 2
    # Nobody waits for background work, so its failure is logged rather than lost: an expected
    # fault is one WARNING line without a traceback, the traceback only at DEBUG.
    warning, debug = caplog.records
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert "compaction" in warning.getMessage() and "Gorm" in warning.getMessage()
    assert debug.levelno == logging.DEBUG
    assert isinstance(debug.exc_info[1], AgentError) and debug.exc_info[1].code is ErrorCode.MODEL_UNAVAILABLE


async def test_a_bug_in_background_compaction_is_not_swallowed(monkeypatch: pytest.MonkeyPatch):
    model = scripted(reply("One."), reply("Two."))
    npc = NPC(GORM, model, options=options(compactAfterTurns=1, keepRecentTurns=0))
    await npc.talk("First")

    async def broken(*args: Any, **kwargs: Any) -> str:
        raise KeyError("summary")

    monkeypatch.setattr(Agent, "compact", broken)
    with pytest.raises(KeyError):
        await npc.run_pending_compaction()


async def test_manual_compaction():
    npc = NPC(GORM, scripted(reply("One."), {"error": "model_unavailable"}), options=options(compactAfterTurns=0))
    assert await npc.compact() is None  # keeps 2 turns: nothing to summarise yet
    await npc.talk("First")
    npc.reconfigure(options=options(compactAfterTurns=0, keepRecentTurns=0))
    with pytest.raises(AgentError):
        await npc.compact()
    assert npc.turn_count == 1


# --- barks ----------------------------------------------------------------------------------------


async def test_bark_is_a_one_off_line():
    world = WorldState({"weather": "rain"})
    model = scripted({"text": 'Gorm: "Fine steel, fresh from the forge!"\nAnd more text.'}, reply("Mind the anvil."))
    npc = NPC(Persona(name="Gorm", secrets=(SECRET,)), model, world=world,
              options=options(worldContextPaths=["weather"], barkMaximumTokens=30, secretsUnlockAtRelationship=None))
    line = (await npc.bark("A customer walks past the stall.")).line
    assert line == "Fine steel, fresh from the forge!"
    request = model.requests[0]
    # The first bark has nothing to repeat at its deadline, so it queues as a decision; later ones do not.
    assert request.max_output_tokens == 30 and request.priority == "decision"
    await npc.bark("A dog barks.")
    assert model.requests[1].priority == "background"
    # With fallback lines of its own, even a first bark can degrade: it queues as background.
    own = scripted(reply("Hm."))
    await NPC(GORM, own, options=options(fallbackLines=["Busy, busy."])).bark("A dog barks.")
    assert own.requests[0].priority == "background"
    assert request.prompt == (
        "Game state:\nweather: rain\nSituation: A customer walks past the stall.\nPlayer: (The player says nothing.)"
    )
    assert "at most 1 short sentence" in request.system
    assert "secret" not in request.system.lower() and "Use your tools" not in request.system
    assert npc.turn_count == 0


async def test_bark_errors_are_returned_as_they_are():
    blank = NPC(GORM, scripted({"text": "  \n "}))
    with pytest.raises(AgentError) as info:
        await blank.bark()
    assert (info.value.code, info.value.message) == (ErrorCode.GENERATION_FAILED, "The model produced an empty bark.")
    blocked = NPC(GORM, scripted({"error": "guardrail_violation"}))
    with pytest.raises(AgentError) as info:
        await blocked.bark({"event": "storm"})
    assert info.value.code is ErrorCode.GUARDRAIL_VIOLATION


# --- configuration, cancellation, save and restore ------------------------------------------------


async def test_reconfigure_is_all_or_nothing():
    npc = NPC(GORM, scripted(), tools=[INV], options=options(groundingTool="check_inventory"))
    with pytest.raises(OamError) as info:
        npc.reconfigure(tools=[], options=options(groundingTool="nope"))
    assert info.value.code is ErrorCode.INVALID_PARAMS
    with pytest.raises(OamError):
        npc.reconfigure(persona=Persona(name=" "), memory=NPCMemory(relationship=5))
    assert npc.options.grounding_tool == "check_inventory" and npc.tool_names == ["check_inventory"]
    assert npc.persona.name == "Gorm" and npc.memory.relationship == 0
    with pytest.raises(OamError):
        NPC(GORM, scripted(), options=options(groundingTool="check_inventory"))
    with pytest.raises(OamError) as info:
        NPC(GORM, scripted(), tools=[ToolDefinition("remember_fact")], options=options(memoryTools="all"))
    assert info.value.message.startswith("Duplicate tool name 'remember_fact'")


async def test_cancelled_turn_leaves_no_trace():
    model = scripted(tool_calls("check_inventory", item="shield"), reply("Never mind."))
    npc = NPC(GORM, model, tools=[INV], options=options(memoryTools="all"))
    started = anyio.Event()

    async def emit(event: Any) -> None:
        if isinstance(event, ToolCallStarted):
            started.set()

    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(npc.talk, "Shields?", emit=emit))
        await started.wait()
        assert len(npc.pending_tool_calls) == 1
        group.cancel_scope.cancel()
    assert npc.turn_count == 0 and npc.pending_tool_calls == []
    # The cancelled turn never reached its reply step, so the next turn plays it.
    assert (await npc.talk("And helmets?", tool_choice=ToolChoice.parse("none"))).line == "Never mind."


async def test_save_and_restore_round_trip():
    model = scripted(reply("Welcome, Aria."), reply("Axes, you said? Three."))
    npc = NPC(GORM, model, memory=NPCMemory(("Aria likes axes.",), 25))
    await npc.talk("Hello!")
    wire = npc.save_state().to_wire()
    assert list(wire) == ["version", "persona", "memory", "transcript"]
    assert wire["version"] == 1 and wire["persona"]["name"] == "Gorm"
    assert wire["memory"] == {"facts": ["Aria likes axes."], "relationship": 25}
    assert isinstance(wire["transcript"], dict)

    saved = NPCSaveState.from_wire({"npc": "gorm", "state": wire})  # a whole npc/state result
    restored = NPC.restore(saved, model)
    assert restored.turn_count == 1 and restored.memory == npc.memory
    turn = await restored.talk("Axes?")
    assert turn.line == "Axes, you said? Three." and turn.relationship == 25
    assert "Gorm: Welcome, Aria." in model.requests[-1].prompt


async def test_a_save_before_the_first_turn_has_the_instructions_of_creation():
    npc = NPC(GORM, scripted(reply("Welcome.")), tools=[INV])
    created = npc.save_state().transcript.instructions
    assert created is not None and created.startswith("You play Gorm, the village blacksmith")
    assert "Use your tools" in created
    npc.reconfigure(persona=Persona(name="Gorm", role="a retired smith"), tools=[])
    assert npc.save_state().transcript.instructions == created  # until a turn renders the new ones
    await npc.talk("Hello!")
    after = npc.save_state().transcript.instructions
    assert after is not None and after.startswith("You play Gorm, a retired smith") and "Use your tools" not in after


def test_save_state_decoding_errors():
    def message(value: Any) -> str:
        with pytest.raises(OamError) as info:
            NPCSaveState.from_wire(value)
        return info.value.message

    assert message({"persona": {"role": "no name"}}) == "Missing required parameter 'state.persona.name'."
    assert message({"persona": {"name": ""}}) == "'state.persona.name' must not be empty."
    assert message({"memory": {}}) == "Missing required parameter 'state.persona'."
    assert message([]) == "'state' must be a save state object from npc/state."
    saved = NPCSaveState.from_wire({"persona": {"name": "Mira"}})
    assert saved.memory == NPCMemory() and saved.transcript.entries == []


def test_save_state_drops_a_trailing_unanswered_prompt():
    wire = {"persona": {"name": "Mira"}, "transcript": {"entries": [
        {"type": "prompt", "text": "Hi"}, {"type": "response", "text": "Hello."}, {"type": "prompt", "text": "And?"}]}}
    saved = NPCSaveState.from_wire(wire)
    assert [type(e) for e in saved.transcript.entries] == [PromptEntry, ResponseEntry]
    answered = {"persona": {"name": "Mira"}, "transcript": {"entries": wire["transcript"]["entries"][:2]}}
    assert NPCSaveState.from_wire(answered).transcript.entries == saved.transcript.entries


async def test_reset_clears_conversation_and_optionally_memory():
    npc = NPC(GORM, scripted(reply("One.")), memory=NPCMemory(("x",), 30))
    await npc.talk("Hi")
    npc.reset()
    assert npc.turn_count == 0 and npc.memory.relationship == 30
    npc.reset(clear_memory=True)
    assert npc.memory == NPCMemory()
