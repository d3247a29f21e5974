"""A reset invocation and the next invoke arriving together (issue 8, under load).

Issue 8: "a client that disconnects mid-invocation frees the slot (the next invoke succeeds
at once)". On a loaded machine the gateway's ``RST_STREAM`` for the abandoned call and the
HEADERS/DATA of the next invoke reach runtimed in one read. The read loop then cancels the
old call and starts the new one in the same pass, and trio runs the two tasks in either
order (it reverses a batch half of the time). These tests send both in one write over a raw
HTTP/2 connection and pin trio's batch order both ways, so each order is tested every time:
the new invoke must be admitted (OK), never refused with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
import trio
from dp_harness import (
    UID,
    Node,
    TLSFiles,
    client,
    gateway_metadata,
    invoke,
    request,
    start_node,
    write_peer_tls,
)
from dp_objects import function_run, runtime_pod

from krt.grpc.client import ConnectionLostError
from krt.proto.executor.v1 import runtime_pb2 as pb
from tests import trio_batch_order

batch_order = trio_batch_order.batch_order  # the fixture, one order per run


@dataclass
class _Stream:
    data: bytes = b""
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    reset: bool = False
    ended: trio.Event = field(default_factory=trio.Event)


class RawH2:
    """A bare HTTP/2 client: frames are queued by the test and leave in one write."""

    def __init__(self, stream: trio.SSLStream[trio.SocketStream], authority: str) -> None:
        self.stream = stream
        self.authority = authority
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.streams: dict[int, _Stream] = {}
        self._lock = trio.Lock()

    def queue_invoke(self, stream_id: int, message: pb.InvokeFunctionRequest) -> None:
        headers = [
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/executor.v1.FunctionRuntime/InvokeFunction"),
            (":authority", self.authority),
            ("content-type", "application/grpc+proto"),
            ("te", "trailers"),
            ("grpc-timeout", "10S"),
            *gateway_metadata(),
        ]
        payload = message.SerializeToString()
        self.streams[stream_id] = _Stream()
        self.h2.send_headers(stream_id, headers)
        body = b"\x00" + len(payload).to_bytes(4, "big") + payload
        self.h2.send_data(stream_id, body, end_stream=True)

    async def flush(self) -> None:
        async with self._lock:
            await self.stream.send_all(self.h2.data_to_send())

    async def read(self) -> None:
        while data := await self.stream.receive_some(65536):
            for event in self.h2.receive_data(data):
                record = self.streams.get(getattr(event, "stream_id", 0))
                if record is None:
                    continue
                if isinstance(event, h2.events.DataReceived):
                    record.data += event.data
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.TrailersReceived):
                    record.trailers = {bytes(k): bytes(v) for k, v in event.headers}
                elif isinstance(event, h2.events.StreamEnded):
                    record.ended.set()
                elif isinstance(event, h2.events.StreamReset):
                    record.reset = True
                    record.ended.set()
            await self.flush()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[tuple[Node, Node, TLSFiles]]:
    """Node A (non-owner) and node B (the owner, its Runtime Server blocking calls)."""
    tls = write_peer_tls(tmp_path / "peer")
    async with trio.open_nursery() as nursery:
        with trio.fail_after(10):
            a = await start_node(nursery, pod_uid="pod-a", host="127.0.0.2", tls=tls.peer())
            b = await start_node(nursery, pod_uid="pod-b", host="127.0.0.3", tls=tls.peer())
        for node in (a, b):
            for other in (a, b):
                node.pod_event(runtime_pod(other.pod_uid, ip=other.host, port=other.port))
            node.run_event(function_run(UID, pod_uid="pod-b"))
        b.ready(attempt=1, registration_id="reg-b1")
        b.server.block = True
        with trio.fail_after(20):
            yield a, b, tls
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("entry", ["owner", "hop"])
async def test_reset_and_next_invoke_in_one_read_are_admitted(
    nodes: tuple[Node, Node, TLSFiles], batch_order: float, entry: str
) -> None:
    a, b, tls = nodes
    node = b if entry == "owner" else a
    tcp = await trio.open_tcp_stream(node.host, node.port)
    ssl_stream = trio.SSLStream(tcp, tls.gateway_context(), server_hostname=node.host)
    await ssl_stream.do_handshake()
    client = RawH2(ssl_stream, f"{node.host}:{node.port}")
    client.h2.initiate_connection()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.read)
        client.queue_invoke(1, request(invocation_id="abandoned"))
        await client.flush()
        await b.server.entered.wait()  # the first invocation holds the Run's slot
        assert UID in b.proxy.slots
        b.server.block = False
        # the caller went away and the next invoke follows: both in one write (one read)
        client.h2.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        client.queue_invoke(3, request(invocation_id="next"))
        await client.flush()
        await client.streams[3].ended.wait()
        nursery.cancel_scope.cancel()
    await b.server.cancelled.wait()  # the abandoned handler was cancelled
    answer = client.streams[3]
    assert answer.trailers.get(b"grpc-status") == b"0", answer.trailers
    response = pb.InvokeFunctionResponse.FromString(answer.data[5:])
    assert response.invocation_id == "next"
    assert [r.invocation_id for r in b.server.requests] == ["abandoned", "next"]
    assert UID not in b.proxy.slots
    await ssl_stream.aclose()


@pytest.mark.parametrize("how", ["reset", "connection-closed"])
async def test_the_slot_holder_knows_its_call_was_cancelled(
    nodes: tuple[Node, Node, TLSFiles], how: str
) -> None:
    """The slot records the call's scope; a reset or a closed connection cancels that scope
    (``cancel_called``) in the read loop, which is what lets a later claim wait."""
    _, b, tls = nodes
    async with client(b.host, b.port, tls.gateway_context()) as conn:
        async with trio.open_nursery() as nursery:

            async def abandoned() -> None:
                with contextlib.suppress(ConnectionLostError):
                    await invoke(conn)

            nursery.start_soon(abandoned)
            await b.server.entered.wait()
            (holder,) = b.proxy.slots._holders[UID]
            assert holder.call is not None
            assert not holder.call.cancel_called
            if how == "reset":
                nursery.cancel_scope.cancel()
            else:
                conn.close()
        await b.server.cancelled.wait()
    assert holder.call.cancel_called
    assert UID not in b.proxy.slots
