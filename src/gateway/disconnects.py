"""Client disconnects delivered as a callback, not to a watcher task (hypercorn 0.17).

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
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from hypercorn.trio.task_group import TaskGroup

__all__ = ["EXTENSION", "DisconnectSignal", "install"]

#: The hypercorn release series whose ``TaskGroup.spawn_app`` this wraps.
SUPPORTED_SERIES: Final = "0.17."
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
_stock_spawn_app: Final = TaskGroup.spawn_app


async def _spawn_app(self: Any, app: Any, config: Any, scope: Any, send: Any) -> Put:
    """hypercorn's ``TaskGroup.spawn_app``, with a :class:`DisconnectSignal` for HTTP scopes."""
    if scope.get("type") != "http":
        return await _stock_spawn_app(self, app, config, scope, send)  # type: ignore[no-any-return]
    signal = DisconnectSignal()
    scope.setdefault("extensions", {})[EXTENSION] = signal
    put: Put = await _stock_spawn_app(self, app, config, scope, send)

    async def put_and_signal(message: Any) -> None:
        if message.get("type") == "http.disconnect":
            signal.fire()
        await put(message)

    return put_and_signal


def install() -> bool:
    """Make hypercorn fire each HTTP request's :class:`DisconnectSignal` (idempotent).

    Returns:
        ``True`` when installed (hypercorn 0.17.x), ``False`` when the installed hypercorn
        is another version and was left as it is.
    """
    if TaskGroup.spawn_app is _spawn_app:
        return True
    if not importlib.metadata.version("hypercorn").startswith(SUPPORTED_SERIES):
        return False
    TaskGroup.spawn_app = _spawn_app  # type: ignore[method-assign]
    return True
