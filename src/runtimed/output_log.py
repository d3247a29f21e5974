"""Which lines of a task attempt's stdout/stderr runtimed logs, and when (docs/usage.md "Logs").

Every ``Status`` answer carries an execution's whole kept output. Once the Runtime Server
drops bytes (past 1 MiB per stream, :mod:`servers.common.bounded`) that text is the first
256 KiB, the ``[... N bytes of output dropped ...]`` marker with the count *so far*, and a
last-768-KiB window that moves while the task prints. Only the head is a stable prefix of
every later answer, so a position recorded in one answer is a position in the final text
only while it lies in the head. Hence the two phases of one attempt's log:

* **live** (:func:`take_live`, while the task runs): complete lines only, and only whole
  lines that fit the live budget (64 KiB, both streams together, counted in UTF-8 bytes);
  the first complete line that does not fit pauses live logging for the attempt. The
  budget is well inside the head, so the recorded position stays valid;
* **final** (:func:`take_final`, once, on the finished attempt's text): everything past that
  position, at most ``max_lines`` lines per stream counted with the live ones, then a count
  of the lines not logged. The marker therefore carries the final count, and the log ends
  where the output ends (or with the count), whenever the follower's reads happened.

A CRC-32 of what was logged live is checked against the final text: a Runtime Server whose
kept text no longer starts with it (a restarted server, or one keeping a head shorter than
the budget) gets its whole final text logged after a note, rather than a text cut at a
position that means nothing there.

Every line taken comes with its **offset**: the position (in characters) of its first
character in the stream's kept text of the attempt. Positions in the head are the same in
every answer, so a line logged live and again in the final part (by a runtimed instance that
restarted mid-attempt and starts over from the beginning) has the same offset both times:
``krt logs`` shows a line of an attempt's stream once per offset (issue F16).

Pure bookkeeping over plain data: the trio adapter (:mod:`runtimed.tasks`) does the logging.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from enum import Enum

#: streams of a task's output, in the order they are logged.
STREAMS: tuple[str, str] = ("stdout", "stderr")


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8; lone surrogates pass through, so this never raises."""
    return text.encode("utf-8", "surrogatepass")


class LivePause(Enum):
    """Why live logging of an attempt stopped."""

    #: still logging new lines as they come.
    NO = "no"
    #: the next complete line does not fit the live byte budget.
    BUDGET = "budget"
    #: a stream reached its logged-line bound; the final count says how many followed.
    LINES = "lines"


@dataclass(slots=True)
class StreamLog:
    """What of one stream of the attempt was logged.

    Attributes:
        offset: characters of the stream's output text logged while the task ran.
        lines: lines of the stream logged so far (live and final).
        crc: CRC-32 of the UTF-8 of ``text[:offset]`` (what was logged live).
    """

    offset: int = 0
    lines: int = 0
    crc: int = 0


@dataclass(slots=True)
class AttemptLog:
    """What of one attempt's output was logged (both streams).

    Attributes:
        attempt: the attempt this record belongs to.
        streams: per stream name (``stdout``/``stderr``), its :class:`StreamLog`.
        live_bytes: UTF-8 bytes logged while the task ran (both streams), at most the budget.
        paused: whether (and why) live logging stopped for this attempt.
    """

    attempt: int = 0
    streams: dict[str, StreamLog] = field(default_factory=dict)
    live_bytes: int = 0
    paused: LivePause = LivePause.NO

    def stream(self, name: str) -> StreamLog:
        """The record of stream ``name`` (created empty on first use)."""
        return self.streams.setdefault(name, StreamLog())


@dataclass(frozen=True, slots=True)
class FinalLines:
    """What to log of one stream when its attempt has finished.

    Attributes:
        lines: the lines to log, in order (without line ends).
        not_logged: lines past the per-stream bound (0: none; else log the count).
        restarted: the final text does not start with what was logged live, so ``lines``
            start from its beginning (log a note first; their offsets are then positions
            in a different text than the live lines', so log them without).
        offsets: per line of ``lines``, the offset of its first character in the text
            (characters).
    """

    lines: list[str]
    not_logged: int
    restarted: bool
    offsets: list[int] = field(default_factory=list)


def take_live(
    log: AttemptLog, stream: str, text: str, *, budget: int, max_lines: int
) -> list[tuple[int, str]]:
    """Take the next complete lines of a running execution's ``stream`` that fit the bounds.

    Advances ``log`` over the lines returned; sets :attr:`AttemptLog.paused` when a complete
    line is left that does not fit (the byte budget or the line bound). Does nothing once
    paused.

    Args:
        log: the attempt's record (updated in place).
        stream: ``stdout`` or ``stderr``.
        text: the stream's whole kept output as the last ``Status`` returned it.
        budget: UTF-8 bytes the attempt may log live, both streams together (>= 0).
        max_lines: lines of one stream logged per attempt (>= 0).

    Returns:
        The lines to log now as ``(offset, line)``: the offset (characters) of the line's
        first character in ``text``, the line without its line end.
    """
    if log.paused is not LivePause.NO:
        return []
    record = log.stream(stream)
    start = record.offset
    if start > len(text):  # not this output any more: leave it to the final check
        return []
    room_bytes = budget - log.live_bytes
    room_lines = max_lines - record.lines
    # each character is at least one byte: nothing past ``room_bytes`` characters can fit
    window = text[start : start + max(0, room_bytes)]
    window = window[: window.rfind("\n") + 1]
    taken: list[str] = []
    offsets: list[int] = []
    used = 0
    consumed = 0
    for line in window.splitlines(keepends=True):
        size = len(_utf8(line))
        if used + size > room_bytes or len(taken) >= room_lines:
            break
        taken.append(line)
        offsets.append(start + consumed)
        used += size
        consumed += len(line)
    if taken:
        record.crc = zlib.crc32(_utf8("".join(taken)), record.crc)
        record.offset = start + consumed
        record.lines += len(taken)
        log.live_bytes += used
    if text.find("\n", record.offset) >= 0:  # a complete line is left that did not fit
        log.paused = LivePause.LINES if len(taken) >= room_lines else LivePause.BUDGET
    # each piece is one line with its line end: splitlines() leaves the line alone
    return [(at, piece.splitlines()[0]) for at, piece in zip(offsets, taken, strict=True)]


def take_final(log: AttemptLog, stream: str, text: str, *, max_lines: int) -> FinalLines:
    """Take the rest of a finished attempt's ``stream``: all of it past what was logged live.

    Args:
        log: the attempt's record (updated in place: its line count and position).
        stream: ``stdout`` or ``stderr``.
        text: the stream's whole kept output in the finished execution's answer.
        max_lines: lines of one stream logged per attempt, live ones included (>= 0).

    Returns:
        The lines to log, the count of lines past the bound, and whether the text no longer
        started with the live-logged part (see the module docstring).
    """
    record = log.stream(stream)
    start = record.offset
    restarted = start > 0 and (start > len(text) or zlib.crc32(_utf8(text[:start])) != record.crc)
    if restarted:
        start = 0
    pieces = text[start:].splitlines(keepends=True)
    room = max(0, max_lines - record.lines)
    lines: list[str] = []
    offsets: list[int] = []
    at = start
    for piece in pieces[:room]:
        lines.append(piece.splitlines()[0])
        offsets.append(at)
        at += len(piece)
    record.offset = len(text)
    record.lines += len(lines)
    return FinalLines(lines, max(0, len(pieces) - room), restarted, offsets)
