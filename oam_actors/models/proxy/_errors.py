"""Provider, codec and transport failures → :class:`~oam_actors.errors.AgentError`, once, here.

::

    ProviderError (HTTP status / in-stream error)  → the codec's code, a sentence naming the cause
    CodecError (bad bytes, truncated, oversize)     → generation_failed (retried per step)
    httpx.ConnectError                              → model_unavailable (nothing listens there)
    timeouts (httpx's, or the step deadline)        → generation_failed, "did not answer within …"
    other httpx errors (reset, broken chunking)     → generation_failed, "connection broke"

Messages are our own sentences: they name the provider, host, model, HTTP status and the key's
*variable*, never a provider's message text (it may echo prompts) and never a key.
"""

from __future__ import annotations

import re

import httpx

from ...errors import AgentError, ErrorCode, seconds_text
from ..codecs import CodecError, ProviderError
from ._config import ProxyConfig

__all__ = ["codec_failure", "provider_failure", "timeout_failure", "transport_failure"]

_TITLES = {"openai": "OpenAI", "anthropic": "Anthropic", "gemini": "Gemini", "antigravity": "Antigravity"}
_SAFE_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _who(config: ProxyConfig) -> str:
    return f"{_TITLES[config.provider.value]} ({config.host})"


def provider_failure(error: ProviderError, config: ProxyConfig, *, key_sent: bool) -> AgentError:
    """The provider said no: an HTTP error status or an error object in the stream."""
    status = error.http_status
    where = f" (HTTP {status})" if status is not None else _in_stream(error.provider_code)
    message = _sentence(error.error_code, status, config, key_sent) + where + "."
    return AgentError(error.error_code, message, retry_after=error.retry_after)


def _sentence(code: ErrorCode, status: int | None, config: ProxyConfig, key_sent: bool) -> str:
    who = _who(config)
    if status == 401:
        if not key_sent:
            return f"{who} wants an API key and none was sent: set {' or '.join(config.key_envs)} on the server"
        return f"{who} rejected the API key from {' or '.join(config.key_envs)}"
    if status == 403:
        return f"{who} refused access to model '{config.model}'"
    if status == 404:
        return f"{who} has no model '{config.model}' or no such endpoint at {config.url}"
    return {
        ErrorCode.RATE_LIMITED: f"{who} rate limit reached",
        ErrorCode.CONTEXT_SIZE_EXCEEDED: f"The prompt is longer than model '{config.model}' of {who} accepts",
        ErrorCode.GUARDRAIL_VIOLATION: f"{who} blocked the request by its safety policy",
        ErrorCode.REFUSAL: f"Model '{config.model}' of {who} refused to answer",
        ErrorCode.BUSY: f"{who} is overloaded",
        ErrorCode.MODEL_UNAVAILABLE: f"Model '{config.model}' of {who} is not available",
        ErrorCode.INVALID_REQUEST: f"{who} rejected the request as invalid",
    }.get(code, f"{who} failed to answer")


def _in_stream(provider_code: str | None) -> str:
    if provider_code and _SAFE_CODE.fullmatch(provider_code):
        return f" (in the stream: {provider_code})"
    return " (in the stream)"


def codec_failure(error: CodecError, config: ProxyConfig) -> AgentError:
    """Bytes that break the provider's format, a truncated stream, an oversize event, a request
    the provider cannot express. The codec's messages are safe text."""
    return AgentError(error.error_code, f"{_who(config)}: {error.message}.")


def transport_failure(error: httpx.HTTPError, config: ProxyConfig) -> AgentError:
    if isinstance(error, httpx.TimeoutException):
        return timeout_failure(config, connect=isinstance(error, httpx.ConnectTimeout | httpx.PoolTimeout))
    if isinstance(error, httpx.ConnectError):
        return AgentError(ErrorCode.MODEL_UNAVAILABLE, f"Cannot connect to {_who(config)} at {config.url}.")
    return AgentError(ErrorCode.GENERATION_FAILED, f"The connection to {_who(config)} broke mid-response.")


def timeout_failure(config: ProxyConfig, *, connect: bool = False, step: bool = False) -> AgentError:
    if connect:
        limit, what = config.connect_timeout, "accept a connection"
    elif step:
        limit, what = config.step_timeout, "finish the step"
    else:
        limit, what = config.read_timeout, "answer"
    return AgentError(ErrorCode.GENERATION_FAILED, f"{_who(config)} did not {what} within {seconds_text(limit)}.")
