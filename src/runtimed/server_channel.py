"""One long-lived purerpc channel to the local Runtime Server, reconnecting when it breaks.

runtimed talks to its Runtime Server over two services (``Runtime`` for tasks,
``FunctionRuntime`` for functions); each client holds one :class:`ServerChannel`
(STYLE.md: long-lived clients outlive per-Run work, in runtimed's outer nursery).

* Until the first connection attempt ends, calls wait for it; while the server is
  unreachable, calls fail fast with :class:`ServerUnavailable` and :meth:`ServerChannel.run`
  reconnects with jittered backoff.
* purerpc 0.8 leaves calls waiting forever on a connection the peer closed, so a call its
  caller abandons (deadline) marks the connection broken, and breaking the connection
  cancels every call still waiting on it: a crash of the Runtime Server is noticed within
  one caller deadline.

No method takes a timeout: callers bound calls with ``trio.move_on_after`` / ``fail_after``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import purerpc
import trio

from krt.kube.backoff import Backoff

__all__ = ["ServerChannel", "ServerUnavailable", "status_code_name", "status_detail"]

log = logging.getLogger(__name__)

StubT = TypeVar("StubT")


class ServerUnavailable(Exception):
    """The Runtime Server could not be reached or the connection broke (no answer)."""


def status_code_name(exc: purerpc.RpcFailedError) -> str:
    """The gRPC status name of a failed call (``NOT_FOUND``, ...), else the error's type."""
    code = getattr(getattr(exc, "status", None), "status_code", None)
    name = getattr(code, "name", None)
    return str(name) if name else type(exc).__name__


def status_detail(exc: purerpc.RpcFailedError) -> str:
    """The server's status message of a failed call (the error's text when it sent none)."""
    message = getattr(getattr(exc, "status", None), "status_message", None)
    return str(message) if message else str(exc)


class ServerChannel(Generic[StubT]):
    """A reconnecting channel to ``host:port`` and the stub of one service on it.

    Args:
        host: the server's host or IP.
        port: its gRPC port.
        stub: builds the service stub from a connected channel (e.g.
            ``runtime_grpc.RuntimeStub``).
        backoff: reconnect delays (default 0.05 s doubling to 2 s, jittered).
    """

    def __init__(
        self,
        host: str,
        port: int,
        stub: Callable[[Any], StubT],
        *,
        backoff: Backoff | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._make_stub = stub
        self._backoff = backoff or Backoff(base=0.05, maximum=2.0)
        self._stub: StubT | None = None
        self._down_reason: str | None = None
        self._attempted = trio.Event()
        self._broken = trio.Event()
        self._inflight: set[trio.CancelScope] = set()
        #: Completed connections (1 after the first connect; more after reconnects).
        self.connections = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the channel and reconnect when it breaks; never returns unless cancelled.

        ``task_status.started()`` is called at once: the server may come up after runtimed.
        """
        task_status.started()
        while True:
            try:
                async with purerpc.insecure_channel(self.host, self.port) as channel:
                    self._stub = self._make_stub(channel)
                    self._down_reason = None
                    self.connections += 1
                    self._backoff.reset()
                    self._attempt_finished()
                    await self._broken.wait()
            except Exception as exc:  # connect refused, reset, h2 protocol errors
                self._down_reason = f"Runtime Server {self.host}:{self.port}: {exc!r}"
                log.info("%s", self._down_reason)
            finally:
                self._stub = None
                self._mark_broken()
                if self._down_reason is None:
                    self._down_reason = f"Runtime Server {self.host}:{self.port}: connection lost"
                self._broken = trio.Event()
                self._attempt_finished()
            await trio.sleep(self._backoff.next_delay())

    def _attempt_finished(self) -> None:
        self._attempted.set()
        self._attempted = trio.Event()

    def _mark_broken(self) -> None:
        """Make :meth:`run` reconnect and wake every call waiting on the old connection."""
        self._broken.set()
        for scope in self._inflight:
            scope.cancel()

    async def _stub_now(self) -> StubT:
        while True:
            if self._stub is not None:
                return self._stub
            if self._down_reason is not None:
                raise ServerUnavailable(self._down_reason)
            await self._attempted.wait()

    async def call(self, method: str, request: Any) -> Any:
        """One unary call of ``method`` (the stub's method name, e.g. ``"Execute"``).

        Returns:
            The response message.

        Raises:
            purerpc.RpcFailedError: the server answered with a non-OK status (callers map
                the codes).
            ServerUnavailable: not connected, or the connection failed during the call
                (the connection is then re-established by :meth:`run`).
        """
        stub = await self._stub_now()
        scope = trio.CancelScope()
        self._inflight.add(scope)
        try:
            with scope:
                return await getattr(stub, method)(request)
            raise ServerUnavailable(f"{method} to {self.host}:{self.port}: connection lost")
        except (purerpc.RpcFailedError, ServerUnavailable):
            raise
        except trio.Cancelled:
            self._mark_broken()
            raise
        except Exception as exc:
            self._mark_broken()
            raise ServerUnavailable(f"{method} to {self.host}:{self.port}: {exc!r}") from exc
        finally:
            self._inflight.discard(scope)
