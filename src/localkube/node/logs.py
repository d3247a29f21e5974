"""Container logs: the node writes them, the API server's ``pods/{name}/log`` reads them.

On-disk layout (see :mod:`localkube.node.layout`): ``<pod-root>/logs/<container>/<N>.log``
for the container's N-th run (N = its restartCount at start), in the CRI log format the
kubelet uses::

    2026-11-29T08:11:21.123456789Z stdout F a complete line
    2026-11-29T08:11:21.123456999Z stderr P the first 16 KiB of a longer line

``<N>.exited`` appears next to ``<N>.log`` when that run ended, which is when
``kubectl logs -f`` stops following.

How the API server serves ``GET /api/v1/namespaces/{ns}/pods/{name}/log``: compute the log
directory with ``PodPaths.for_pod(state_dir, ns, name, uid).log_dir`` (state_dir is the
cluster's state directory, uid the stored Pod's ``metadata.uid``), then call
:func:`read_log` (in ``trio.to_thread.run_sync``: it reads files) or iterate
:func:`follow_log` for ``follow=true``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

#: Longest line content written as one record; longer lines are split into ``P`` records.
MAX_RECORD_BYTES = 16 * 1024

_RECORD = re.compile(rb"^(\S+) (stdout|stderr) ([PF]) (.*)$", re.DOTALL)


class LogNotFoundError(LookupError):
    """No log for the container asked (unknown container, or no previous run).

    Serve it as 400 BadRequest, as the kubelet does (``container "x" in pod "y" is
    waiting to start`` / ``previous terminated container "x" ... not found``).
    """


def format_timestamp(epoch_seconds: float) -> str:
    """Return an RFC 3339 UTC timestamp with nanoseconds (``...T08:11:21.123456789Z``)."""
    whole = int(epoch_seconds)
    nanos = int(round((epoch_seconds - whole) * 1e9))
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    base = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{nanos:09d}Z"


def parse_timestamp(text: str) -> float:
    """Parse a timestamp written by :func:`format_timestamp` back to epoch seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    base = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return base + (int(frac.ljust(9, "0")[:9]) / 1e9 if frac else 0.0)


def encode_records(stream: str, data: bytes, *, now: float) -> bytes:
    """Encode complete lines of ``data`` as CRI log records.

    Args:
        stream: ``stdout`` or ``stderr``.
        data: bytes ending in a newline, or a final fragment at end of stream (written as
            a complete ``F`` record).
        now: wall-clock time in epoch seconds.
    """
    ts = format_timestamp(now).encode()
    tag = stream.encode()
    out = bytearray()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for line in lines:
        while len(line) > MAX_RECORD_BYTES:
            out += ts + b" " + tag + b" P " + line[:MAX_RECORD_BYTES] + b"\n"
            line = line[MAX_RECORD_BYTES:]
        out += ts + b" " + tag + b" F " + line + b"\n"
    return bytes(out)


@dataclass(frozen=True)
class LogLine:
    """One logical log line: ``timestamp`` in epoch seconds, ``text`` with its newline."""

    timestamp: float
    stamp: str
    text: bytes


def parse_records(data: bytes) -> list[LogLine]:
    """Parse CRI records, joining ``P`` fragments into their line. Unparsable lines are kept
    as they are (timestamp 0)."""
    out: list[LogLine] = []
    pending = b""
    pending_stamp: str | None = None
    for raw in data.splitlines():
        m = _RECORD.match(raw)
        if not m:
            out.append(LogLine(0.0, "", raw + b"\n"))
            continue
        stamp = m.group(1).decode()
        if pending_stamp is None:
            pending_stamp = stamp
        pending += m.group(4)
        if m.group(3) == b"F":
            try:
                ts = parse_timestamp(pending_stamp)
            except ValueError:
                ts = 0.0
            out.append(LogLine(ts, pending_stamp, pending + b"\n"))
            pending, pending_stamp = b"", None
    return out


def run_numbers(container_dir: Path) -> list[int]:
    """Return the run numbers (restartCount values) that have a log file, ascending."""
    if not container_dir.is_dir():
        return []
    return sorted(int(p.stem) for p in container_dir.glob("*.log") if p.stem.isdigit())


def log_file(log_dir: Path, container: str, *, previous: bool = False) -> Path:
    """Return the log file of the container's current (or previous) run.

    Args:
        log_dir: the Pod's log directory (``PodPaths.log_dir``).
        container: container name.
        previous: the run before the latest one (``kubectl logs --previous``).

    Raises:
        LogNotFoundError: if there is no such run.
    """
    runs = run_numbers(log_dir / container)
    if previous:
        if len(runs) < 2:
            raise LogNotFoundError(f'previous terminated container "{container}" not found')
        return log_dir / container / f"{runs[-2]}.log"
    if not runs:
        raise LogNotFoundError(f'container "{container}" has no logs (is it waiting to start?)')
    return log_dir / container / f"{runs[-1]}.log"


