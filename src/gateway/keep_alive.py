"""One keep-alive timer task per connection, with a moving deadline (hypercorn 0.17).

hypercorn closes an HTTP/1.1 connection that stays idle for ``keep_alive_timeout`` seconds,
or at once when the server shuts down. It does so with a timer task that it stops when a
request arrives and starts afresh when the response is done: per request a lock taken
twice, a task started (``nursery.start``: two scheduler passes) and one cancelled. On this
project's 2-core machines that was 60-90 microseconds of the gateway's CPU per invoke
(py-spy under ``bench/invoke.py``: 7% of its samples, ``TrioSingleTask.restart``/``stop``).

:func:`install` gives each connection a :class:`KeepAliveTimer` instead: one task per
connection waits under a cancel scope whose deadline is ``now + keep_alive_timeout`` while
the connection is idle and infinite while it is busy, so a request costs two attribute
writes and no task, lock or checkpoint. The behaviour is hypercorn's:

* idle for ``keep_alive_timeout`` seconds: the server closes the connection;
* shutdown (``context.terminated``) while idle: closed at once; while busy: left to the
  protocol, which closes the connection after the response (as hypercorn does);
* the connection ends (the client closed it, mid-request or idle): the timer task ends
  with it, so nothing waits on a closed connection (hypercorn's own timer lingered up to
  ``keep_alive_timeout`` after a client closed an idle connection).

The last point needs to know when the connection's read loop is over, so the loop
(``TCPServer._read_data``) is replaced by :func:`_read_data`, which tells the timer. It is
hypercorn's loop except that without a ``read_timeout`` (hypercorn's default, and the
gateway's) it reads without wrapping each read in ``trio.fail_after(inf)``: a cancel scope
per read (about 9 microseconds) that can never fire. Both patches are for the pinned
hypercorn 0.17 only; with another version :func:`install` leaves hypercorn alone and
returns ``False``.
"""

from __future__ import annotations

import math
from typing import Any, Final

import trio
from hypercorn.events import Closed, RawData
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer

from gateway.hypercorn_series import patchable

__all__ = ["KeepAliveTimer", "install"]


_stock_init: Final = TCPServer.__init__
_READ_ERRORS: Final = (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError)


class KeepAliveTimer:
    """The idle timer of one hypercorn connection (stands in for its ``TrioSingleTask``).

    hypercorn calls :meth:`restart` when the connection becomes idle and :meth:`stop` when a
    request arrives; the wrapped read loop calls :meth:`connection_ended`.

    Args:
        server: the connection's ``TCPServer`` (its ``config.keep_alive_timeout``, seconds,
            its ``context.terminated`` event and its ``_initiate_server_close``).
    """

    __slots__ = ("_ended", "_idle", "_running", "_scope", "_server")

    def __init__(self, server: Any) -> None:
        self._server = server
        self._scope = trio.CancelScope()
        self._running = False
        self._idle = False
        self._ended = False

    @property
    def running(self) -> bool:
        """Whether the connection's timer task is alive."""
        return self._running

    async def restart(self, task_group: Any, action: Any) -> None:
        """The connection is idle: close it ``keep_alive_timeout`` seconds from now.

        Args:
            task_group: the connection's hypercorn ``TaskGroup`` (the timer task lives there).
            action: hypercorn's own timeout action; unused (:meth:`_run` does its job).
        """
        if self._ended:
            return
        self._idle = True
        deadline = trio.current_time() + self._server.config.keep_alive_timeout
        if self._running:
            self._scope.deadline = deadline
            return
        self._scope = trio.CancelScope(deadline=deadline)
        self._running = True
        task_group.spawn(self._run, self._scope)

    async def stop(self) -> None:
        """The connection is busy: no timeout until it is idle again."""
        self._idle = False
        self._scope.deadline = math.inf

    def connection_ended(self) -> None:
        """The connection's read loop is over: end the timer task now."""
        self._ended = True
        self._scope.cancel()

    async def _run(self, scope: trio.CancelScope) -> None:
        try:
            with scope:
                await self._server.context.terminated.wait()
            if self._ended or not self._idle:
                # gone already, or shutdown during a request: the protocol closes the
                # connection once the response is done (hypercorn's behaviour)
                return
            with trio.CancelScope(shield=True):
                await self._server._initiate_server_close()
        finally:
            if self._scope is scope:
                self._running = False


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    _stock_init(self, *args, **kwargs)
    self.idle_task = KeepAliveTimer(self)


async def _read_data(self: Any) -> None:
    """hypercorn's ``TCPServer._read_data``: feed the protocol until EOF, then end the timer."""
    read_timeout = self.config.read_timeout
    try:
        while True:
            try:
                if read_timeout:
                    with trio.fail_after(read_timeout):
                        data = await self.stream.receive_some(MAX_RECV)
                else:
                    data = await self.stream.receive_some(MAX_RECV)
            except _READ_ERRORS:
                break
            await self.protocol.handle(RawData(data))
            if data == b"":
                break
        await self.protocol.handle(Closed())
    finally:
        timer = self.idle_task
        if isinstance(timer, KeepAliveTimer):
            timer.connection_ended()


def install() -> bool:
    """Give every hypercorn connection a :class:`KeepAliveTimer` (idempotent).

    Returns:
        ``True`` when installed (hypercorn 0.17.x), ``False`` when the installed hypercorn
        is another version and was left as it is.
    """
    if TCPServer.__init__ is _init:
        return True
    if not patchable():
        return False
    TCPServer.__init__ = _init  # type: ignore[method-assign]
    TCPServer._read_data = _read_data  # type: ignore[method-assign]
    return True
