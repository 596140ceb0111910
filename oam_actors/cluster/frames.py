"""Length-prefixed pickle frames over a byte stream: the data path between driver and shard.

A frame is a 4-byte big-endian length and that many bytes of pickle. The first frame a driver
sends is the shard's token (from ``ping`` over Ray's authenticated channel); the shard unpickles
nothing before it has checked it.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import anyio
from anyio.abc import AnyByteReceiveStream
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["CONNECTION_LOST", "MAX_FRAME_BYTES", "FrameReader", "encode_frame", "raw_frame"]

MAX_FRAME_BYTES = 1 << 30

CONNECTION_LOST = (
    OSError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)
"""What reading or writing frames raises when the other end is gone."""
_HEADER = struct.Struct(">I")


def encode_frame(value: Any) -> bytes:
    """``value`` pickled, as one frame."""
    return raw_frame(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def raw_frame(payload: bytes) -> bytes:
    """``payload`` as is, as one frame (the token)."""
    if len(payload) > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Reads whole frames from ``stream``; ``anyio.EndOfStream`` when it closes cleanly."""

    def __init__(self, stream: AnyByteReceiveStream) -> None:
        self._buffered = BufferedByteReceiveStream(stream)

    async def raw(self, limit: int = MAX_FRAME_BYTES) -> bytes:
        """The next frame's payload, not unpickled; ``ValueError`` if it exceeds ``limit``."""
        (size,) = _HEADER.unpack(await self._buffered.receive_exactly(_HEADER.size))
        if size > limit:
            raise ValueError(f"frame of {size} bytes exceeds {limit}")
        return await self._buffered.receive_exactly(size)

    async def next(self) -> Any:
        return pickle.loads(await self.raw())
