"""The agent loop end to end over each provider's wire format on a loopback server: a turn with a
client tool in envelope mode (the default) and in native tool mode, and failed steps that leave
nothing in the history."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from provider_servers import CALL, CLOSE, TEXT, ProviderServer, Reply, stream

from oam_actors.agent import (
    Agent,
    AgentOptions,
    JsonOutput,
    RetryPolicy,
    Schema,
    TextDelta,
    ToolCallStarted,
    ToolChoice,
    TurnEvent,
    TurnOverrides,
    parse_tool_definitions,
)
from oam_actors.agent.transcript import PromptEntry, ResponseEntry, ToolUseEntry
from oam_actors import AgentError, ErrorCode
from oam_actors.models.proxy import Provider, ProxyBackends, ProxyConfig

PROVIDERS = ["openai", "anthropic", "gemini"]
SUFFIX = {"openai": "/v1", "anthropic": "", "gemini": ""}
HANG_GUARD = 10.0
OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
FAST_RETRY = RetryPolicy(max_attempts=2, initial_backoff=0.01)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


@pytest.fixture
async def backends() -> AsyncIterator[ProxyBackends]:
    async with ProxyBackends(environ={}) as shared:
        yield shared


class Game:
    """The client side: answers every client tool call at once and keeps the turn's events."""

    def __init__(self) -> None:
        self.agent: Agent | None = None
        self.events: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)
        if isinstance(event, ToolCallStarted) and event.execution == "client":
            assert self.agent is not None
            self.agent.submit_tool_result(event.call.id, JsonOutput({"opened": event.call.arguments["gate"]}))


def agent_on(
    backends: ProxyBackends, server: ProviderServer, provider: str, game: Game, *, tools: bool = True, **config: Any
) -> Agent:
    cfg = ProxyConfig(provider=Provider(provider), model="m1", base_url=server.url + SUFFIX[provider], **config)
    definitions, _ = parse_tool_definitions([OPEN_GATE] if tools else [])
    agent = Agent(backends.model(cfg), instructions="You guard the north gate.", tools=definitions,
                  options=AgentOptions(retry=FAST_RETRY))
    game.agent = agent
    return agent


async def turn(agent: Agent, game: Game, prompt: str = "Open the north gate!", **kwargs: Any) -> Any:
    with anyio.fail_after(HANG_GUARD):
        return await agent.respond(prompt, emit=game, **kwargs)


def envelope(action: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"action": action, "arguments": arguments})


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_client_tool_round_in_envelope_mode(backends: ProxyBackends, server: ProviderServer, provider: str) -> None:
    call = envelope("open_gate", {"gate": "north"})
    server.push(
        stream(TEXT[provider](call[:20], call[20:])),  # decide: the envelope, in two deltas
        stream(TEXT[provider](envelope("respond", {}))),  # decide again: done with tools
        stream(TEXT[provider]("The north gate ", "is open.")),  # the reply
    )
    game = Game()
    agent = agent_on(backends, server, provider, game)
    result = await turn(agent, game)
    assert result.text == "The north gate is open."
    assert [(r.call.name, r.call.arguments, r.output.value) for r in result.tool_calls] == [
        ("open_gate", {"gate": "north"}, {"opened": "north"})]
    assert [s.kind.value for s in result.steps] == ["decide", "decide", "respond"]
    assert [type(e) for e in agent.history] == [PromptEntry, ToolUseEntry, ResponseEntry]
    assert all("tools" not in r.body for r in server.requests)  # envelope mode offers no native tools
    # Decide steps stop reading at their JSON (usage comes last); the reply's own counts arrive.
    assert result.usage.cached_input_tokens == 16


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_client_tool_round_in_native_mode(backends: ProxyBackends, server: ProviderServer, provider: str) -> None:
    server.push(
        stream(CALL[provider]("open_gate", {"gate": "north"})),  # decide: a native call
        stream(TEXT[provider]("I opened it for you.")),  # decide again: prose means respond
        stream(TEXT[provider]("The north gate ", "is open.")),
    )
    game = Game()
    agent = agent_on(backends, server, provider, game, native_tools=True)
    assert agent.model.capabilities.native_tool_calling
    result = await turn(agent, game)
    assert result.text == "The north gate is open."
    assert [(r.call.name, r.call.arguments) for r in result.tool_calls] == [("open_gate", {"gate": "north"})]
    offered = [("tools" in r.body) for r in server.requests]
    assert offered == [True, True, False]  # decide steps offer the tool natively, the reply does not


