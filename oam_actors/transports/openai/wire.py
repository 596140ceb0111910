"""The OpenAI Chat Completions wire shapes the front door reads and writes (msgspec Structs).

Requests decode in one step with :data:`REQUEST_DECODER`; a wrong type or value fails with a
``msgspec.ValidationError`` whose path (``$.messages[1].content``) becomes the error's ``param``.
Fields the OpenAI API defines but this server cannot honour are decoded loosely and refused by
:mod:`.translate` with a message naming them; fields it does not define are ignored (see
``protocol/OPENAI.md``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

__all__ = [
    "AssistantMessage",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatRequest",
    "Choice",
    "ChunkChoice",
    "Delta",
    "DeltaToolCall",
    "DeveloperMessage",
    "ErrorBody",
    "ErrorDetail",
    "FunctionCall",
    "FunctionDefinition",
    "ImagePart",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "Message",
    "ModelCard",
    "ModelList",
    "NamedToolChoice",
    "OutputMessage",
    "OutputToolCall",
    "REQUEST_DECODER",
    "RefusalPart",
    "StreamOptions",
    "SystemMessage",
    "TextFormat",
    "TextPart",
    "Tool",
    "ToolMessage",
    "UsageOut",
    "UserMessage",
]

# --- content parts ------------------------------------------------------------------------------


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ImagePart(msgspec.Struct, tag="image_url", tag_field="type"):
    image_url: Any = None


class AudioPart(msgspec.Struct, tag="input_audio", tag_field="type"):
    input_audio: Any = None


class FilePart(msgspec.Struct, tag="file", tag_field="type"):
    file: Any = None


class RefusalPart(msgspec.Struct, tag="refusal", tag_field="type"):
    refusal: str


ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart
Content = str | list[ContentPart] | None

# --- messages -----------------------------------------------------------------------------------


class FunctionCall(msgspec.Struct):
    name: str
    arguments: str


class InputToolCall(msgspec.Struct, tag="function", tag_field="type"):
    id: str
    function: FunctionCall


class SystemMessage(msgspec.Struct, tag="system", tag_field="role"):
    content: Content = None
    name: str | None = None


class DeveloperMessage(msgspec.Struct, tag="developer", tag_field="role"):
    content: Content = None
    name: str | None = None


class UserMessage(msgspec.Struct, tag="user", tag_field="role"):
    content: Content = None
    name: str | None = None


class AssistantMessage(msgspec.Struct, tag="assistant", tag_field="role"):
    content: Content = None
    tool_calls: list[InputToolCall] | None = None
    refusal: str | None = None
    name: str | None = None


class ToolMessage(msgspec.Struct, tag="tool", tag_field="role"):
    tool_call_id: str
    content: Content = None


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage

# --- tools and formats --------------------------------------------------------------------------


class FunctionDefinition(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: Any = None
    strict: bool | None = None


class Tool(msgspec.Struct, tag="function", tag_field="type"):
    function: FunctionDefinition


class FunctionName(msgspec.Struct):
    name: str


class NamedToolChoice(msgspec.Struct, tag="function", tag_field="type"):
    function: FunctionName


class JsonSchemaSpec(msgspec.Struct):
    name: str
    schema: Any = None
    description: str | None = None
    strict: bool | None = None


class TextFormat(msgspec.Struct, tag="text", tag_field="type"):
    pass


class JsonObjectFormat(msgspec.Struct, tag="json_object", tag_field="type"):
    pass


class JsonSchemaFormat(msgspec.Struct, tag="json_schema", tag_field="type"):
    json_schema: JsonSchemaSpec


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


# --- the request --------------------------------------------------------------------------------

Probability = Annotated[float, Meta(ge=0, le=1)]


class ChatRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/chat/completions``; unknown members are ignored."""

    model: str
    messages: list[Message]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: TextFormat | JsonObjectFormat | JsonSchemaFormat | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Probability | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    n: Annotated[int, Meta(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    modalities: list[str] | None = None
    audio: Any = None
    functions: Any = None
    function_call: Any = None
    # oam-actors: the steps of the "scripted" model (the bridge's inline scripted model).
    script: Any = None


REQUEST_DECODER = msgspec.json.Decoder(ChatRequest)

# --- responses ----------------------------------------------------------------------------------


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int = 0


class UsageOut(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = msgspec.field(default_factory=PromptTokensDetails)


class OutputToolCall(msgspec.Struct):
    id: str
    function: FunctionCall
    type: str = "function"


class OutputMessage(msgspec.Struct):
    role: str
    content: str | None
    tool_calls: list[OutputToolCall] | UnsetType = UNSET  # UNSET is never encoded
    refusal: None = None


class Choice(msgspec.Struct):
    index: int
    message: OutputMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: UsageOut
    object: str = "chat.completion"
    system_fingerprint: str | None = None


class DeltaFunction(msgspec.Struct):
    arguments: str
    name: str | UnsetType = UNSET


class DeltaToolCall(msgspec.Struct):
    index: int
    function: DeltaFunction
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET


class Delta(msgspec.Struct):
    role: str | UnsetType = UNSET
    content: str | None | UnsetType = UNSET
    tool_calls: list[DeltaToolCall] | UnsetType = UNSET


class ChunkChoice(msgspec.Struct):
    delta: Delta
    index: int = 0
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(msgspec.Struct):
    """One SSE ``data:`` object; ``usage`` is ``null`` on every chunk but the last when the client
    asked for it (``stream_options.include_usage``), absent otherwise."""

    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    object: str = "chat.completion.chunk"
    system_fingerprint: None = None
    usage: UsageOut | None | UnsetType = UNSET


class ModelCard(msgspec.Struct):
    id: str
    created: int = 0
    object: str = "model"
    owned_by: str = "oam-actors"


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"


class ErrorDetail(msgspec.Struct):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorDetail
