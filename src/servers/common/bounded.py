"""A byte buffer that keeps at most N bytes and says so visibly when it had to cut."""

from __future__ import annotations

from servers.common import limits


class BoundedBuffer:
    """Keeps the first ``limit`` bytes written; later bytes are counted, not stored.

    When anything was dropped, :meth:`text` ends with ``marker`` and still fits in
    ``limit`` bytes (the stored head is shortened to make room).

    Args:
        limit: maximum size of :meth:`text` in UTF-8 bytes (default 1 MiB).
        marker: the truncation marker.
    """

    def __init__(
        self, limit: int = limits.TASK_OUTPUT_LIMIT_BYTES, marker: str = limits.TRUNCATION_MARKER
    ) -> None:
        self._limit = limit
        self._marker = marker.encode()
        self._data = bytearray()
        self.dropped = 0

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``, dropping what does not fit."""
        room = self._limit - len(self._data)
        if room > 0:
            self._data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    @property
    def truncated(self) -> bool:
        """True once any byte was dropped."""
        return self.dropped > 0

    def text(self) -> str:
        """Return the kept bytes as text (invalid UTF-8 replaced), with the marker if cut."""
        if not self.truncated:
            return self._data.decode(errors="replace")
        head = bytes(self._data[: max(0, self._limit - len(self._marker))])
        # never end in the middle of a multi-byte character
        return head.decode(errors="ignore") + self._marker.decode()
