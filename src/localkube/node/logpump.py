"""Copies a container's stdout or stderr into its CRI log file, stamping each line as read.

``kubectl logs --timestamps`` shows when each line was read from the container's pipe (the
kubelet's container runtime stamps it then), so the pump stamps the lines of every read
with the clock at that read. Two costs are kept down on the event loop the node shares with
localkube's API server (issue 6: per-line work was about a sixth of that process's CPU
under a task burst):

* file writes: the records of all reads within :data:`BATCH_SECONDS` of the first go to
  the file in one worker-thread write (a batch of :data:`LARGE_READ_BYTES` or more at once,
  the rest when the stream ends). The deadline is a cancel scope around the read, so the
  reads never wait for the batch;
* wakeups: a line that comes alone is read (and stamped) at once, but a busy stream is read
  once per :data:`READ_INTERVAL_SECONDS` instead of once per write, so its lines are
  stamped at most that late. On this project's 2-core test machine a wakeup costs
  ~0.1 ms of CPU, as much as a dozen lines of encoding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Final, Protocol

import trio

from localkube.node.logs import encode_records

__all__ = ["BATCH_SECONDS", "LARGE_READ_BYTES", "READ_INTERVAL_SECONDS", "LogSink", "pump_log"]

#: Seconds the records of small reads may wait for the next file write (log lines show up
#: in ``kubectl logs`` at most this much later; their timestamps are not delayed).
BATCH_SECONDS: Final = 0.02
#: A batch of at least this many bytes (or an unterminated line this long) is written at
#: once.
LARGE_READ_BYTES: Final = 16 * 1024
#: Seconds between the reads of a busy stream: a line is stamped at most this much after
#: it was written (lines that come further apart are read, and stamped, as they come).
READ_INTERVAL_SECONDS: Final = 0.005
#: A read that returns within this many seconds found its data waiting.
_FOUND_WAITING_SECONDS: Final = 0.0002
#: Bytes of one read.
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
    read_interval_seconds: float = READ_INTERVAL_SECONDS,
) -> None:
    """Copy ``stream`` into ``sink`` as CRI records of stream ``name`` until end of file.

    Each line is stamped with ``clock()`` at the read that completed it (its newline
    arrived), as the kubelet's container runtime does; an unterminated tail is stamped when
    it is written as is (it reached :data:`LARGE_READ_BYTES`, or the stream ended). See
    the module docstring for when reads and writes happen.

    Args:
        stream: the container's stdout or stderr pipe; closed on return. A read cancelled
            at a batch deadline must lose no data (true of trio's pipes, sockets and memory
            streams, not of a TLS stream).
        name: ``"stdout"`` or ``"stderr"`` (the CRI record's stream field).
        sink: receives whole records; one call per batch.
        clock: wall clock for the records' timestamps (epoch seconds).
        batch_seconds: how long the records of small reads may wait for the next write
            (seconds, >= 0; 0 writes after every read).
        read_interval_seconds: pause after a read of a busy stream (one whose data came
            within this many seconds of the previous read, or was waiting after a pause),
            so that a chatty container costs one wakeup per interval (seconds, >= 0; 0
            reads every write as it comes).

    When cancelled, the records already read are still written (a short shielded write),
    so a container's last lines are not lost when the node stops draining its pipes.
    """
    batch = bytearray()
    pending = b""
    write_at = math.inf  # trio time at which the batch is written
    last_read = -math.inf  # trio time of the last read
    paced = False  # the last read was followed by a pause
    try:
        async with stream:
            while True:
                chunk: bytes | bytearray | None = None
                asked = trio.current_time()
                with trio.move_on_at(write_at):
                    chunk = await stream.receive_some(READ_BYTES)
                if chunk is None:  # the batch's window closed before more data came
                    await sink.write(_take(batch))
                    write_at = math.inf
                    continue
                if not chunk:
                    break
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if cut:
                    batch += encode_records(name, pending[:cut], now=clock())
                    pending = pending[cut:]
                elif len(pending) >= LARGE_READ_BYTES:
                    batch += encode_records(name, pending, now=clock())
                    pending = b""
                if not batch:
                    continue
                if len(batch) >= LARGE_READ_BYTES or batch_seconds <= 0:
                    await sink.write(_take(batch))
                    write_at = math.inf
                elif write_at == math.inf:
                    write_at = trio.current_time() + batch_seconds
                # a busy stream (data came within the interval, or was waiting after a
                # paced pause) is read once per interval, not once per write
                now = trio.current_time()
                paced = len(chunk) < LARGE_READ_BYTES and (
                    now - last_read < read_interval_seconds
                    or (paced and now - asked < _FOUND_WAITING_SECONDS)
                )
                last_read = now
                if paced:  # (not past the batch's write)
                    await trio.sleep_until(min(now + read_interval_seconds, write_at))
    finally:
        if pending:
            batch += encode_records(name, pending, now=clock())
        if batch:
            with trio.CancelScope(shield=True):
                await sink.write(_take(batch))


def _take(batch: bytearray) -> bytes:
    """The batch's bytes; the batch is left empty (a failed write is not written again)."""
    data = bytes(batch)
    batch.clear()
    return data
