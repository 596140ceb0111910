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
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import anyio
import msgspec
import ray

from ..agent import Availability, GenerationRequest, LanguageModel, ModelCapabilities, Usage
from .wire import Failure

__all__ = ["MODEL_NAMESPACE", "ModelHost", "RemoteModel", "host_model", "model_running", "stop_model"]

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

    async def statistics(self) -> Any:
        """The model's ``statistics()`` as plain data (``None`` if it keeps none)."""
        statistics = getattr(await self._loaded(), "statistics", None)
        return None if statistics is None else msgspec.to_builtins(statistics())

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

    async def statistics(self) -> Any:
        """The hosted model's ``statistics()`` as plain data (``None`` if it keeps none)."""
        return await self._handle().statistics.remote()

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
