"""The proxy backends of one server: one pooled httpx client, the hosts a protocol client may
name, one quota scheduler per backend, and the ``model_types`` factories the bridge registers.

A protocol client chooses ``baseUrl``, so the server decides where that may lead: the providers'
own hosts, loopback, and the hosts the operator allows (``--proxy-allow-host``). Anything else is
``-32602`` before a byte is sent, which keeps keys from being sent to a host of the client's
choosing. With ``refuse_private`` (a server listening beyond loopback) loopback goes too: a host
the operator did not allow must resolve to public addresses only, and is connected to at the
address checked (:mod:`oam_actors.models.address_guard`), so the server cannot be used to reach
its own or its private network's services.

**One quota per backend.** :meth:`ProxyBackends.shared` (what sessions that name a proxy get, and
the proxy system model) is a :class:`SharedProxyModel`: the config's model behind the one
:class:`~oam_actors.models.scheduler.QuotaScheduler` of its :attr:`~ProxyConfig.quota_key`
(provider, base URL, model, key variable), made on first use. Every session naming that backend,
whatever its own settings (tools mode, timeouts), queues there; the scheduler starts from the
operator's ``limits`` (``--rpm``, ``--tpm``, ``--max-concurrency``) and learns the rest from the
provider's headers and 429s.

On a runtime that moves actors (``RaySystem``) a :class:`SharedProxyModel` is *hosted*
(``runtime.register_hosted``): one named model actor per quota key for the whole cluster, every
front door and shard using the same one, built there as ``ProxyBackends(limits=…)``; each holder
sends its own config with its steps (the hosting's ``variant``, served by :meth:`for_variant`).
The key is read from the model actor's environment.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import httpx
import msgspec

from ...agent.model import DelegatingModel, GenerationRequest, LanguageModel
from ...errors import invalid_params
from ...runtime import Hosting, register_hosted
from ..address_guard import AddressGuard
from ..scheduler import QuotaLimits, QuotaScheduler, QuotaState
from ._config import Provider, ProxyConfig, config_from_wire, is_loopback
from ._model import ProxyModel, new_client
from ._quota import RateLimitHook, RateLimitReport, scheduler_hook

if TYPE_CHECKING:
    from ..coalesce import CoalesceSettings
    from ..pool import ScheduledModel

__all__ = ["ProxyBackends", "SharedProxyModel"]

_SHARED_KEPT = 256  # models kept per backends object, by config (most recently used)

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
        limits: QuotaLimits | None = None,
        queue_seconds: tuple[float, float, float] | None = None,
        refuse_private: bool = False,
    ) -> None:
        self._explicit = {h.lower() for h in allowed_hosts}  # the operator's: never address-checked
        self._guard = AddressGuard(self._explicit, allow_flag="--proxy-allow-host") if refuse_private else None
        self._environ = environ
        if client is None:
            client = new_client() if self._guard is None else new_client(guard=self._guard)
        self._client = client
        self._on_rate_limit = on_rate_limit
        self.limits = limits if limits is not None else QuotaLimits()
        """Where each backend's scheduler starts (the operator's stated limits)."""
        self.queue_seconds = queue_seconds
        """How long a shared model's step may queue, by priority (``None``: the defaults)."""
        self._schedulers: dict[str, QuotaScheduler] = {}
        self._shared: collections.OrderedDict[bytes, SharedProxyModel] = collections.OrderedDict()

    def allow_host(self, host: str) -> None:
        """Let protocol clients name ``host`` in ``baseUrl`` (whatever its addresses)."""
        self._explicit.add(host.lower())

    def model(self, config: ProxyConfig) -> ProxyModel:
        """A model on the shared client (no host check: the operator's own configuration)."""
        return ProxyModel(config, client=self._client, environ=self._environ, on_rate_limit=self._on_rate_limit)

    def scheduler(self, quota_key: str, limits: QuotaLimits | None = None) -> QuotaScheduler:
        """The scheduler of the quota ``quota_key`` (made on first use, from ``limits`` or
        these backends')."""
        scheduler = self._schedulers.get(quota_key)
        if scheduler is None:
            scheduler = self._schedulers[quota_key] = QuotaScheduler(limits or self.limits)
        return scheduler

    def shared(self, config: ProxyConfig, queue_seconds: tuple[float, float, float] | None = None,
               coalesce: CoalesceSettings | None = None, limits: QuotaLimits | None = None) -> SharedProxyModel:
        """``config``'s model behind its quota's scheduler, its steps queueing at most
        ``queue_seconds`` by priority (default: these backends'), and with ``coalesce`` its
        combinable steps answered together (one coalescer per config, as the steps that meet
        there share one prompt format); ``limits`` are where its scheduler starts when this
        backend's are stated apart (a route file's). No host check: see :meth:`from_wire`."""
        queue_seconds = queue_seconds or self.queue_seconds
        limits = limits or self.limits
        key = msgspec.json.encode((config, queue_seconds, coalesce, limits))
        model = self._shared.get(key)
        if model is None:
            from ..pool import ScheduledModel  # loaded with the first proxy model

            scheduler = self.scheduler(config.quota_key, limits)
            proxy = self.model(config)
            proxy.on_rate_limit = _both(scheduler_hook(scheduler), self._on_rate_limit)
            queue = {} if queue_seconds is None else {"queue_seconds": queue_seconds}
            model = SharedProxyModel(ScheduledModel(proxy, scheduler, **queue), limits, queue_seconds, coalesce)
            if self._guard is not None:  # a model actor hosting it pins its connections the same way
                model.guard_exempt = tuple(sorted(self._explicit))
            self._shared[key] = model
            if len(self._shared) > _SHARED_KEPT:
                self._shared.popitem(last=False)
        self._shared.move_to_end(key)
        return model

    def quota_state(self) -> dict[str, QuotaState]:
        """Each backend's scheduler state, by quota key (``models.SupportsQuotaState``)."""
        return {key: scheduler.quota_state() for key, scheduler in self._schedulers.items()}

    def restore_quota_state(self, states: dict[str, QuotaState]) -> None:
        """Go on from ``states``, before any model of these backends has run a step."""
        for key, state in states.items():
            self.scheduler(key).restore_quota_state(state)

    def for_variant(self, variant: tuple[ProxyConfig, tuple[float, float, float] | None, CoalesceSettings | None]
                    ) -> SharedProxyModel:
        """What a model actor hosting these backends serves a holder's config, queue times and
        coalescing with."""
        return self.shared(*variant)

    def from_wire(self, value: dict[str, Any], path: str = "model") -> SharedProxyModel:
        """A model for a ``session/create`` ``model`` object; raises ``invalid_params``. No
        address check: see :meth:`check_wire`."""
        return self.shared(self._allowed_config(value, path))

    async def check_wire(self, value: dict[str, Any], path: str = "model") -> None:
        """With ``refuse_private``: a host the operator did not allow must resolve to public
        addresses only (``invalid_params`` naming ``<path>.baseUrl``)."""
        if self._guard is not None:
            await self._guard.check(self._allowed_config(value, path).url, f"{path}.baseUrl")

    def _allowed_config(self, value: dict[str, Any], path: str) -> ProxyConfig:
        config = config_from_wire(value, path)
        host = config.host.lower()
        if not (is_loopback(host) or host in self._explicit or host in _PROVIDER_HOSTS):
            raise invalid_params(
                f"Parameter '{path}.baseUrl' names host '{host}', which this server does not allow "
                "(allowed: the providers' own hosts, loopback, and hosts given with --proxy-allow-host)."
            )
        return config

    def model_types(self) -> dict[str, Callable[[dict[str, Any], str], SharedProxyModel]]:
        """``BridgeConfig.model_types`` entries: ``openai``, ``anthropic``, ``gemini``."""
        return {provider.value: self.from_wire for provider in Provider}

    def model_checks(self) -> dict[str, Callable[[dict[str, Any], str], Awaitable[None]]]:
        """``BridgeConfig.model_checks`` entries: the providers with ``refuse_private``, else none."""
        return {} if self._guard is None else {provider.value: self.check_wire for provider in Provider}

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class SharedProxyModel(DelegatingModel):
    """A proxy model whose steps queue in its backend's one scheduler (see the module docstring).

    The :class:`~oam_actors.agent.LanguageModel` of :meth:`ProxyBackends.shared`: the scheduled
    model, coalesced when ``coalesce`` is given; ``statistics()`` is the shared scheduler's.
    """

    def __init__(self, scheduled: ScheduledModel, limits: QuotaLimits,
                 queue_seconds: tuple[float, float, float] | None = None,
                 coalesce: CoalesceSettings | None = None) -> None:
        served: LanguageModel = scheduled
        if coalesce is not None:
            from ..coalesce import CoalescingModel

            served = CoalescingModel(scheduled, coalesce)
        super().__init__(served)
        self.scheduled = scheduled
        self.limits = limits
        self.queue_seconds = queue_seconds
        self.coalesce = coalesce
        self.config: ProxyConfig = scheduled.model.config  # type: ignore[attr-defined]
        self.guard_exempt: tuple[str, ...] | None = None
        """With address checks (``refuse_private``): the hosts exempt from them."""

    @property
    def scheduler(self) -> QuotaScheduler:
        return self.scheduled.scheduler

    def admission_wait(self, request: GenerationRequest) -> float:
        """Its scheduler's wait for quota (:class:`~oam_actors.models.SupportsAdmissionWait`)."""
        return self.scheduled.admission_wait(request)

    async def statistics(self) -> msgspec.Struct | None:
        """The scheduler's record (:class:`~oam_actors.models.scheduler.PolicyStatistics`)."""
        return await self._model.statistics()  # type: ignore[attr-defined, no-any-return]

    def __repr__(self) -> str:
        return f"SharedProxyModel({self.config.quota_key!r})"


def _both(first: RateLimitHook, second: RateLimitHook | None) -> RateLimitHook:
    if second is None:
        return first

    def feed(report: RateLimitReport) -> None:
        first(report)
        second(report)

    return feed


def _hosting(model: SharedProxyModel) -> Hosting:
    # One model actor per quota key; it builds its own backends with the same starting limits.
    guarded = {} if model.guard_exempt is None else {"allowed_hosts": model.guard_exempt, "refuse_private": True}
    return Hosting(
        name=f"proxy:{model.config.quota_key}",
        factory=functools.partial(ProxyBackends, limits=model.limits, **guarded),
        variant=(model.config, model.queue_seconds, model.coalesce),
        info=model.capabilities,
    )


register_hosted(SharedProxyModel, _hosting)
