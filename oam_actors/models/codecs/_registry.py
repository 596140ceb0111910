"""Choosing a codec by protocol name, once, from configuration.

``codec_for("openai" | "anthropic" | "google", **options)`` builds that provider's
:class:`~._base.ProviderCodec`; ``options`` are the codec's keyword arguments (``affinity``,
``limits``, SSE bounds, and provider options such as OpenAI's ``path``). Any other name raises
:class:`~._errors.CodecError` (kind ``incompatible``, code ``invalid_request``).
"""

from __future__ import annotations

from typing import Any

from ._base import ProviderCodec
from ._errors import unsupported
from .anthropic import AnthropicCodec
from .google import GoogleCodec
from .openai import OpenAICodec

__all__ = ["PROTOCOLS", "codec_for"]

_CODECS: dict[str, type[ProviderCodec]] = {c.name: c for c in (OpenAICodec, AnthropicCodec, GoogleCodec)}

PROTOCOLS: tuple[str, ...] = tuple(_CODECS)
"""The protocol names :func:`codec_for` accepts."""


def codec_for(name: str, **options: Any) -> ProviderCodec:
    """The codec for protocol ``name``, configured with ``options``."""
    codec = _CODECS.get(name)
    if codec is None:
        raise unsupported(f"Unknown provider protocol: {name!r}", {"field": "protocol", "reason": "unknown"})
    return codec(**options)
