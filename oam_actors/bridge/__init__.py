"""The JSON-RPC bridge: one per connection, turning protocol lines into actor messages."""

from .bridge import Bridge, tool_output_from_reply
from .config import BridgeConfig, CustomModelFactory, ModelFactory
from .registry import Call, Deferred, Extension, MethodRegistry

__all__ = [
    "Bridge",
    "BridgeConfig",
    "Call",
    "CustomModelFactory",
    "Deferred",
    "Extension",
    "MethodRegistry",
    "ModelFactory",
    "tool_output_from_reply",
]