def render(
    lines: list[LogLine],
    *,
    tail_lines: int | None = None,
    since_seconds: float | None = None,
    timestamps: bool = False,
    limit_bytes: int | None = None,
    now: float | None = None,
) -> bytes:
    """Filter and format log lines the way ``pods/{name}/log`` does.

    Args:
        lines: parsed lines, oldest first.
        tail_lines: keep only the last N lines (applied after ``since_seconds``).
        since_seconds: keep only lines written in the last N seconds before ``now``.
        timestamps: prefix each line with its RFC 3339 timestamp and a space.
        limit_bytes: cut the output after this many bytes.
        now: wall-clock epoch seconds (default: the current time).

    Raises:
        ValueError: if ``tail_lines`` is negative or ``since_seconds`` is not positive.
    """
    if tail_lines is not None and tail_lines < 0:
        raise ValueError(f"tailLines must be >= 0, got {tail_lines}")
    if since_seconds is not None:
        if since_seconds <= 0:
            raise ValueError(f"sinceSeconds must be > 0, got {since_seconds}")
        cutoff = (time.time() if now is None else now) - since_seconds
        lines = [ln for ln in lines if ln.timestamp >= cutoff]
    if tail_lines is not None:
        lines = lines[len(lines) - tail_lines :] if tail_lines else []
    out = b"".join((ln.stamp.encode() + b" " + ln.text) if timestamps else ln.text for ln in lines)
    return out[:limit_bytes] if limit_bytes is not None else out


def read_log(
    log_dir: Path,
    container: str,
    *,
    tail_lines: int | None = None,
    since_seconds: float | None = None,
    timestamps: bool = False,
    previous: bool = False,
    limit_bytes: int | None = None,
) -> bytes:
    """Return a container's log as ``kubectl logs`` prints it (blocking file I/O).

    Args:
        log_dir: the Pod's log directory, ``PodPaths.for_pod(state_dir, ns, name, uid).log_dir``.
        container: container name.
        tail_lines: last N lines only. since_seconds: lines from the last N seconds only.
        timestamps: prefix lines with their timestamps. previous: the previous run.
        limit_bytes: cut the output after this many bytes.

    Raises:
        LogNotFoundError: no log for that container (or no previous run).
        ValueError: a negative ``tail_lines`` or non-positive ``since_seconds``.
    """
    path = log_file(log_dir, container, previous=previous)
    return render(
        parse_records(path.read_bytes()),
        tail_lines=tail_lines,
        since_seconds=since_seconds,
        timestamps=timestamps,
        limit_bytes=limit_bytes,
    )


async def follow_log(
    log_dir: Path,
    container: str,
    *,
    tail_lines: int | None = None,
    since_seconds: float | None = None,
    timestamps: bool = False,
    poll_interval: float = 0.2,
) -> AsyncIterator[bytes]:
    """Yield a container's log, then its new lines as they are written (``follow=true``).

    Ends when the followed run of the container has ended (its ``.exited`` marker exists
    and everything is read) or a newer run started; otherwise runs until cancelled.

    Args:
        log_dir, container, tail_lines, since_seconds, timestamps: as :func:`read_log`.
        poll_interval: seconds between checks for new data.

    Raises:
        LogNotFoundError: no log for that container.
    """
    path = log_file(log_dir, container)
    exited = path.with_suffix(".exited")
    f = await trio.open_file(path, "rb")
    try:
        data = await f.read()
        complete = data[: data.rfind(b"\n") + 1]
        await f.seek(len(complete))
        first = render(
            parse_records(complete),
            tail_lines=tail_lines,
            since_seconds=since_seconds,
            timestamps=timestamps,
        )
        if first:
            yield first
        while True:
            done = await trio.Path(exited).exists()
            chunk = await f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            if len(complete) < len(chunk):
                await f.seek(len(complete) - len(chunk), 1)  # keep a partial record for later
            if complete:
                yield render(parse_records(complete), timestamps=timestamps)
                continue
            if await _rotated(path, f):
                # the node rotated the file (localkube.node.logrotate): everything of the old
                # one is read, go on with the new one from its start
                await f.aclose()
                f = await trio.open_file(path, "rb")
                continue
            runs = run_numbers(log_dir / container)
            if done or (runs and runs[-1] > int(path.stem)):
                return
            await trio.sleep(poll_interval)
    finally:
        with trio.CancelScope(shield=True):
            await f.aclose()


async def _rotated(path: Path, f: Any) -> bool:
    """Whether ``path`` now names another file than the open ``f``."""
    try:
        current = await trio.Path(path).stat()
    except FileNotFoundError:
        return False  # between the rename and the new file: look again next time
    opened = os.fstat(f.fileno())
    return (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino)
