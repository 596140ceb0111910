"""The OpenAI-compatible front door: ``/v1/chat/completions`` over the server's models.

Layers: :mod:`.wire` (the Structs), :mod:`.translate` (request → agent turn), :mod:`.stream`
(completions, SSE chunks, stop sequences) and :mod:`.errors` (the error table) are pure;
:mod:`.service` runs the turn on the agent, :mod:`.app` is the ASGI app (Starlette),
:mod:`.server` serves it with uvicorn inside the running event loop. The protocol is described
in ``protocol/OPENAI.md``.
"""

from .app import SCRIPTED, SYSTEM, FrontDoor
from .server import openai_listener, serve_openai

__all__ = ["SCRIPTED", "SYSTEM", "FrontDoor", "openai_listener", "serve_openai"]
