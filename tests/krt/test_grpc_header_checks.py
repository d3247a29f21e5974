"""krt.grpc.header_checks: h2's header rules in one pass, checked against h2 itself.

Every case is judged by h2's own inbound validation (``h2.utilities.validate_headers``) and
outbound normalization (``normalize_outbound_headers`` + ``validate_outbound_headers``), so
a rule that drifted from h2's would fail here. The connection-level tests show a server
still refuses a bad request and a client still normalizes its metadata.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.utilities
import hpack
import pytest
import trio

from krt.grpc import header_checks
from krt.grpc.client import GrpcConnection
from krt.grpc.header_checks import RequestHeaderChecks, check_request_headers, outbound_metadata
from krt.grpc.server import CallHandler
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb

SERVICE = "executor.v1.FunctionRuntime"

GOOD_REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", f"/{SERVICE}/InvokeFunction"),
    (":authority", "127.0.0.1:1"),
    ("te", "trailers"),
    ("content-type", "application/grpc+proto"),
    ("grpc-timeout", "31000m"),
    ("authorization", "Bearer abc.def.ghi"),
]


def _variants() -> list[list[tuple[str, str]]]:
    """Good and bad request blocks: one rule broken (or kept) at a time."""
    good = list(GOOD_REQUEST)
    cases = [good]
    edits: list[Any] = [
        lambda h: h + [("X-Upper", "1")],
        lambda h: h + [(" x-space", "1")],
        lambda h: h + [("x-space ", "1")],
        lambda h: h + [("x-value", " leading")],
        lambda h: h + [("x-value", "trailing\t")],
        lambda h: h + [("x-value", "")],
        lambda h: h + [("x-value", "inner space ok")],
        lambda h: h + [("te", "gzip")],
        lambda h: h + [("te", "TRAILERS")],
        lambda h: h + [("connection", "close")],
        lambda h: h + [("keep-alive", "5")],
        lambda h: h + [("transfer-encoding", "chunked")],
        lambda h: h + [("upgrade", "h2c")],
        lambda h: h + [("proxy-connection", "x")],
        lambda h: h + [(":method", "GET")],
        lambda h: h + [(":custom", "x")],
        lambda h: h[:1] + [(":status", "200")] + h[1:],
        lambda h: [(":protocol", "websocket"), *h],
        lambda h: [(":method", "CONNECT"), (":protocol", "ws"), *h[1:]],
        lambda h: [x for x in h if x[0] != ":path"],
        lambda h: [x for x in h if x[0] != ":method"],
        lambda h: [x for x in h if x[0] != ":scheme"],
        lambda h: [x for x in h if x[0] != ":authority"],
        lambda h: [x for x in h if x[0] != ":authority"] + [("host", "example")],
        lambda h: h + [("host", "127.0.0.1:1")],
        lambda h: h + [("host", "other")],
        lambda h: [(n, "" if n == ":path" else v) for n, v in h],
        lambda h: [h[4], *h[:4], *h[5:]],  # a pseudo-header after a regular one
        lambda h: h + [("cookie", "a=1")],
    ]
    cases += [edit(list(good)) for edit in edits]
    cases += [edit_b(edit_a(list(good))) for edit_a, edit_b in itertools.combinations(edits, 2)]
    return cases


def _h2_verdict(headers: list[tuple[str, str]], *, trailers: bool) -> str | None:
    flags = h2.utilities.HeaderValidationFlags(
        is_client=False, is_trailer=trailers, is_response_header=False, is_push_promise=False
    )
    raw = [(n.encode(), v.encode()) for n, v in headers]
    try:
        list(h2.utilities.validate_headers(raw, flags))
    except h2.exceptions.ProtocolError:
        return "refused"
    except IndexError:  # h2 fails this way on an empty name
        return "refused"
    return None


def _our_verdict(headers: list[tuple[str, str]], *, trailers: bool) -> str | None:
    try:
        check_request_headers(headers, trailers=trailers)
    except h2.exceptions.ProtocolError:
        return "refused"
    return None


@pytest.mark.parametrize("trailers", [False, True])
def test_request_checks_agree_with_h2_on_every_case(trailers: bool) -> None:
    cases = _variants()
    if trailers:
        cases += [[("x-trailer", "1")], [("x-trailer", " 1")], [("te", "trailers")], []]
    assert len(cases) > 400
    disagreements = [
        (case, _h2_verdict(case, trailers=trailers), _our_verdict(case, trailers=trailers))
        for case in cases
        if _h2_verdict(case, trailers=trailers) != _our_verdict(case, trailers=trailers)
    ]
    assert disagreements == []
    # both outcomes are exercised
    verdicts = {_our_verdict(case, trailers=trailers) for case in cases}
    assert verdicts == {None, "refused"}


@pytest.mark.parametrize("trailers", [False, True])
def test_remembered_checks_give_the_same_verdicts_on_every_case(trailers: bool) -> None:
    """Each case twice through one checker: a remembered block never changes a verdict."""
    checker = RequestHeaderChecks()
    for case in _variants() * 2:
        try:
            checker.check(case, trailers=trailers)
            ours = None
        except h2.exceptions.ProtocolError:
            ours = "refused"
        assert ours == _our_verdict(case, trailers=trailers), case


def test_a_passed_block_is_checked_once_unless_it_carries_a_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[object] = []

    def counting(headers: Any, *, trailers: bool) -> None:
        checked.append(headers)
        check_request_headers(headers, trailers=trailers)

    monkeypatch.setattr(header_checks, "check_request_headers", counting)
    checker = RequestHeaderChecks()
    plain = [h for h in GOOD_REQUEST if h[0] != "authorization"]
    for _ in range(3):
        checker.check(list(plain), trailers=False)
        checker.check(list(GOOD_REQUEST), trailers=False)  # a bearer token: every time
    assert len(checked) == 4
    with pytest.raises(h2.exceptions.ProtocolError):
        checker.check([("x-trailer", "1")], trailers=False)  # refused: never remembered
    with pytest.raises(h2.exceptions.ProtocolError):
        checker.check([("x-trailer", "1")], trailers=False)
    for n in range(header_checks.MAX_REMEMBERED_BLOCKS + 1):  # bounded: emptied when full
        checker.check([*plain, ("x-n", str(n))], trailers=False)
    assert len(checker._passed) <= header_checks.MAX_REMEMBERED_BLOCKS


def test_an_empty_header_name_is_refused() -> None:
    with pytest.raises(h2.exceptions.ProtocolError, match="empty header name"):
        check_request_headers([*GOOD_REQUEST, ("", "x")], trailers=False)


def _h2_outbound(metadata: list[tuple[str, str]], authority: str) -> Any:
    """The custom part of a request block after h2's outbound normalization and checks."""
    fixed = [(":method", "POST"), (":scheme", "http"), (":path", "/a/b"), (":authority", authority)]
    flags = h2.utilities.HeaderValidationFlags(
        is_client=True, is_trailer=False, is_response_header=False, is_push_promise=False
    )
    headers = h2.utilities.normalize_outbound_headers(fixed + metadata, flags)
    try:
        result = list(h2.utilities.validate_outbound_headers(headers, flags))
    except h2.exceptions.ProtocolError:
        return "refused"
    return [(str(n), str(v)) for n, v in result[len(fixed) :]]


