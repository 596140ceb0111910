"""Pure provider codecs: OpenAI Chat Completions, Anthropic Messages, Gemini GenerateContent.

Bytes in, canonical values out; no sockets, no httpx, no clocks except the optional ``now`` of
retry-after parsing. A host picks a codec once (:func:`codec_for`), and per request calls
``encode_request`` → (HTTP) → ``decode_response`` / ``decode_error``, or ``new_stream`` and feeds
the body's chunks to the :class:`StreamDecoder`; :func:`assemble` turns the events into a
:class:`Response`. Every failure is a :class:`CodecError` (provider-reported ones a
:class:`ProviderError`) whose ``error_code`` is the protocol code and whose ``to_agent_error()``
is what the agent raises. Lossy conversions and unsupported content are errors, never silently
dropped.

Reference: ``shared/reference/provider-codecs.md`` (Backplane.AiProtocol); each provider
module's docstring lists where this implementation decides differently.
"""

from . import antigravity
from ._base import EncodedRequest, ProviderCodec
from ._canonical import (
    Affinity,
    BlockEvent,
    ContentBlock,
    Image,
    Message,
    ProviderState,
    ProviderStateEvent,
    Reasoning,
    ReasoningDelta,
    Request,
    Response,
    Role,
    StopReason,
    StreamEvent,
    Terminal,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    ToolDefinition,
    ToolStatus,
    Usage,
    UsageEvent,
)
from ._errors import CodecError, ErrorKind, Outcome, ProviderError, Stage, error_code_for
from ._ratelimit import RateLimitInfo, RateLimitWindow, parse_rate_limit_headers, retry_after_from_headers
from ._registry import PROTOCOLS, codec_for
from ._sse import SseFrame, SseParser
from ._stream import StreamDecoder, assemble
from ._validate import Limits, check_bounds, validate_request
from .anthropic import AnthropicCodec
from .google import GoogleCodec
from .openai import OpenAICodec

__all__ = [
    "PROTOCOLS",
    "Affinity",
    "AnthropicCodec",
    "BlockEvent",
    "CodecError",
    "ContentBlock",
    "EncodedRequest",
    "ErrorKind",
    "GoogleCodec",
    "Image",
    "Limits",
    "Message",
    "OpenAICodec",
    "Outcome",
    "ProviderCodec",
    "ProviderError",
    "ProviderState",
    "ProviderStateEvent",
    "RateLimitInfo",
    "RateLimitWindow",
    "Reasoning",
    "ReasoningDelta",
    "Request",
    "Response",
    "Role",
    "SseFrame",
    "SseParser",
    "Stage",
    "StopReason",
    "StreamDecoder",
    "StreamEvent",
    "Terminal",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDone",
    "ToolCallStart",
    "ToolDefinition",
    "ToolStatus",
    "Usage",
    "UsageEvent",
    "antigravity",
    "assemble",
    "check_bounds",
    "codec_for",
    "error_code_for",
    "parse_rate_limit_headers",
    "retry_after_from_headers",
    "validate_request",
]
