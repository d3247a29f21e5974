"""A byte buffer that keeps the head and the tail of a stream within a fixed bound.

Task output is read as it arrives and may be unbounded, while a failed task's cause is
usually in its last lines (runtimed puts a stderr *tail* in the Run's failure message, seed
003 "ExecutionFailed"). The buffer therefore keeps the first ``head`` bytes (how the task
started) and the last ``limit - head`` bytes (how it ended) and counts what falls between.
It stores at most ``limit`` bytes at any moment: bytes leave the tail before new ones enter,
so a 3 GiB stream costs no more memory than a 1 MiB one.
"""

from __future__ import annotations

import codecs

from servers.common import limits

#: a UTF-8 continuation byte is ``0b10xxxxxx``.
_CONTINUATION_MASK = 0xC0
_CONTINUATION_BITS = 0x80
#: a UTF-8 character is at most 4 bytes, so at most 3 continuation bytes follow its start.
_MAX_CONTINUATION_BYTES = 3


class BoundedBuffer:
    """Keeps the first ``head`` and the last ``limit - head`` bytes written; the rest is counted.

    When bytes were dropped, :meth:`text` is the head, then ``marker`` (formatted with the
    number of bytes dropped), then the tail: at most ``limit`` bytes of output plus the
    marker.

    Args:
        limit: bytes stored at most (head plus tail); default 1 MiB.
        head: bytes kept from the start of the stream (default 256 KiB); the remaining
            ``limit - head`` bytes hold the end of the stream.
        marker: the truncation marker; ``{dropped}``, ``{head}`` and ``{tail}`` are replaced
            by the number of bytes dropped, kept from the start and kept from the end.

    Raises:
        ValueError: ``limit`` is negative, or ``head`` is not within ``0..limit``.
    """

    def __init__(
        self,
        limit: int = limits.TASK_OUTPUT_LIMIT_BYTES,
        *,
        head: int = limits.TASK_OUTPUT_HEAD_BYTES,
        marker: str = limits.TRUNCATION_MARKER,
    ) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 bytes, got {limit}")
        head = min(head, limit)
        if head < 0:
            raise ValueError(f"head must be within 0..limit ({limit}) bytes, got {head}")
        self._head_limit = head
        self._tail_limit = limit - head
        self._marker = marker
        self._head = bytearray()
        self._tail = bytearray()
        #: bytes written but no longer stored.
        self.dropped = 0

    @property
    def stored(self) -> int:
        """Bytes held right now (never more than ``limit``)."""
        return len(self._head) + len(self._tail)

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``: fill the head first, then the tail, evicting its oldest bytes."""
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if len(chunk) >= self._tail_limit:
            self.dropped += len(self._tail) + len(chunk) - self._tail_limit
            self._tail = bytearray(chunk[len(chunk) - self._tail_limit :])
            return
        excess = len(self._tail) + len(chunk) - self._tail_limit
        if excess > 0:
            # evict before appending, so the tail never holds more than its share
            del self._tail[:excess]
            self.dropped += excess
        self._tail += chunk

    @property
    def truncated(self) -> bool:
        """True once any byte was dropped."""
        return self.dropped > 0

    def text(self) -> str:
        """Return the kept output as text (invalid UTF-8 replaced), with the marker if cut.

        Around the cut, a character split by it is dropped whole (and counted in the
        marker) rather than shown as a replacement character.
        """
        if not self.truncated:
            return (self._head + self._tail).decode(errors="replace")
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        head = decoder.decode(bytes(self._head), final=False)
        partial, _ = decoder.getstate()
        skip = 0
        while (
            skip < min(_MAX_CONTINUATION_BYTES, len(self._tail))
            and self._tail[skip] & _CONTINUATION_MASK == _CONTINUATION_BITS
        ):
            skip += 1
        tail = bytes(self._tail[skip:]).decode(errors="replace")
        marker = self._marker.format(
            dropped=self.dropped + len(partial) + skip,
            head=len(self._head) - len(partial),
            tail=len(self._tail) - skip,
        )
        return head + marker + tail
