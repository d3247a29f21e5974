"""One socket write per HTTP/1.1 response head and first body chunk (hypercorn 0.17).

hypercorn's HTTP/1.1 protocol writes every h11 event on its own: the status line and
headers, then the body, each as a separate TLS record and ``send`` system call. On loopback
every write wakes the client once more, and on this project's 2-core machines those system
calls and wakeups were the largest single cost of an invoke (profiled with py-spy under
``bench/invoke.py``: about a fifth of the gateway's busy samples were inside ``send``). The
ASGI app cannot change that: hypercorn sends the head only when the first body message
arrives, and then immediately writes both, separately.

:func:`install` makes the head wait for the next h11 event of the same response (the body,
or the end of a body-less response) and go out in the same write, and skips the empty write
hypercorn makes for the end of a ``Content-Length`` body. The bytes on the wire are
unchanged; only their grouping into writes differs.

The connection's write itself (``TCPServer.protocol_send``) takes a ``trio.Lock`` so that
writes never interleave; acquiring it is a checkpoint, one more pass of trio's scheduler
per response although the lock is free every time but when two writers really overlap.
:func:`install` wraps that method so a free lock is taken without the checkpoint
(``acquire_nowait``; a trio lock that is free has no waiters); a held lock is waited for
as before. The write is hypercorn's, shielded from cancellation as hypercorn does.

hypercorn offers no hook for this, so the one method that turns h11 events into writes is
replaced (and the write wrapped), for the pinned hypercorn 0.17 only (pyproject.toml);
with another version :func:`install` leaves hypercorn alone and returns ``False``
(responses then take two writes, which is slower but correct).
"""

from __future__ import annotations

from typing import Any, Final

import h11
import trio
from hypercorn.events import Closed, RawData
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

from gateway.hypercorn_series import patchable

_HEAD: Final = "_krt_response_head"
_stock_protocol_send: Final = TCPServer.protocol_send


async def _send_h11_event(self: Any, event: Any) -> None:
    """hypercorn's ``H11Protocol._send_h11_event``, holding a response head for the next event.

    Args:
        self: the ``H11Protocol`` of one connection.
        event: the h11 event to serialize and write.
    """
    try:
        data = self.connection.send(event)
    except h11.LocalProtocolError:
        if self.connection.their_state != h11.ERROR:
            raise
        return  # as hypercorn: the peer broke the protocol, nothing more is written
    head: bytes | None = getattr(self, _HEAD, None)
    if type(event) is h11.Response:
        # written with the next event of this response, which hypercorn sends at once
        # (Data or EndOfMessage), never after a checkpoint of its own
        setattr(self, _HEAD, data if head is None else head + data)
        return
    if head is not None:
        setattr(self, _HEAD, None)
        data = head + data
    if data:  # the end of a Content-Length body is no bytes: no write (a lock and a checkpoint)
        await self.send(RawData(data=data))


async def _protocol_send(self: Any, event: Any) -> None:
    """hypercorn's ``TCPServer.protocol_send``, taking a free send lock without a checkpoint.

    Args:
        self: the ``TCPServer`` of one connection.
        event: what the protocol wants done (write bytes, close, idle/busy).
    """
    lock: trio.Lock = self.send_lock
    if type(event) is not RawData or lock.locked():
        await _stock_protocol_send(self, event)
        return
    lock.acquire_nowait()
    try:
        with trio.CancelScope(shield=True):
            await self.stream.send_all(event.data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        await self.protocol.handle(Closed())
    finally:
        lock.release()


def install() -> bool:
    """Make hypercorn write each response head together with what follows it (idempotent).

    Returns:
        ``True`` when installed (hypercorn 0.17.x), ``False`` when the installed hypercorn
        is another version and was left as it is.
    """
    if H11Protocol._send_h11_event is _send_h11_event:
        return True
    if not patchable():
        return False
    H11Protocol._send_h11_event = _send_h11_event  # type: ignore[method-assign]
    TCPServer.protocol_send = _protocol_send  # type: ignore[method-assign]
    return True
