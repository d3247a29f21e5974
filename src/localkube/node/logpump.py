"""Copies a container's stdout or stderr into its CRI log file, in batches.

A container that logs in many small writes (runtimed and the Runtime Servers log a few
lines per Run) would otherwise cost the node one wakeup, one record encoding and one
worker-thread file write per line, on the event loop it shares with localkube's API
server (issue 6: about a sixth of that process's CPU under a task burst). After a small
read the pump waits :data:`BATCH_SECONDS` before reading again, so the lines written in
that window arrive in one read and go to the file in one write. A large read (a chatty
container) is followed by the next read at once, so a fast writer never waits on a full
pipe because of the batching.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

import trio

from localkube.node.logs import encode_records

__all__ = ["BATCH_SECONDS", "LARGE_READ_BYTES", "LogSink", "pump_log"]

#: Seconds a pump lets small writes accumulate before its next read (log lines show up in
#: ``kubectl logs`` at most this much later).
BATCH_SECONDS: Final = 0.02
#: A read of at least this many bytes is followed by the next read without waiting.
LARGE_READ_BYTES: Final = 16 * 1024
#: Bytes of one read; also the longest unterminated line kept before it is written as is.
READ_BYTES: Final = 65536


class LogSink(Protocol):
    """Where records go (a :class:`~localkube.node.logrotate.RotatingLog`)."""

    async def write(self, data: bytes) -> None:
        """Append whole CRI records (newline-terminated)."""


async def pump_log(
    stream: trio.abc.ReceiveStream,
    name: str,
    sink: LogSink,
    *,
    clock: Callable[[], float] = time.time,
    batch_seconds: float = BATCH_SECONDS,
) -> None:
    """Copy ``stream`` into ``sink`` as CRI records of stream ``name`` until end of file.

    Args:
        stream: the container's stdout or stderr pipe; closed on return.
        name: ``"stdout"`` or ``"stderr"`` (the CRI record's stream field).
        sink: receives whole records; one call per batch.
        clock: wall clock for the records' timestamps (epoch seconds).
        batch_seconds: how long small writes may accumulate before the next read (seconds,
            >= 0).

    Whole lines are written as they arrive; an unterminated tail waits for its newline
    until it reaches :data:`LARGE_READ_BYTES` (then it is written as is) or the stream
    ends.
    """
    pending = b""
    async with stream:
        while chunk := await stream.receive_some(READ_BYTES):
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                await sink.write(encode_records(name, pending[:cut], now=clock()))
                pending = pending[cut:]
            elif len(pending) >= LARGE_READ_BYTES:
                await sink.write(encode_records(name, pending, now=clock()))
                pending = b""
            if len(chunk) < LARGE_READ_BYTES and batch_seconds > 0:
                await trio.sleep(batch_seconds)
    if pending:
        await sink.write(encode_records(name, pending, now=clock()))
