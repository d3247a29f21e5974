"""purerpc's per-stream message read buffer, decompressing as gRPC peers compress.

purerpc 0.8.0's :class:`~purerpc.grpclib.buffers.MessageReadBuffer` decompresses a message
flagged compressed with ``zlib.decompress`` for both ``gzip`` and ``deflate``. Two problems:

* ``gzip`` in gRPC is the gzip format (RFC 1952; grpc/grpc doc/compression.md), which
  ``zlib.decompress`` refuses ("incorrect header check"): every gzip-compressed request of a
  grpcio or grpc-go client failed (the connection was dropped; since
  :mod:`krt.grpc.unreadable_messages`, the call was INTERNAL). purerpc's own client
  "gzips" with ``zlib.compress`` (the zlib format), so both formats are accepted for
  ``gzip`` (zlib's automatic header detection); ``deflate`` stays the zlib format (RFC
  1950), as grpc and purerpc send it.
* Nothing bounded the decompressed size: a 32 MiB message of compressed zeros inflates a
  thousandfold, enough to exhaust the memory of any of our processes. Output is capped at
  the connection's message limit; a message that inflates past it fails its call with
  RESOURCE_EXHAUSTED (gRPC: "Sent or received message was larger than configured limit"),
  as grpc-go does ("received message after decompression larger than max").

:class:`ReadBuffer` is purerpc's buffer with that ``decompress``; every connection of ours
creates its stream buffers with it. Only compressed messages reach the method, and they
never take the one-frame fast path, so an ordinary call costs the same as before.
"""

from __future__ import annotations

import zlib
from typing import Final

from purerpc.grpclib.buffers import MessageReadBuffer
from purerpc.grpclib.exceptions import MessageTooLargeError, UnsupportedMessageEncodingError

__all__ = ["DecompressedTooLargeError", "ReadBuffer", "decompress"]

#: zlib ``wbits`` per ``grpc-encoding``: gzip or zlib header (auto), zlib header.
_WBITS: Final = {"gzip": 32 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class DecompressedTooLargeError(MessageTooLargeError):  # type: ignore[misc]
    """A compressed message that inflates past the message limit.

    Attributes:
        limit: the limit (bytes).
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"message after decompression larger than max {limit}")
        self.limit = limit


def decompress(data: bytes, *, encoding: str | None, limit: int) -> bytes:
    """``data`` decompressed as ``encoding``, at most ``limit`` bytes of it.

    Args:
        data: one message's bytes (its compressed flag was set).
        encoding: the stream's ``grpc-encoding`` (``gzip`` or ``deflate``).
        limit: the most bytes the message may inflate to.

    Returns:
        The message.

    Raises:
        UnsupportedMessageEncodingError: ``encoding`` is none of the above (also absent).
        zlib.error: ``data`` is not a complete stream of that format.
        DecompressedTooLargeError: the message inflates past ``limit``.
    """
    wbits = _WBITS.get(encoding or "")
    if wbits is None:
        raise UnsupportedMessageEncodingError(f"Unsupported compression: {encoding}")
    inflater = zlib.decompressobj(wbits)
    message = inflater.decompress(data, limit + 1)
    if len(message) > limit:
        raise DecompressedTooLargeError(limit)
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return message


class ReadBuffer(MessageReadBuffer):  # type: ignore[misc]
    """purerpc's message read buffer with :func:`decompress` (see the module docstring).

    Args:
        message_encoding: the stream's ``grpc-encoding`` (``None`` when absent).
        max_message_length: the connection's limit on one message (bytes), compressed or not.
    """

    def decompress(self, data: bytes) -> bytes:
        """``data`` decompressed as :func:`decompress` (the errors raised are its errors)."""
        return decompress(data, encoding=self._message_encoding, limit=self._max_message_length)
