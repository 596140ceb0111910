"""The Python client of the bridge protocol: :func:`connect` to ``oam-actors serve`` (TCP,
WebSocket) or to an ``oam-actors stdio`` child process, then call the protocol's methods.

::

    from oam_actors.client import connect

    async with connect("stdio", args=["--model", "scripted"]) as client:
        guard = await client.create_session(model={"type": "scripted", "steps": [{"text": "Halt!"}]})
        print((await guard.respond("Hello")).text)

The guide is docs/client.md. Only :mod:`oam_actors.errors` is imported from the rest of the
package: the client speaks the wire protocol, like any other client.
"""

import msgspec

from ._client import Client, Connecting, connect
from ._connection import ToolHandler
from ._errors import (
    AuthenticationFailed,
    ClientError,
    ConnectError,
    ConnectionLost,
    MalformedMessage,
    RequestTimeout,
    UnexpectedResult,
    error_from_wire,
)
from ._handles import Conversation, Npc, Owner, Session, Subscription, World
from ._params import params_of
from ._results import (
    Bark,
    ConversationLine,
    ConversationReply,
    ConversationSaid,
    Decision,
    NpcReply,
    SessionReply,
    TokenUsage,
    ToolRecord,
    ToolRequest,
)
from ._transports import (
    Endpoint,
    InProcessEndpoint,
    ProcessEndpoint,
    TcpEndpoint,
    Transport,
    WebSocketEndpoint,
)
from ._turn import Turn

__all__ = [
    "AuthenticationFailed",
    "Bark",
    "Client",
    "ClientError",
    "ConnectError",
    "Connecting",
    "ConnectionLost",
    "Conversation",
    "ConversationLine",
    "ConversationReply",
    "ConversationSaid",
    "Decision",
    "Endpoint",
    "InProcessEndpoint",
    "MalformedMessage",
    "Npc",
    "NpcReply",
    "Owner",
    "ProcessEndpoint",
    "RequestTimeout",
    "Session",
    "SessionReply",
    "Subscription",
    "TcpEndpoint",
    "TokenUsage",
    "ToolHandler",
    "ToolRecord",
    "ToolRequest",
    "Transport",
    "Turn",
    "UnexpectedResult",
    "WebSocketEndpoint",
    "World",
    "connect",
    "error_from_wire",
    "params_of",
]

for _name in __all__:
    _value = globals()[_name]
    # Not the Structs: msgspec resolves their annotations in the module __module__ names.
    is_struct = isinstance(_value, msgspec.Struct.__class__)
    if getattr(_value, "__module__", "").startswith("oam_actors.client.") and not is_struct:
        _value.__module__ = __name__  # tracebacks and docs show oam_actors.client.X
del _name, _value