async def test_a_forced_tool_uses_the_providers_forced_choice(backends: ProxyBackends, server: ProviderServer) -> None:
    server.push(
        stream(CALL["anthropic"]("open_gate", {"gate": "east"})),
        stream(TEXT["anthropic"]("East gate open.")),
    )
    game = Game()
    agent = agent_on(backends, server, "anthropic", game, native_tools=True)
    result = await turn(agent, game, overrides=TurnOverrides(tool_choice=ToolChoice.parse({"tool": "open_gate"}),
                                                             max_tool_rounds=1))
    assert result.tool_calls[0].call.arguments == {"gate": "east"}
    assert server.requests[0].body["tool_choice"] == {"type": "tool", "name": "open_gate"}


async def test_a_structured_turn_with_response_format(backends: ProxyBackends, server: ProviderServer) -> None:
    server.push(stream(TEXT["openai"]('{"mood": ', '"calm"}')))
    game = Game()
    agent = agent_on(backends, server, "openai", game, tools=False, structured_output=True)
    schema = Schema.compile({"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]})
    result = await turn(agent, game, "How are you?", schema=schema)
    assert result.structured == {"mood": "calm"}
    assert server.requests[0].body["response_format"]["type"] == "json_schema"


# --- nothing partial is committed ------------------------------------------------------------


def broken_reply(provider: str) -> Reply:
    """A reply stream that delivers its first words, then the connection closes mid-body (a
    reset could discard the words still in flight; a close delivers them first)."""
    reply = stream(TEXT[provider]("The gate ", "stays ", "shut."), size=9, ending=CLOSE)
    reply.chunks = reply.chunks[: len(reply.chunks) * 3 // 4]
    return reply


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_reply_broken_mid_stream_commits_nothing(backends: ProxyBackends, server: ProviderServer, provider: str) -> None:
    server.push(broken_reply(provider), broken_reply(provider))  # both attempts of the step fail
    game = Game()
    agent = agent_on(backends, server, provider, game, tools=False)
    with pytest.raises(AgentError) as caught:
        await turn(agent, game, "Hello?")
    assert caught.value.code is ErrorCode.GENERATION_FAILED
    assert "broke mid-response" in caught.value.message
    shown = [e for e in game.events if isinstance(e, TextDelta)]
    assert shown and shown[0].text.startswith("The gate")  # partial text was streamed to the display …
    assert agent.history == []  # … and none of it was committed
    assert agent.transcript().entries == []


async def test_a_retried_reply_replaces_the_partial_text(backends: ProxyBackends, server: ProviderServer) -> None:
    server.push(broken_reply("openai"), stream(TEXT["openai"]("Welcome, ", "traveller.")))
    game = Game()
    agent = agent_on(backends, server, "openai", game, tools=False)
    result = await turn(agent, game, "Hello?")
    assert result.text == "Welcome, traveller."
    resets = [e for e in game.events if isinstance(e, TextDelta) and e.is_reset]
    assert resets and resets[0].text.startswith("Welcome")
    assert [e.text for e in agent.history if isinstance(e, ResponseEntry)] == ["Welcome, traveller."]


async def test_a_failed_turn_after_a_tool_round_leaves_the_history_as_it_was(
    backends: ProxyBackends, server: ProviderServer
) -> None:
    server.push(stream(TEXT["gemini"](envelope("respond", {}))), stream(TEXT["gemini"]("Hello there.")))
    game = Game()
    agent = agent_on(backends, server, "gemini", game)
    first = await turn(agent, game, "Hi")
    before = list(agent.history)
    server.push(stream(TEXT["gemini"](envelope("open_gate", {"gate": "north"}))), broken_reply("gemini"),
                broken_reply("gemini"))
    with pytest.raises(AgentError):
        await turn(agent, game)
    assert first.text == "Hello there."
    assert agent.history == before
