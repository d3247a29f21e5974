"""Shared fixtures for Runtime Server tests (Python here; the Bash tests use them too).

Fixtures are generic over the language adapter:

* ``start_runtime_server`` -- an async context manager factory:
  ``async with start_runtime_server(adapter, work_dir) as server:`` runs ``serve()`` on
  127.0.0.1 port 0 and yields a :class:`RunningServer` with purerpc stubs for both services.
  Extra keyword arguments go to ``serve()`` (e.g. ``clock=``, ``cancel_grace_seconds=``).
* ``register_request`` -- builds a valid ``RegisterFunctionRequest`` with overrides.
* ``fake_clock`` -- a controllable wall clock (nanoseconds) for ``last_activity_unix_nano``.
* ``grpclib_session`` -- runs ``async def body(call)`` against a server with grpclib (an
  independent gRPC implementation on asyncio) in its own thread; ``call(service, method,
  request, reply_type)`` performs one unary call, e.g.
  ``await call("executor.v1.Runtime", "Health", pb.HealthRequest(), pb.HealthResponse)``.

Test files under tests/servers/ share one import namespace (no ``__init__.py``, because a
``tests/servers`` package would shadow ``src/servers``): give them unique basenames.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import purerpc
import pytest
import trio

from krt.proto.executor.v1 import runtime_grpc, runtime_pb2
from servers.common.adapter import FunctionAdapter
from servers.common.app import serve

#: a well-formed registration digest (lowercase SHA-256 hex).
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


@dataclass
class RunningServer:
    """A Runtime Server started by ``start_runtime_server``."""

    host: str
    port: int
    work_dir: Path
    channel: Any
    runtime: runtime_grpc.RuntimeStub
    functions: runtime_grpc.FunctionRuntimeStub


@asynccontextmanager
async def _running_server(
    adapter: FunctionAdapter, work_dir: Path, **serve_kwargs: Any
) -> AsyncIterator[RunningServer]:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(
            functools.partial(
                serve, adapter, host="127.0.0.1", port=0, work_dir=work_dir, **serve_kwargs
            )
        )
        async with purerpc.insecure_channel(host, port) as channel:
            yield RunningServer(
                host=host,
                port=port,
                work_dir=work_dir,
                channel=channel,
                runtime=runtime_grpc.RuntimeStub(channel),
                functions=runtime_grpc.FunctionRuntimeStub(channel),
            )
        nursery.cancel_scope.cancel()


@pytest.fixture
def start_runtime_server() -> Callable[..., AbstractAsyncContextManager[RunningServer]]:
    """Return ``(adapter, work_dir, **serve_kwargs) -> async context manager of RunningServer``."""
    return _running_server


@pytest.fixture
def register_request(tmp_path: Path) -> Callable[..., runtime_pb2.RegisterFunctionRequest]:
    """Return a builder of valid RegisterFunctionRequests (run ``run-1``, attempt 1).

    The default ``working_dir`` is ``tmp_path / "fn"`` (create it in the test).
    """

    def build(**overrides: Any) -> runtime_pb2.RegisterFunctionRequest:
        fields: dict[str, Any] = {
            "run_uid": "run-1",
            "registration_attempt": 1,
            "working_dir": str(tmp_path / "fn"),
            "handler": "handler.handle",
            "registration_digest": DIGEST_A,
            "idle_timeout_seconds": 300,
        }
        fields.update(overrides)
        return runtime_pb2.RegisterFunctionRequest(**fields)

    return build


class FakeClock:
    """A wall clock for tests: returns ``now`` (nanoseconds); advance it by hand."""

    def __init__(self, start: int = 1_700_000_000_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += int(seconds * 1_000_000_000)


@pytest.fixture
def fake_clock() -> FakeClock:
    """A :class:`FakeClock` starting at a fixed instant."""
    return FakeClock()


#: ``call(service, method, request, reply_type)`` as given to a grpclib session body.
GrpclibCall = Callable[[str, str, Any, type], Awaitable[Any]]


async def _grpclib_session(
    host: str, port: int, body: Callable[[GrpclibCall], Awaitable[Any]]
) -> Any:
    from grpclib.client import Channel, UnaryUnaryMethod

    async def main() -> Any:
        channel = Channel(host, port)
        try:

            async def call(service: str, method: str, request: Any, reply_type: type) -> Any:
                stub = UnaryUnaryMethod(channel, f"/{service}/{method}", type(request), reply_type)
                return await stub(request, timeout=10)

            return await body(call)
        finally:
            channel.close()

    return await trio.to_thread.run_sync(lambda: asyncio.run(main()))


@pytest.fixture
def grpclib_session() -> Callable[
    [str, int, Callable[[GrpclibCall], Awaitable[Any]]], Awaitable[Any]
]:
    """Return ``async (host, port, body) -> body's result``, run by grpclib in a thread."""
    return _grpclib_session
