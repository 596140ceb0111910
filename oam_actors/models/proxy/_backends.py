"""The proxy backends of one server: one pooled httpx client, the hosts a protocol client may
name, and the ``model_types`` factories the bridge registers.

A protocol client chooses ``baseUrl``, so the server decides where that may lead: the providers'
own hosts, loopback, and the hosts the operator allows (``--proxy-allow-host``). Anything else is
``-32602`` before a byte is sent, which keeps keys from being sent to a host of the client's
choosing and the server from being used to reach its private network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from ...errors import invalid_params
from ._config import Provider, ProxyConfig, config_from_wire, is_loopback
from ._model import ProxyModel, new_client
from ._quota import RateLimitHook

__all__ = ["ProxyBackends"]

_PROVIDER_HOSTS = frozenset(ProxyConfig(provider=p, model="-").host for p in Provider)


class ProxyBackends:
    """Makes :class:`ProxyModel` instances that share one client; closes it on :meth:`aclose`.

    Use as ``async with ProxyBackends(…) as backends:`` around everything that streams from its
    models; a model used after that fails with ``generation_failed``.
    """

    def __init__(
        self,
        *,
        allowed_hosts: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        on_rate_limit: RateLimitHook | None = None,
    ) -> None:
        self._allowed = {h.lower() for h in allowed_hosts} | _PROVIDER_HOSTS
        self._environ = environ
        self._client = client if client is not None else new_client()
        self._on_rate_limit = on_rate_limit

    def allow_host(self, host: str) -> None:
        """Let protocol clients name ``host`` in ``baseUrl``."""
        self._allowed.add(host.lower())

    def model(self, config: ProxyConfig) -> ProxyModel:
        """A model on the shared client (no host check: the operator's own configuration)."""
        return ProxyModel(config, client=self._client, environ=self._environ, on_rate_limit=self._on_rate_limit)

    def from_wire(self, value: dict[str, Any], path: str = "model") -> ProxyModel:
        """A model for a ``session/create`` ``model`` object; raises ``invalid_params``."""
        config = config_from_wire(value, path)
        host = config.host.lower()
        if not (is_loopback(host) or host in self._allowed):
            raise invalid_params(
                f"Parameter '{path}.baseUrl' names host '{host}', which this server does not allow "
                "(allowed: the providers' own hosts, loopback, and hosts given with --proxy-allow-host)."
            )
        return self.model(config)

    def model_types(self) -> dict[str, Callable[[dict[str, Any], str], ProxyModel]]:
        """``BridgeConfig.model_types`` entries: ``openai``, ``anthropic``, ``gemini``."""
        return {provider.value: self.from_wire for provider in Provider}

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
