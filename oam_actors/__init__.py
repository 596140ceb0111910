"""oam-actors: an actor-model runtime for the bridge protocol v1.0.

The names below are the whole public API for a program that embeds oam-actors; everything else
is reachable from its subpackage but may change. ``import oam_actors`` does not import Ray:
:class:`RaySystem` is loaded on first use.

::

    from oam_actors import Agent, ScriptedModel, ScriptStep

    agent = Agent(ScriptedModel([ScriptStep.say("Halt! Who goes there?")]))
    result = await agent.respond("Let me through.")

A program that talks to a server (``oam-actors serve`` or ``stdio``) uses :func:`connect` and
the rest of :mod:`oam_actors.client`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .agent import (
    Agent,
    AgentOptions,
    Availability,
    ErrorOutput,
    EventSink,
    GenerationRequest,
    JsonOutput,
    LanguageModel,
    ModelCapabilities,
    RetryPolicy,
    Sampling,
    Schema,
    StepKind,
    TextOutput,
    ToolCall,
    ToolCallRecord,
    ToolChoice,
    ToolChoiceKind,
    ToolDefinition,
    ToolOutput,
    Transcript,
    TurnEvent,
    TurnOverrides,
    TurnResult,
    Usage,
)
from .bridge import Bridge, BridgeConfig, Call, Deferred, Extension, ModelStatusExtension
from .client import (
    AuthenticationFailed,
    Client,
    ClientError,
    ConnectError,
    ConnectionLost,
    MalformedMessage,
    RequestTimeout,
    UnexpectedResult,
    connect,
)
from .clock import Clock, ManualClock, MonotonicClock
from .errors import AgentError, ErrorCode, OamError, ProtocolError
from .game_methods import GameExtension, GameLimits
from .models import ScriptCall, ScriptedModel, ScriptStep, ScriptStyle
from .runtime import Actor, ActorRef, ActorSystem, Address, LocalSystem

if TYPE_CHECKING:
    from .cluster import RaySystem


__all__ = [
    "Actor",
    "ActorRef",
    "ActorSystem",
    "Address",
    "Agent",
    "AgentError",
    "AgentOptions",
    "AuthenticationFailed",
    "Availability",
    "Bridge",
    "BridgeConfig",
    "Call",
    "Client",
    "ClientError",
    "Clock",
    "ConnectError",
    "ConnectionLost",
    "Deferred",
    "ErrorCode",
    "ErrorOutput",
    "EventSink",
    "Extension",
    "GameExtension",
    "GameLimits",
    "GenerationRequest",
    "JsonOutput",
    "LanguageModel",
    "LocalSystem",
    "MalformedMessage",
    "ManualClock",
    "ModelCapabilities",
    "ModelStatusExtension",
    "MonotonicClock",
    "OamError",
    "ProtocolError",
    "RaySystem",
    "RequestTimeout",
    "RetryPolicy",
    "Sampling",
    "Schema",
    "ScriptCall",
    "ScriptStep",
    "ScriptStyle",
    "ScriptedModel",
    "StepKind",
    "TextOutput",
    "ToolCall",
    "ToolCallRecord",
    "ToolChoice",
    "ToolChoiceKind",
    "ToolDefinition",
    "ToolOutput",
    "Transcript",
    "TurnEvent",
    "TurnOverrides",
    "TurnResult",
    "UnexpectedResult",
    "Usage",
    "connect",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # Ray is heavy and optional at run time: only a program that asks for RaySystem pays for it.
    if name == "RaySystem":
        from .cluster import RaySystem

        return RaySystem
    raise AttributeError(f"module 'oam_actors' has no attribute {name!r}")
