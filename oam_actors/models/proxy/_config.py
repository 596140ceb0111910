"""What a proxy backend is: provider, endpoint, model, where its key lives, timeouts, modes.

Pure values and parsers, no I/O (the key itself is read by the model, from the environment it is
given). Three sources make a :class:`ProxyConfig`:

- code: ``ProxyConfig(provider=Provider.OPENAI, base_url=…, model=…)``;
- a protocol ``model`` object: :func:`config_from_wire` (``{"type":"openai","baseUrl":…,
  "model":…}``); it may name ``apiKeyEnv`` but never carry a key;
- the command line: :func:`parse_model_spec` (``openai:http://127.0.0.1:8080/v1#qwen``).

Base URLs follow each provider's SDK: OpenAI's includes the version (``…/v1``), Anthropic's and
Gemini's are the bare host (the codec adds ``/v1/messages`` and ``/v1beta/models/…``).
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ...addresses import is_loopback
from ...errors import ProtocolError, invalid_params

__all__ = [
    "KEY_ENV_PATTERN",
    "Provider",
    "ProxyConfig",
    "check_base_url",
    "config_from_wire",
    "is_loopback",
    "parse_model_spec",
]


class Provider(enum.StrEnum):
    """A wire format family; the value is the protocol's ``model.type``."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    ANTIGRAVITY = "antigravity"

    @property
    def codec_name(self) -> str:
        """The :func:`~oam_actors.models.codecs.codec_for` name."""
        return "google" if self is Provider.GEMINI else self.value

    @property
    def default_base_url(self) -> str:
        return _DEFAULT_BASE_URLS[self]

    @property
    def default_key_envs(self) -> tuple[str, ...]:
        return _DEFAULT_KEY_ENVS[self]


_DEFAULT_BASE_URLS = {
    Provider.OPENAI: "https://api.openai.com/v1",
    Provider.ANTHROPIC: "https://api.anthropic.com",
    Provider.GEMINI: "https://generativelanguage.googleapis.com",
    Provider.ANTIGRAVITY: "https://cloudcode-pa.googleapis.com",
}
_DEFAULT_KEY_ENVS = {
    Provider.OPENAI: ("OPENAI_API_KEY",),
    Provider.ANTHROPIC: ("ANTHROPIC_API_KEY",),
    Provider.GEMINI: ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    Provider.ANTIGRAVITY: ("ANTIGRAVITY_ACCESS_TOKEN",),  # an OAuth access token, sent as Bearer
}

KEY_ENV_PATTERN = re.compile(r"[A-Z][A-Z0-9_]{0,63}_API_KEY")
"""Names ``apiKeyEnv`` may use: a protocol client can point at a key, never at other secrets."""


class ProxyConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One proxy backend. Holds no secret: ``api_key_env`` only names where the key is.

    Timeouts (seconds): ``connect_timeout`` to open a connection, ``read_timeout`` for the next
    bytes of a response (a hanging server), ``step_timeout`` for a whole model step.
    ``native_tools`` offers tools through the provider's tool calling (the default is the
    envelope loop, as on Nano); ``structured_output`` sends a structured step's schema as the
    provider's response format (OpenAI-compatible and Gemini only). ``project`` is Antigravity's
    Cloud project (else ``ANTIGRAVITY_PROJECT`` in the model's environment); like a key, it never
    comes from a protocol message.
    """

    provider: Provider
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    step_timeout: float = 300.0
    native_tools: bool = False
    structured_output: bool = False
    context_size: int = 8192
    max_output_tokens: int = 4096
    max_event_bytes: int = 262_144
    extra_headers: dict[str, str] = msgspec.field(default_factory=dict)
    project: str | None = None

    @property
    def url(self) -> str:
        """The base URL in use, without a trailing slash."""
        return (self.base_url or self.provider.default_base_url).rstrip("/")

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def key_envs(self) -> tuple[str, ...]:
        """The environment variables tried for the key, in order."""
        return (self.api_key_env,) if self.api_key_env else self.provider.default_key_envs

    @property
    def label(self) -> str:
        """``openai:gpt-4o-mini`` — for availability and messages (never a secret)."""
        return f"{self.provider.value}:{self.model}"

    @property
    def quota_key(self) -> str:
        """What identifies this backend's quota: provider, base URL, model and the variables the
        key is read from (never the key), plus Antigravity's project.
        ``openai:http://127.0.0.1:8080/v1#qwen@OPENAI_API_KEY``. Configs that differ only in
        per-session settings (tools mode, timeouts, budgets) share one quota."""
        project = f"/{self.project}" if self.project else ""
        return f"{self.provider.value}:{self.url}#{self.model}@{'|'.join(self.key_envs)}{project}"


# --- the protocol's model object -------------------------------------------------------------

_WIRE_KEYS = (
    "type", "model", "baseUrl", "apiKeyEnv", "nativeTools", "structuredOutput", "timeoutSeconds",
    "contextSize", "maxOutputTokens",
)  # fmt: skip
# Anything that looks like a credential is refused by name, so the answer can say why.
_SECRET_KEYS = frozenset({"apikey", "key", "token", "secret", "authorization", "headers", "password"})


def config_from_wire(value: dict[str, Any], path: str = "model") -> ProxyConfig:
    """A ``session/create`` ``model`` object → config; bad fields raise ``invalid_params``."""
    for key in value:
        if key.replace("_", "").replace("-", "").lower() in _SECRET_KEYS:
            raise invalid_params(
                f"Parameter '{path}.{key}' is not accepted: API keys never travel in protocol messages. "
                f"Name the server's environment variable with '{path}.apiKeyEnv'."
            )
        if key not in _WIRE_KEYS:
            raise invalid_params(f"Unknown parameter '{path}.{key}'; a proxy model takes {', '.join(_WIRE_KEYS)}.")
    provider = _provider(value.get("type"), f"{path}.type")
    fields: dict[str, Any] = {"provider": provider, "model": _model_name(value.get("model"), f"{path}.model")}
    if value.get("baseUrl") is not None:
        fields["base_url"] = check_base_url(value["baseUrl"], f"{path}.baseUrl")
    if value.get("apiKeyEnv") is not None:
        fields["api_key_env"] = _key_env(value["apiKeyEnv"], f"{path}.apiKeyEnv")
    for key, name in (("nativeTools", "native_tools"), ("structuredOutput", "structured_output")):
        if value.get(key) is not None:
            fields[name] = _boolean(value[key], f"{path}.{key}")
    if value.get("timeoutSeconds") is not None:
        fields["step_timeout"] = _positive(value["timeoutSeconds"], f"{path}.timeoutSeconds")
    for key, name in (("contextSize", "context_size"), ("maxOutputTokens", "max_output_tokens")):
        if value.get(key) is not None:
            fields[name] = _count(value[key], f"{path}.{key}")
    return ProxyConfig(**fields)


def check_base_url(value: Any, path: str) -> str:
    """An ``http``/``https`` URL with a host and no credentials or fragment."""
    if not isinstance(value, str) or not value:
        raise invalid_params(f"Parameter '{path}' must be a non-empty string.")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid_params(f"Parameter '{path}' must be an http or https URL with a host.")
    if parts.username or parts.password or parts.fragment or parts.query:
        raise invalid_params(f"Parameter '{path}' must not carry credentials, a query or a fragment.")
    return value.rstrip("/")


def _provider(value: Any, path: str) -> Provider:
    try:
        return Provider(value)
    except ValueError:
        raise invalid_params(f"Parameter '{path}' must be one of {', '.join(Provider)}.") from None


def _model_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        raise invalid_params(f"Parameter '{path}' must be a model name (1-256 characters).")
    return value


def _key_env(value: Any, path: str) -> str:
    if not isinstance(value, str) or not KEY_ENV_PATTERN.fullmatch(value):
        raise invalid_params(f"Parameter '{path}' must be an environment variable name ending in _API_KEY.")
    return value


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise invalid_params(f"Parameter '{path}' must be a boolean.")
    return value


def _positive(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise invalid_params(f"Parameter '{path}' must be a number > 0.")
    return float(value)


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_params(f"Parameter '{path}' must be an integer >= 1.")
    return value


# --- the command line ------------------------------------------------------------------------


def parse_model_spec(spec: str, *, base_url: str | None = None, model: str | None = None) -> ProxyConfig | None:
    """``PROVIDER[:BASE_URL][#MODEL]`` → config, or None when ``spec`` names no provider.

    ``base_url`` / ``model`` (from ``--base-url`` / ``--model-name``) fill what the spec leaves
    out. Raises ``ValueError`` with a readable message for a bad spec.
    """
    head, _, name = spec.partition("#")
    provider_name, _, url = head.partition(":")
    try:
        provider = Provider(provider_name)
    except ValueError:
        return None
    url = url or base_url or ""
    name = name or model or ""
    if not name:
        raise ValueError(f"{spec!r} names no model: write {provider_name}#MODEL or give --model-name")
    fields: dict[str, Any] = {"provider": provider, "model": name}
    if url:
        try:
            fields["base_url"] = check_base_url(url, "BASE_URL")
        except ProtocolError as exc:
            raise ValueError(f"{spec!r}: {exc.message}") from None
    return ProxyConfig(**fields)
