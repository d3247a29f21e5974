"""runtimed.server_channel: an abandoned call breaks the connection for every call on it."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import purerpc
import pytest
import trio
import trio.testing
from purerpc.grpclib.exceptions import raise_status

from krt.grpc.client import GrpcStatusError
from krt.grpc.server import CallHandler
from krt.kube.backoff import Backoff
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed import server_channel
from runtimed.server_channel import ServerChannel, ServerUnavailable


class HungRuntime(runtime_grpc.RuntimeServicer):  # type: ignore[misc]
    """A Runtime Server whose Status never answers (a hung server); Health answers."""

    def __init__(self) -> None:
        self.waiting = 0
        self.two_waiting = trio.Event()

    async def Status(self, message: Any) -> Any:  # noqa: N802
        self.waiting += 1
        if self.waiting == 2:
            self.two_waiting.set()
        await trio.sleep_forever()

    async def Health(self, message: Any) -> Any:  # noqa: N802
        return pb.HealthResponse(healthy=True, message="ok")


async def serve(nursery: trio.Nursery, servicer: HungRuntime) -> int:
    handler = CallHandler({"executor.v1.Runtime": servicer.service})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, handler)
    return int(listener.extra(anyio.abc.SocketAttribute.local_port))


async def test_an_abandoned_call_fails_the_others_at_once_and_the_channel_reconnects(
    nursery: trio.Nursery,
) -> None:
    """Seed 003 / issue 6: a caller that gives up (its deadline) marks the connection
    broken, so a hung server is noticed within one caller deadline: the other calls waiting
    on it fail as ServerUnavailable at once, and the next call uses a new connection."""
    servicer = HungRuntime()
    port = await serve(nursery, servicer)
    channel = ServerChannel(
        "127.0.0.1", port, "Runtime", backoff=Backoff(base=0.001, maximum=0.001)
    )
    await nursery.start(channel.run)
    with trio.fail_after(10):
        assert (await channel.call("Health", pb.HealthRequest())).healthy
        assert channel.connections == 1
        failures: list[str] = []
        abandoned = trio.CancelScope()

        async def waiting_call() -> None:
            with pytest.raises(ServerUnavailable) as failed:
                await channel.call("Status", pb.StatusRequest(id="other"))
            failures.append(str(failed.value))

        async def abandoning_call() -> None:
            with abandoned:
                await channel.call("Status", pb.StatusRequest(id="given-up"))

        async with trio.open_nursery() as calls:
            calls.start_soon(waiting_call)
            calls.start_soon(abandoning_call)
            await servicer.two_waiting.wait()
            await trio.testing.wait_all_tasks_blocked()
            abandoned.cancel()
        assert failures == [f"Status to 127.0.0.1:{port}: connection lost"]
        while True:  # fails fast (ServerUnavailable) until the channel has reconnected
            try:
                assert (await channel.call("Health", pb.HealthRequest())).healthy
                break
            except ServerUnavailable:
                await trio.sleep(0.001)
        assert channel.connections == 2


@pytest.mark.parametrize("code", [c.value for c in purerpc.StatusCode if c.value] + [17, 99])
def test_every_status_becomes_the_error_purerpc_raises_for_it(code: int) -> None:
    """The code -> error class table gives exactly what purerpc's raise_status raises, with
    the server's message; codes purerpc does not know are UNKNOWN naming the code."""
    failed = server_channel._rpc_failed(GrpcStatusError(code, "the detail"))
    try:
        status = purerpc.Status(purerpc.StatusCode(code), "the detail")
    except ValueError:
        status = purerpc.Status(purerpc.StatusCode.UNKNOWN, f"status {code}: the detail")
    with pytest.raises(purerpc.RpcFailedError) as expected:
        raise_status(status)
    assert type(failed) is type(expected.value)
    assert failed.status.status_code == expected.value.status.status_code
    assert failed.status.status_message == expected.value.status.status_message
    assert str(failed) == str(expected.value)
