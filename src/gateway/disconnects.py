"""Client disconnects as a callback, app messages without scheduler passes (hypercorn 0.17).

Issue 8 requires that a client disconnecting mid-invocation cancels the invocation at once.
ASGI delivers the disconnect as an ``http.disconnect`` message on ``receive()``, so the app
needs a task waiting on ``receive()`` while it waits for runtimed: a nursery, a task start
and a cancellation per invoke (about 40 microseconds of the gateway's CPU per request on
this project's 2-core machines, measured with a trio micro-benchmark), just to hear about
the rare request whose client hangs up.

:func:`install` wraps the function hypercorn's trio workers use to hand messages to an
HTTP app (``TaskGroup.spawn_app`` returns it), so that an ``http.disconnect`` also fires a
:class:`DisconnectSignal` the app finds in ``scope["extensions"]`` under
:data:`EXTENSION`. The app registers the cancel scope of its upstream call with the signal;
the disconnect cancels that scope synchronously, before the message is queued as usual. The
messages the app receives are unchanged. With another hypercorn version :func:`install`
leaves hypercorn alone and returns ``False``; the app then watches ``receive()`` itself.

The same replacement of ``spawn_app`` also hands messages over without a scheduler pass
when it can: hypercorn's ``put`` and the app's ``receive`` are a memory channel's ``send``
and ``receive``, each a checkpoint even when the message can move at once, so an invoke
request (body, end of body, disconnect) cost five extra passes of trio's scheduler, each
an ``epoll_wait`` system call and a run-loop turn (counted with strace under
``bench/invoke.py``: 14 ``epoll_wait`` per request before). Here a message goes straight
into the channel's buffer when there is room and straight out when one is waiting; only a
full buffer (``config.max_app_queue_size`` messages: back-pressure) or an empty one waits,
as before. Messages, their order and the bound are unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.task_group import _handle as hypercorn_handle

from gateway.hypercorn_series import patchable

__all__ = ["EXTENSION", "DisconnectSignal", "install"]

#: ``scope["extensions"]`` key of the request's :class:`DisconnectSignal`.
EXTENSION: Final = "krt.disconnect"


class DisconnectSignal:
    """Whether the client of one request disconnected; cancels a registered scope when it does.

    Attributes:
        gone: ``True`` once hypercorn delivered ``http.disconnect`` for the request.
    """

    __slots__ = ("_scope", "gone")

    def __init__(self) -> None:
        self.gone = False
        self._scope: trio.CancelScope | None = None

    def fire(self) -> None:
        """The client disconnected: cancel the registered scope (if any), now and later."""
        self.gone = True
        if self._scope is not None:
            self._scope.cancel()

    def cancel_on_disconnect(self, scope: trio.CancelScope | None) -> None:
        """Register ``scope`` to be cancelled by a disconnect (at once if it happened already).

        Args:
            scope: the scope to cancel, or ``None`` to unregister.
        """
        self._scope = scope
        if scope is not None and self.gone:
            scope.cancel()


Put = Callable[[Any], Awaitable[None]]
Receive = Callable[[], Awaitable[Any]]
_stock_spawn_app: Final = TaskGroup.spawn_app


def _receiver(channel: trio.MemoryReceiveChannel[Any]) -> Receive:
    """The app's ``receive``: a waiting message at once, else wait for the next one."""

    async def receive() -> Any:
        try:
            return channel.receive_nowait()
        except trio.WouldBlock:
            return await channel.receive()

    return receive


def _putter(channel: trio.MemorySendChannel[Any], signal: DisconnectSignal) -> Put:
    """hypercorn's ``put``: fires ``signal`` on a disconnect; waits only when the queue is full."""

    async def put(message: Any) -> None:
        if message.get("type") == "http.disconnect":
            signal.fire()
        try:
            channel.send_nowait(message)
        except trio.WouldBlock:
            await channel.send(message)

    return put


async def _spawn_app(self: Any, app: Any, config: Any, scope: Any, send: Any) -> Put:
    """hypercorn's ``TaskGroup.spawn_app``, with a :class:`DisconnectSignal` for HTTP scopes.

    Starts the app task as hypercorn does (its ``_handle`` wrapper: error logging and the
    final ``send(None)``), over a channel of ``config.max_app_queue_size`` messages.
    """
    if scope.get("type") != "http":
        return await _stock_spawn_app(self, app, config, scope, send)  # type: ignore[no-any-return]
    signal = DisconnectSignal()
    scope.setdefault("extensions", {})[EXTENSION] = signal
    to_app, from_server = trio.open_memory_channel[Any](config.max_app_queue_size)
    self._nursery.start_soon(
        hypercorn_handle,
        app,
        config,
        scope,
        _receiver(from_server),
        send,
        trio.to_thread.run_sync,
        trio.from_thread.run,
    )
    return _putter(to_app, signal)


def install() -> bool:
    """Make hypercorn fire each HTTP request's :class:`DisconnectSignal` (idempotent).

    Also makes hypercorn's ``put`` and the app's ``receive`` skip the checkpoint when the
    message can move at once (see the module docstring).

    Returns:
        ``True`` when installed (hypercorn 0.17.x), ``False`` when the installed hypercorn
        is another version and was left as it is.
    """
    if TaskGroup.spawn_app is _spawn_app:
        return True
    if not patchable():
        return False
    TaskGroup.spawn_app = _spawn_app  # type: ignore[method-assign]
    return True
