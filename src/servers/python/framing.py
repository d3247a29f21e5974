"""Length-prefixed frames between the Python Runtime Server and its warm workers.

A frame is a 4-byte big-endian length ``n``, then ``n`` bytes: one kind byte and the
payload. Both ends import this module, so it imports nothing but :mod:`struct` (the worker
must stay small and fast to start).

Server to worker: ``CALL`` (payload: the input bytes).
Worker to server: ``READY``; ``LOAD_FAILED`` (a bounded summary); ``STDOUT`` / ``STDERR``
(what the handler printed, for the structured log); ``OUTPUTS`` (a JSON object);
``RESULT`` (the JSON output); ``ERROR`` (a JSON ``{"type", "message"}``);
``BAD_INPUT`` (why the payload is not JSON).
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">I")
#: a frame larger than this is a protocol error (64 MiB).
MAX_FRAME_BYTES = 64 * 1024 * 1024

CALL = b"C"
READY = b"R"
LOAD_FAILED = b"F"
STDOUT = b"O"
STDERR = b"E"
OUTPUTS = b"U"
RESULT = b"D"
ERROR = b"X"
BAD_INPUT = b"I"


def encode(kind: bytes, payload: bytes = b"") -> bytes:
    """Return one frame of ``kind`` (one byte) carrying ``payload``."""
    return HEADER.pack(len(payload) + 1) + kind + payload
