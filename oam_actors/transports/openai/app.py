"""The OpenAI-compatible HTTP API (an ASGI app on Starlette) over a server's :class:`Hub`.

Contract
--------
- ``POST /v1/chat/completions`` (and ``/chat/completions``) runs the request as one agent turn
  over the hub's system model (``"model": "system"``) or an inline scripted model
  (``"scripted"``, unless scripted models are disabled); ``GET /v1/models`` and
  ``/v1/models/{id}`` list them; ``GET /health`` is the hub's health (no token needed).
- With tokens configured every other route needs ``Authorization: Bearer <token>`` (401
  otherwise). The tenant and the request's ``user`` are the owner the quota queues fairly by;
  ``x-oam-priority`` picks the class, ``x-oam-queue-timeout`` shortens the wait for quota (then
  429 with ``Retry-After``), ``x-oam-timeout`` bounds the whole request (then 504).
- A body over ``max_line_bytes`` is refused 413; every error body is OpenAI's shape
  (:mod:`.errors`). A streamed request sends its HTTP status with its first chunk, so a failure
  before any output is still a proper status; a failure after is an error frame.
- A client that disconnects cancels its request at once (a queued step leaves the quota queue).
  :meth:`FrontDoor.cancel_all` cancels every request in flight (the server is stopping): those
  not yet answered get 503.
- At most ``max_connections`` completions run at once; beyond that, 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ...agent import LanguageModel
from ...errors import ErrorCode, OamError, ProtocolError, seconds_text
from ...models import ScriptedModel
from ..auth import ANONYMOUS, Tenant, bearer_token
from ..hub import Hub
from .errors import HttpError, from_oam, internal_error, request_error
from .service import run_turn
from .stream import ChunkWriter, Reply, ReplyText, StreamRestarted, apply_stop, completion
from .translate import Plan, decode_request, hints_from_headers, plan_turn
from .wire import ModelCard, ModelList

__all__ = ["SCRIPTED", "SYSTEM", "FrontDoor"]

SYSTEM: Final = "system"
SCRIPTED: Final = "scripted"
_JSON: Final = "application/json"
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                       (b"x-accel-buffering", b"no")]
_ENCODER: Final = msgspec.json.Encoder()
_log = logging.getLogger(__name__)


class FrontDoor:
    """The ASGI app (:attr:`app`) and the requests it has in flight. One per server, shared by
    every ``--openai`` listener; ``clock`` gives the ``created`` stamps (Unix seconds)."""

    def __init__(self, hub: Hub, *, clock: Callable[[], float] = time.time) -> None:
        self.hub = hub
        self._clock = clock
        self._in_flight: set[anyio.CancelScope] = set()
        routes = [
            Route("/health", self._health, methods=["GET"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/models/{model:path}", self._model_card, methods=["GET"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/chat/completions", self._chat, methods=["POST"]),
        ]
        handlers: dict[Any, Any] = {HttpError: _error_response, HTTPException: _routing_error}
        self.app = Starlette(routes=routes, exception_handlers=handlers)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def cancel_all(self) -> None:
        """Cancel every request in flight (they answer 503 if they have not answered yet)."""
        for scope in list(self._in_flight):
            scope.cancel()

    @contextmanager
    def _tracked(self) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            self._in_flight.add(scope)
            try:
                yield scope
            finally:
                self._in_flight.discard(scope)

    # --- routes ----------------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return _json(200, {**self.hub.health(), "openaiRequests": self.in_flight})

    async def _models(self, request: Request) -> Response:
        self._tenant(request)
        return _json(200, ModelList([ModelCard(name) for name in self.model_ids()]))

    async def _model_card(self, request: Request) -> Response:
        self._tenant(request)
        name = request.path_params["model"]
        if name not in self.model_ids():
            raise _unknown_model(name)
        return _json(200, ModelCard(name))

    async def _chat(self, request: Request) -> Response:
        tenant = self._tenant(request)
        body = await self._body(request)
        plan = plan_turn(decode_request(body), hints_from_headers(request.headers.get))
        model = self._model(plan)
        if self.in_flight >= self.hub.policy.max_connections:
            raise HttpError(503, f"Too many requests in flight (limit {self.hub.policy.max_connections}); "
                            "try again later.", type="server_error", code="overloaded")
        owner = f"openai:{tenant.name}" + (f":{plan.user}" if plan.user else "")
        return _Completion(self, plan, model, owner)

    def model_ids(self) -> list[str]:
        ids = [SYSTEM] if self.hub.system_model is not None else []
        return ids + ([SCRIPTED] if self.hub.config.scripted_models else [])

    # --- request parts ---------------------------------------------------------------------

    def _tenant(self, request: Request) -> Tenant:
        tokens = self.hub.policy.tokens
        if not tokens:
            return ANONYMOUS
        tenant = tokens.tenant(bearer_token(request.headers.get("authorization")))
        if tenant is None:
            self.hub.refused("openai", "auth")
            raise HttpError(401, "A valid bearer token is required (Authorization: Bearer <token>).",
                            code="invalid_api_key")
        return tenant

    async def _body(self, request: Request) -> bytes:
        limit = self.hub.policy.max_line_bytes
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise _too_large(limit)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    def _model(self, plan: Plan) -> LanguageModel:
        if plan.model == SCRIPTED and self.hub.config.scripted_models:
            try:
                return ScriptedModel.from_wire({"type": SCRIPTED, "steps": plan.script}, path="script")
            except OamError as exc:
                raise from_oam(exc, param="script") from exc
        if plan.script is not None:
            raise request_error(f"'script' is only for the model {SCRIPTED!r}.", param="script")
        if plan.model == SYSTEM and self.hub.system_model is not None:
            return self.hub.system_model()
        raise _unknown_model(plan.model)

    def created(self) -> int:
        return int(self._clock())


class _Completion(Response):
    """Runs the completion while the client is connected, then answers (whole or streamed)."""

    def __init__(self, door: FrontDoor, plan: Plan, model: LanguageModel, owner: str) -> None:
        self._door, self._plan, self._model, self._owner = door, plan, model, owner
        self._timeout = plan.timeout
        self._id = "chatcmpl-" + secrets.token_hex(12)
        self._created = door.created()
        self._writer = ChunkWriter(id=self._id, model=plan.model, created=self._created,
                                   include_usage=plan.include_usage)
        self._started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_cancel_on_disconnect, receive, tasks.cancel_scope)
            try:
                with self._door._tracked() as work:
                    await self._serve(send)
                if work.cancelled_caught:
                    await self._fail(send, from_oam(ProtocolError(ErrorCode.SHUT_DOWN, "The server is stopping.")))
            finally:
                tasks.cancel_scope.cancel()

    async def _serve(self, send: Send) -> None:
        try:
            with anyio.move_on_after(self._timeout if self._timeout is not None else float("inf")) as deadline:
                reply = await self._reply(send)
            if deadline.cancelled_caught:
                raise from_oam(ProtocolError(ErrorCode.TIMEOUT, f"The request took longer than {seconds_text(self._timeout)}."))
        except Exception as exc:  # every failure becomes one OpenAI error answer
            await self._fail(send, _as_http_error(exc))
            return
        if self._plan.stream:
            await self._frames(send, self._writer.finish(reply), more=False)
        else:
            body = completion(reply, id=self._id, model=self._plan.model, created=self._created)
            await _send_whole(send, 200, body)

    async def _reply(self, send: Send) -> Reply:
        plan = self._plan
        if not plan.stream:
            reply = await run_turn(plan, self._model, owner=self._owner)
            text = reply.text if reply.text is None or plan.schema is not None else apply_stop(reply.text, plan.stop)
            return Reply(text, reply.tool_calls, reply.usage)
        shown = ReplyText(plan.stop)

        async def on_reply(visible: str) -> None:
            if fresh := shown.update(visible):
                await self._frames(send, self._writer.text(fresh))

        reply = await run_turn(plan, self._model, owner=self._owner, on_reply=None if plan.schema else on_reply)
        if reply.tool_calls:
            await self._frames(send, self._writer.tool_calls(reply.tool_calls))
        elif plan.schema is not None:
            await self._frames(send, self._writer.text(reply.text or ""))
        else:
            await self._frames(send, self._writer.text(shown.finish(reply.text or "")))
        return reply

    async def _frames(self, send: Send, data: bytes, *, more: bool = True) -> None:
        if not self._started:
            self._started = True
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await send({"type": "http.response.body", "body": data, "more_body": more})

    async def _fail(self, send: Send, error: HttpError) -> None:
        if self._started:
            await self._frames(send, self._writer.error(error.detail), more=False)
        else:
            self._started = True
            await _send_whole(send, error.status, error.body(), error.headers)


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """The body has been read: the next message can only say the client went away."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _as_http_error(exc: Exception) -> HttpError:
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, OamError):
        return from_oam(exc)
    if isinstance(exc, StreamRestarted):
        return HttpError(500, f"The stream failed: {exc}; retry the request.", type="server_error",
                         code="stream_restarted")
    _log.exception("chat completion failed")
    return internal_error()


async def _send_whole(send: Send, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    raw = [(b"content-type", _JSON.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _json(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(_ENCODER.encode(value), status, headers, media_type=_JSON)


def _error_response(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return Response(exc.body(), exc.status, exc.headers, media_type=_JSON)


def _routing_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = f"Invalid URL ({request.method} {request.url.path})" if exc.status_code == 404 else (
        f"Method {request.method} is not allowed on {request.url.path}.")
    return _error_response(request, HttpError(exc.status_code, message))


def _unknown_model(name: str) -> HttpError:
    return request_error(f"The model {name!r} does not exist (GET /v1/models lists the models).", param="model",
                         status=404, code="model_not_found")


def _too_large(limit: int) -> HttpError:
    return request_error(f"The request body is larger than {limit} bytes.", status=413, code="request_too_large")
