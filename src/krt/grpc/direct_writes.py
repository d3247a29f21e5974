"""Writing a connection's bytes at once from the task that produced them, when the socket takes them.

Both connection loops (:mod:`krt.grpc.client`, :mod:`krt.grpc.unary_server`) own one writer
task, so that a cancelled call can never leave half a frame on the wire. Waking that task
for every request and every answer costs a trio scheduling pass each time (two per unary
call on each side; every invoke crosses four of our connections). On a plain TCP socket
(never TLS: its bytes must go through the TLS object) the bytes can be handed to the kernel
with one non-blocking ``os.write`` from the task that queued them: it is synchronous, so it
cannot be cancelled halfway. Whatever the socket does not take at once (a full send buffer,
an error) is left to the writer task, which sends it first and reports errors as before.

Rules the connections keep: no direct write while the writer task is sending or has bytes
queued (bytes stay in order), and the descriptor is forgotten before the socket is closed
(a closed descriptor's number can be reused by another file).
"""

from __future__ import annotations

import os
from typing import Any

import anyio.abc
import trio

__all__ = ["plain_socket_fd", "write_now"]


def plain_socket_fd(stream: Any) -> int | None:
    """The descriptor of ``stream`` if it is a plain (non-TLS) TCP socket stream, else ``None``.

    Args:
        stream: a :class:`trio.SocketStream`, an anyio :class:`anyio.abc.SocketStream`, or any
            other byte stream (TLS, in-memory), which gets ``None``.
    """
    if isinstance(stream, trio.SocketStream):
        return int(stream.socket.fileno())
    if isinstance(stream, anyio.abc.SocketStream):
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        return None if raw is None else int(raw.fileno())
    return None


def write_now(fd: int, data: bytes) -> bytes:
    """Write as much of ``data`` as the non-blocking socket ``fd`` takes now.

    Args:
        fd: a non-blocking socket descriptor (trio's and anyio's sockets are).
        data: the bytes to send.

    Returns:
        What was not written (empty when everything was); an error (the peer went away)
        leaves everything unwritten for the writer task to fail on.
    """
    try:
        written = os.write(fd, data)
    except OSError:  # BlockingIOError (buffer full), or a broken connection
        return data
    return data[written:]
