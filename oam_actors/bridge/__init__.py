"""The JSON-RPC bridge: one per connection, turning protocol lines into actor messages."""

from .bridge import Bridge, tool_output_from_reply
from .config import BridgeConfig, CustomModelFactory, ModelCheck, ModelFactory
from .model_status import ModelStatusExtension, model_extensions
from .registry import Call, Deferred, Extension, HandlerBridge, MethodRegistry

__all__ = [
    "Bridge",
    "BridgeConfig",
    "Call",
    "CustomModelFactory",
    "ModelCheck",
    "Deferred",
    "Extension",
    "HandlerBridge",
    "MethodRegistry",
    "ModelFactory",
    "ModelStatusExtension",
    "model_extensions",
    "tool_output_from_reply",
]