def _our_outbound(metadata: list[tuple[str, str]], authority: str) -> Any:
    try:
        return [(n, v) for n, v in outbound_metadata(metadata, authority=authority)]
    except h2.exceptions.ProtocolError:
        return "refused"


@pytest.mark.parametrize(
    "metadata",
    [
        [("authorization", "Bearer t"), ("x-kruntime-namespace", "ns")],
        [("X-Mixed-Case", "v")],
        [(" x-padded ", "  v  ")],
        [("connection", "close"), ("x-after", "1")],
        [("keep-alive", "1")],
        [("te", "trailers")],
        [("te", "deflate")],
        [(":path", "/other")],
        [("host", "127.0.0.1:1")],
        [("host", "elsewhere")],
        [("x-hop", "1"), ("x-hop", "2")],
    ],
)
def test_outbound_metadata_matches_h2_normalization(metadata: list[tuple[str, str]]) -> None:
    assert _our_outbound(metadata, "127.0.0.1:1") == _h2_outbound(metadata, "127.0.0.1:1")


def test_outbound_cookies_are_never_indexed() -> None:
    (cookie,) = outbound_metadata([("Cookie", "session=secret")], authority="a")
    assert isinstance(cookie, hpack.NeverIndexedHeaderTuple)
    assert tuple(cookie) == ("cookie", "session=secret")


class Echo(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    seen: list[Any] = []

    async def InvokeFunction(self, message: Any, request: Any) -> Any:  # noqa: N802
        self.seen.append(list(request.custom_metadata))
        return pb.InvokeFunctionResponse(invocation_id=message.invocation_id)


@pytest.fixture
async def port(nursery: trio.Nursery) -> int:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    nursery.start_soon(listener.serve, CallHandler({SERVICE: Echo().service}))
    return int(listener.extra(anyio.abc.SocketAttribute.local_port))


@pytest.mark.parametrize("bad", [("connection", "close"), ("X-Upper", "1"), ("te", "gzip")])
async def test_the_server_refuses_an_invalid_request_block(port: int, bad: tuple[str, str]) -> None:
    """h2's checks are off on our server connections: ours must still refuse the request.

    The request is otherwise complete (headers, one message, end of stream), so a server
    that skipped the checks would run the method and answer it.
    """
    Echo.seen.clear()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
    )
    client.initiate_connection()
    client.send_headers(1, [*GOOD_REQUEST, bad], end_stream=False)
    message = pb.InvokeFunctionRequest(invocation_id="i").SerializeToString()
    client.send_data(1, b"\0" + len(message).to_bytes(4, "big") + message, end_stream=True)
    await stream.send_all(client.data_to_send())
    answered = closed = False
    with trio.fail_after(5):
        while not closed:
            data = await stream.receive_some(65536)
            closed = not data
            for event in client.receive_data(data) if data else ():
                answered |= isinstance(event, h2.events.ResponseReceived)
                closed |= isinstance(event, h2.events.ConnectionTerminated)
    assert not answered
    assert Echo.seen == []
    await stream.aclose()


async def test_client_metadata_arrives_normalized(port: int, nursery: trio.Nursery) -> None:
    Echo.seen.clear()
    conn = GrpcConnection(await trio.open_tcp_stream("127.0.0.1", port), authority="x")
    await nursery.start(conn.run)
    request = pb.InvokeFunctionRequest(invocation_id="i").SerializeToString()
    metadata = [("X-Kruntime-Namespace", " ns "), ("connection", "close")]
    await conn.unary_call(SERVICE, "InvokeFunction", request, metadata=metadata)
    assert Echo.seen == [[("x-kruntime-namespace", "ns")]]
    conn.close()
