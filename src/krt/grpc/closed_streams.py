"""A short memory of closed HTTP/2 streams for every connection we make or accept.

Also: a late WINDOW_UPDATE on a closed stream is ignored (:func:`tolerate_late_window_updates`).

h2 (3.x and 4.x) remembers how each closed stream ended (``H2Connection._closed_streams``),
so that a frame arriving late on a stream this side reset is answered with RST_STREAM
rather than a connection error. That memory is an LRU bounded at ``MAX_CLOSED_STREAMS``
= 65,536 entries *per connection*, about 150 bytes each (dict slot plus stream-ID int):
close to 10 MiB per long-lived connection, filled one entry per call. Under sustained
invokes every process on the path (gateway pool, runtimed's inbound, peer and Runtime
Server connections, the Runtime Server's inbound one) grew by that much for the first
65,536 calls of each connection, which the issue 10 soak read as a leak (runtimed +30%,
Runtime Server +16.5%, gateway +10.3% over 10 minutes).

Late frames on a reset stream arrive within a round trip, so :data:`CLOSED_STREAM_MEMORY`
streams (thousands of calls at our rates) is ample (about 600 KiB per connection); beyond
it h2 treats a stray frame on a long-closed stream as it would without the memory.
"""

from __future__ import annotations

from typing import Any, Final

from h2.connection import WindowUpdateFrame  # hyperframe's class, as h2 dispatches on it
from h2.exceptions import StreamClosedError
from h2.utilities import SizeLimitDict

__all__ = [
    "CLOSED_STREAM_MEMORY",
    "handle_closed_streams",
    "limit_closed_stream_memory",
    "tolerate_late_window_updates",
]

#: Closed streams whose ending an HTTP/2 connection remembers (h2's default: 65,536).
CLOSED_STREAM_MEMORY: Final = 4096


def limit_closed_stream_memory(h2_connection: Any, *, streams: int | None = None) -> None:
    """Make ``h2_connection`` remember at most ``streams`` closed streams.

    Call right after creating the connection (purerpc creates the
    :class:`h2.connection.H2Connection`; we cannot pass the bound in).

    Args:
        h2_connection: an :class:`h2.connection.H2Connection` with no closed streams yet.
        streams: how many closed streams to remember (count, >= 1); default
            :data:`CLOSED_STREAM_MEMORY`.

    Raises:
        ValueError: ``streams`` < 1.
        TypeError: ``h2_connection`` has no closed-stream memory in the layout h2 3.x/4.x
            use (a changed h2 must not silently bring the unbounded growth back).
    """
    if streams is None:
        streams = CLOSED_STREAM_MEMORY
    if streams < 1:
        raise ValueError(f"streams must be >= 1, got {streams}")
    closed = getattr(h2_connection, "_closed_streams", None)
    if not isinstance(closed, SizeLimitDict):
        raise TypeError(
            f"{type(h2_connection).__name__} has no h2 closed-stream memory to bound "
            "(_closed_streams is not an h2.utilities.SizeLimitDict)"
        )
    h2_connection._closed_streams = SizeLimitDict(closed, size_limit=streams)


def tolerate_late_window_updates(h2_connection: Any) -> None:
    """Make ``h2_connection`` ignore a WINDOW_UPDATE on a stream it has closed and forgotten.

    RFC 9113 section 6.9: a peer may send WINDOW_UPDATE after receiving our END_STREAM (it
    grants window for what it read), so a receiver "MUST NOT treat this as an error". h2
    3.x ignores it while the closed stream is still in ``H2Connection.streams``, but once
    it cleans closed streams up the same frame raises ``StreamClosedError``, a connection
    error: every call on the connection failed with it (a client reading large answers on
    many streams hit this in ~7% of its calls). h2 4.x ignores the frame; purerpc 0.8.0
    needs h2 3.x, so this wraps h2's WINDOW_UPDATE handler of the connection to do the
    same. A WINDOW_UPDATE on the connection itself (stream 0) is handled by h2 as before.

    Args:
        h2_connection: an :class:`h2.connection.H2Connection`.

    Raises:
        TypeError: ``h2_connection`` has no frame dispatch table in the layout of h2 3.x
            (a changed h2 must be looked at again).
    """
    table = getattr(h2_connection, "_frame_dispatch_table", None)
    if not isinstance(table, dict) or WindowUpdateFrame not in table:
        raise TypeError(
            f"{type(h2_connection).__name__} has no h2 3.x frame dispatch table "
            "(_frame_dispatch_table[WindowUpdateFrame])"
        )
    receive = table[WindowUpdateFrame]

    def receive_window_update(frame: Any) -> tuple[list[Any], list[Any]]:
        try:
            result: tuple[list[Any], list[Any]] = receive(frame)
        except StreamClosedError:
            if not frame.stream_id:
                raise
            return [], []
        return result

    table[WindowUpdateFrame] = receive_window_update


def handle_closed_streams(h2_connection: Any) -> None:
    """Both rules of this module for a new connection: bounded memory, late updates ignored.

    Every connection we make or accept calls this right after purerpc creates its
    :class:`h2.connection.H2Connection`.

    Raises:
        TypeError: as :func:`limit_closed_stream_memory` and
            :func:`tolerate_late_window_updates`.
    """
    limit_closed_stream_memory(h2_connection)
    tolerate_late_window_updates(h2_connection)
