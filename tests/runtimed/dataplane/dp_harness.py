"""Real-socket harness for the invoke proxy: fake Runtime Servers, proxies, mTLS material.

Each proxy ("node") is an :class:`InvokeProxy` served by the production listener
(:func:`runtimed.dataplane.server.serve_grpc`) on its own loopback address (127.0.0.x, like
localkube Pods), with a fake Runtime Server beside it. Caches and registries are fed
directly (the informer wiring is tested in the daemon test). Clients play the gateway with
:class:`krt.grpc.client.GrpcConnection` (which resets a cancelled call's stream).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trustme
from dp_objects import NAMESPACE, RUNTIME

from krt.grpc.client import GrpcConnection
from krt.kube.informer import EventType, InformerEvent
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed.dataplane.authz import AuthzCache, Outcome
from runtimed.dataplane.channels import Channels
from runtimed.dataplane.metrics import DataplaneMetrics
from runtimed.dataplane.ownership import OwnershipCache
from runtimed.dataplane.peer import PeerTLS, load_peer_tls
from runtimed.dataplane.proxy import InvokeProxy, ProxyIdentity, Upstream
from runtimed.dataplane.server import serve_grpc
from runtimed.functions.registry import FunctionRegistry

UID = "0f3c2a52-3b9a-4a57-9a55-2f6b8c1d9e01"
TOKENS = {
    "good-token": Outcome.ALLOWED,
    "denied-token": Outcome.DENIED,
    "bad-token": Outcome.UNAUTHENTICATED,
}


class TableReviewer:
    """Answers SSARs from :data:`TOKENS`; counts them."""

    def __init__(self) -> None:
        self.reviews = 0

    async def review(self, token: str, *, namespace: str, name: str) -> Outcome:
        self.reviews += 1
        return TOKENS.get(token, Outcome.UNAUTHENTICATED)


class FakeRuntimeServer(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    """A Runtime Server's InvokeFunction: echoes, or blocks until cancelled."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.block = False
        self.entered = trio.Event()
        self.cancelled = trio.Event()
        self.answer_not_found = False

    async def InvokeFunction(self, message: Any) -> Any:  # noqa: N802
        self.requests.append(message)
        if self.answer_not_found:
            import purerpc

            raise purerpc.NotFoundError("no registration with this run_uid")
        if self.block:
            self.entered.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.cancelled.set()
                raise
        return pb.InvokeFunctionResponse(
            registration=message.registration,
            invocation_id=message.invocation_id or "server-made",
            output=b'{"echo":' + message.input + b"}",
            content_type="application/json",
            outputs={"answer": "42"},
        )


@dataclass
class Node:
    """One runtimed's proxy plus its fake Runtime Server."""

    pod_uid: str
    host: str
    port: int
    proxy: InvokeProxy
    cache: OwnershipCache
    registry: FunctionRegistry
    server: FakeRuntimeServer
    reviewer: TableReviewer
    metrics: DataplaneMetrics = field(default_factory=DataplaneMetrics)

    def run_event(self, obj: dict[str, Any], kind: EventType = EventType.MODIFIED) -> None:
        self.cache.on_run_event(InformerEvent(kind, obj))

    def pod_event(self, obj: dict[str, Any]) -> None:
        self.cache.on_pod_event(InformerEvent(EventType.ADDED, obj))

    def ready(self, attempt: int = 1, registration_id: str = "reg-1") -> None:
        self.registry.registering(UID, key=f"{NAMESPACE}/fn", attempt=attempt, digest="d")
        self.registry.ready(UID, attempt=attempt, registration_id=registration_id)


@dataclass(frozen=True)
class TLSFiles:
    """Peer material in a directory, plus a client context without a certificate."""

    directory: Path
    ca: trustme.CA

    def peer(self) -> PeerTLS:
        return load_peer_tls(self.directory)

    def gateway_context(self) -> ssl.SSLContext:
        """What the gateway uses: trusts the CA, presents no certificate."""
        context = ssl.create_default_context(cadata=self.ca.cert_pem.bytes().decode())
        context.check_hostname = False
        context.set_alpn_protocols(["h2"])
        return context


