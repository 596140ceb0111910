"""Proxy backends: OpenAI-compatible chat completions, Anthropic Messages and Gemini
GenerateContent behind the agent's :class:`~oam_actors.agent.LanguageModel`, over httpx.

Contract:

- :class:`ProxyModel` streams each agent step (SSE), with connection pooling and timeouts
  (connect, read, whole step). Failures are :class:`~oam_actors.errors.AgentError`: 429 →
  ``rate_limited`` with ``retryAfter`` (``retry-after`` or the rate-limit headers), context
  overflow → ``context_size_exceeded``, safety blocks → ``guardrail_violation``, 401/403/404 →
  ``model_unavailable``, other 4xx → ``invalid_request``; truncated or malformed streams, oversize
  events, resets, 5xx and timeouts → ``generation_failed`` (retried per step by the agent).
- Tools go through the envelope loop by default, as on Nano; ``native_tools`` uses the provider's
  tool calling and turns calls back into envelopes (``capabilities.native_tool_calling``).
- Keys come only from the environment variable the config names (defaults ``OPENAI_API_KEY``,
  ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``); a protocol ``model`` object
  may name ``apiKeyEnv`` and is refused if it carries a key.
- Rate-limit headers: ``ProxyModel.last_rate_limit`` and the ``on_rate_limit`` hook
  (:func:`scheduler_hook` feeds a :class:`~oam_actors.models.scheduler.QuotaScheduler`).
- :class:`ProxyBackends` owns the one shared client of a server and gives the bridge its
  ``model_types`` (``openai``, ``anthropic``, ``gemini``), checking ``baseUrl`` hosts; every model
  it shares (:class:`SharedProxyModel`) queues in the one scheduler of its backend's quota, on Ray
  one named model actor per quota for the whole cluster.

Shapes of the protocol object and the command line: ``protocol/PROTOCOL.md`` ("Backends").
"""

from ._backends import ProxyBackends, SharedProxyModel
from ._config import KEY_ENV_PATTERN, Provider, ProxyConfig, config_from_wire, is_loopback, parse_model_spec
from ._model import ProxyModel, new_client
from ._quota import RateLimitHook, RateLimitReport, scheduler_hook
from ._translate import StepReader, to_provider_request

__all__ = [
    "KEY_ENV_PATTERN",
    "Provider",
    "ProxyBackends",
    "ProxyConfig",
    "ProxyModel",
    "RateLimitHook",
    "RateLimitReport",
    "SharedProxyModel",
    "StepReader",
    "config_from_wire",
    "is_loopback",
    "new_client",
    "parse_model_spec",
    "scheduler_hook",
    "to_provider_request",
]
