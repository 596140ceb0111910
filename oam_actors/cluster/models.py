"""Model actors: one named Ray actor per shared backend, used by every shard and connection.

A device pool or a proxy's API key is one quota. Hosted once per cluster as a named, detached
Ray actor (:func:`host_model`), every session and NPC on every shard and every driver reaches
the same instance (and the same :class:`~oam_actors.models.scheduler.QuotaScheduler` inside
it), so the quota is enforced once for the whole cluster. Scripted models need none of this:
they stay inside the shard with their session.

- ``host_model(name, factory)`` starts the actor ``oam-model:<name>`` (or finds the one already
  running) and returns a :class:`RemoteModel`. ``factory`` runs inside the actor and must pickle
  (a module-level function or a ``functools.partial`` of one); if it returns an async context
  manager (a ``DevicePool``, or one yielding the model), that is entered there for the actor's
  lifetime and the model is what entering it returns. A factory that fails fails ``host_model``
  with its error (the actor stays: stop it).
- :class:`RemoteModel` is a :class:`~oam_actors.agent.LanguageModel` that pickles as its name,
  so sessions carrying it move to shards freely. ``stream`` relays the hosted model's pieces
  (Ray streaming generator); closing it early cancels the remote generation; the hosted model's
  ``AgentError`` is raised as is.
- :func:`stop_model` ends the actor. Detached actors outlive drivers: stop what you host;
  :func:`model_running` tells whether one is hosted already.
- :class:`ClusterModel` does all three for a server's system model: ``async with
  ClusterModel(name, factory)`` hosts it (or joins the one running), ``model()`` is the bridge's
  system model factory, and leaving stops the actor only if this one started it. A model that
  does not start raises :class:`~oam_actors.models.errors.ModelHostError`, chained from the
  factory's (or Ray's) error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Self, cast

import anyio
import anyio.to_thread
import msgspec
import ray

from ..agent import Availability, GenerationRequest, LanguageModel, ModelCapabilities, Usage
from ..models import SupportsStatistics
from ..models.errors import ModelHostError
from .wire import Failure

__all__ = [
    "MODEL_NAMESPACE",
    "ClusterModel",
    "ModelHost",
    "RemoteModel",
    "host_model",
    "model_running",
    "stop_model",
]

MODEL_NAMESPACE = "oam-actors"
"""The Ray namespace of model actors: shared by every driver that uses it."""


def _actor_name(name: str) -> str:
    return f"oam-model:{name}"


class ModelHost:
    """The body of a model actor: the model ``factory`` builds, behind three calls."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._model: LanguageModel | None = None
        self._failure: Exception | None = None
        self._ready: anyio.Event | None = None

    async def capabilities(self) -> ModelCapabilities:
        return (await self._loaded()).capabilities

    async def availability(self) -> Availability:
        return await (await self._loaded()).availability()

    async def statistics(self) -> msgspec.Struct | None:
        """The model's own ``statistics()`` record (``None`` if it keeps none)."""
        model = await self._loaded()
        return await model.statistics() if isinstance(model, SupportsStatistics) else None

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage | Failure]:
        """The model's pieces; a failure comes as a last :class:`Failure` (errors do not pickle)."""
        pieces = (await self._loaded()).stream(request)
        try:
            async for piece in pieces:
                yield piece
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who raises it
            yield Failure.of(exc)
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _loaded(self) -> LanguageModel:
        if self._ready is None:
            self._ready = anyio.Event()
            # The model's root task: a context-managed model (a device pool) is entered and left
            # on it; Ray owns the loop, so it lives as long as the actor.
            asyncio.get_running_loop().create_task(self._host())
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure
        assert self._model is not None
        return self._model

    async def _host(self) -> None:
        try:
            made = self._factory()
            if not hasattr(made, "__aenter__"):
                self._serve(made)
                return
            async with made as model:
                self._serve(model)
                await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - each call raises it: none waits forever
            self._failure = exc
            self._serve(None)

    def _serve(self, model: LanguageModel | None) -> None:
        assert self._ready is not None
        self._model = model
        self._ready.set()