def write_peer_tls(directory: Path, ca: trustme.CA | None = None) -> TLSFiles:
    """Issue a runtimed certificate from ``ca`` (a new CA when None) into ``directory``."""
    ca = ca or trustme.CA()
    leaf = ca.issue_cert("runtimed.kruntimes.internal")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.cert_pem.bytes())
    (directory / "tls.key").write_bytes(leaf.private_key_pem.bytes())
    (directory / "tls.crt").write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
    return TLSFiles(directory, ca)


async def start_node(
    nursery: trio.Nursery,
    *,
    pod_uid: str,
    host: str,
    tls: PeerTLS | None,
    peers: Upstream | None = None,
) -> Node:
    """Start a fake Runtime Server and a proxy on ``host`` (ports chosen by the OS)."""
    server = FakeRuntimeServer()
    server_port = await nursery.start(
        lambda task_status: serve_grpc(
            {"executor.v1.FunctionRuntime": server.service},
            host=host,
            port=0,
            tls=None,
            task_status=task_status,
        )
    )
    cache = OwnershipCache(runtime=RUNTIME)
    cache.mark_synced()
    registry = FunctionRegistry()
    reviewer = TableReviewer()
    metrics = DataplaneMetrics()
    if peers is None and tls is not None:
        peers = Channels(nursery, ssl_context=tls.client)
    proxy = InvokeProxy(
        identity=ProxyIdentity(
            pod_uid=pod_uid,
            namespace=NAMESPACE,
            runtime=RUNTIME,
            server_host=host,
            server_port=server_port,
        ),
        cache=cache,
        registrations=registry,
        authz=AuthzCache(reviewer),
        server=Channels(nursery),
        peers=peers,
        metrics=metrics,
    )
    port = await nursery.start(
        lambda task_status: serve_grpc(
            {"executor.v1.FunctionRuntime": proxy.service},
            host=host,
            port=0,
            tls=tls,
            task_status=task_status,
        )
    )
    return Node(pod_uid, host, port, proxy, cache, registry, server, reviewer, metrics)


@asynccontextmanager
async def client(
    host: str, port: int, context: ssl.SSLContext | None = None
) -> AsyncIterator[GrpcConnection]:
    """A gateway-like gRPC connection to ``host:port`` (TLS with ``context``)."""
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if context is not None:
        tls = trio.SSLStream(stream, context, server_hostname=host)
        await tls.do_handshake()
        stream = tls
    conn = GrpcConnection(stream, authority=f"{host}:{port}", scheme="https" if context else "http")
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        try:
            yield conn
        finally:
            conn.close()


def request(
    uid: str = UID, *, body: bytes = b'{"x":1}', invocation_id: str = "inv-1", **fields: Any
) -> pb.InvokeFunctionRequest:
    """An InvokeFunctionRequest as the gateway sends it (empty registration_id)."""
    return pb.InvokeFunctionRequest(
        registration=pb.FunctionRegistration(run_uid=uid, registration_id=fields.pop("reg", "")),
        invocation_id=invocation_id,
        input=body,
        content_type="application/json",
        timeout_millis=fields.pop("timeout_millis", 5000),
    )


def gateway_metadata(token: str | None = "good-token") -> list[tuple[str, str]]:
    """The metadata the gateway sends."""
    metadata = [("x-kruntime-namespace", NAMESPACE), ("x-kruntime-runtime", RUNTIME)]
    if token is not None:
        metadata.append(("authorization", f"Bearer {token}"))
    return metadata


async def invoke(
    conn: GrpcConnection,
    message: pb.InvokeFunctionRequest | None = None,
    *,
    metadata: Sequence[tuple[str, str]] | None = None,
    method: str = "InvokeFunction",
) -> pb.InvokeFunctionResponse:
    """One call; raises ``GrpcStatusError`` on a non-OK status."""
    payload = await conn.unary_call(
        "executor.v1.FunctionRuntime",
        method,
        (message or request()).SerializeToString(),
        metadata=gateway_metadata() if metadata is None else metadata,
        timeout_seconds=10,
    )
    return pb.InvokeFunctionResponse.FromString(payload)
