"""Reading a plain TCP connection with one system call per read.

Both connection loops (:mod:`krt.grpc.client`, :mod:`krt.grpc.unary_server`) read their
connection from one reader task. A stream's ``receive`` on a drained connection (the usual
case between unary calls) first tries ``recv`` (which fails with ``EAGAIN``, an exception
raised and caught in Python), then waits for readiness and calls ``recv`` again. On a plain
TCP socket (never TLS: its bytes must go through the TLS object) the reader here waits for
readiness first and then reads once. The wait is a scheduling point, as the stream's
receive is. Issue 6: about 6% of the Runtime Server's CPU per call when its connection
loop was switched to it; the client's reader saves the same per answer.
"""

from __future__ import annotations

import os

import trio

__all__ = ["receive_when_ready"]


async def receive_when_ready(fd: int, max_bytes: int) -> bytes:
    """The next bytes of the non-blocking socket ``fd``, after waiting until it is readable.

    Args:
        fd: a non-blocking socket descriptor (see
            :func:`krt.grpc.direct_writes.plain_socket_fd`); the caller keeps it open.
        max_bytes: the most bytes to return (>= 1).

    Returns:
        Up to ``max_bytes`` bytes; empty once the peer closed the connection.

    Raises:
        OSError: the connection broke (e.g. ``ECONNRESET``); callers map it as their
            stream's ``BrokenResourceError``.
        trio.ClosedResourceError: the descriptor was closed while waiting.
        trio.Cancelled: the wait was cancelled (nothing was read).
    """
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, max_bytes)
        except BlockingIOError:  # woken without data after all: wait again
            continue