_ModelActor = ray.remote(ModelHost)


class RemoteModel:
    """A hosted model seen from anywhere in the cluster; pickles as its name and capabilities."""

    def __init__(self, name: str, capabilities: ModelCapabilities, namespace: str = MODEL_NAMESPACE) -> None:
        self.name = name
        self.namespace = namespace
        self._capabilities = capabilities
        self._actor: Any = None  # looked up on first use in each process

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    async def availability(self) -> Availability:
        return await self._handle().availability.remote()

    async def statistics(self) -> msgspec.Struct | None:
        """The hosted model's ``statistics()`` record, fetched from its model actor (``None``
        if it keeps none): the same record it returns where it runs."""
        return cast(msgspec.Struct | None, await self._handle().statistics.remote())

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        pieces = self._handle().stream.options(num_returns="streaming").remote(request)
        finished = False
        try:
            async for ref in pieces:
                piece = await ref
                if isinstance(piece, Failure):
                    finished = True
                    raise piece.to_exception()
                yield piece
            finished = True
        finally:
            if not finished:
                ray.cancel(pieces)  # closed early: the hosted model stops generating

    def _handle(self) -> Any:
        if self._actor is None:
            self._actor = ray.get_actor(_actor_name(self.name), namespace=self.namespace)
        return self._actor

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_actor": None}

    def __repr__(self) -> str:
        return f"RemoteModel({self.name!r})"


def host_model(name: str, factory: Callable[[], Any], *, namespace: str = MODEL_NAMESPACE) -> RemoteModel:
    """Start the model actor ``name`` (or find the running one; ``factory`` is then unused) and
    return its :class:`RemoteModel`. Needs ``ray.init`` first; blocks until the model is built."""
    handle = _ModelActor.options(
        name=_actor_name(name),
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_concurrency=1000,
        num_cpus=0,
    ).remote(factory)
    try:
        capabilities = cast(ModelCapabilities, ray.get(handle.capabilities.remote()))  # type: ignore[attr-defined]
    except ray.exceptions.RayTaskError as exc:
        raise exc.cause from exc  # the factory's own error
    return RemoteModel(name, capabilities, namespace)


def model_running(name: str, *, namespace: str = MODEL_NAMESPACE) -> bool:
    """Whether the model actor ``name`` is hosted (by anyone). Needs ``ray.init`` first."""
    try:
        ray.get_actor(_actor_name(name), namespace=namespace)
    except ValueError:
        return False
    return True


def stop_model(name: str, *, namespace: str = MODEL_NAMESPACE) -> bool:
    """End the model actor ``name``; ``False`` if none runs."""
    try:
        handle = ray.get_actor(_actor_name(name), namespace=namespace)
    except ValueError:
        return False
    ray.kill(handle)
    return True


class ClusterModel:
    """The system model hosted once on the Ray cluster as the model actor ``name``, built there
    by ``factory`` (picklable); :meth:`model` is the system model factory (its ``RemoteModel``).

    Enter it while Ray is up (inside the ``RaySystem``). It stops the model actor on exit only
    if it started it: a server joining a cluster where the same system model runs shares it.
    Entering raises :class:`~oam_actors.models.errors.ModelHostError` when the model does not start.
    """

    def __init__(self, name: str, factory: Callable[[], Any]) -> None:
        self.name = name
        self.factory = factory
        self._model: RemoteModel | None = None
        self._started = False

    def model(self) -> RemoteModel:
        if self._model is None:
            raise RuntimeError("the model actor is not hosted (use it inside `async with ClusterModel`)")
        return self._model

    async def __aenter__(self) -> Self:
        self._started = not model_running(self.name)
        try:
            # Blocks until the backend is built in the model actor (a farm's phones started).
            self._model = await anyio.to_thread.run_sync(host_model, self.name, self.factory)
        except Exception as exc:
            if self._started:
                stop_model(self.name)
            raise ModelHostError(f"the model {self.name!r} did not start: {exc}") from exc
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._model = None
        if self._started:
            stop_model(self.name)
