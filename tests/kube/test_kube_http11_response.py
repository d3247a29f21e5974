"""The response reader of the HTTP/1.1 pool: the usual shape here, everything else to h11.

Pure parts (:mod:`krt.kube.http11_response`) are tested synchronously and exhaustively; the
hand-over to h11 and the keep-alive decisions are tested through the pool against a
scripted server (``serving`` from test_kube_http11).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from test_kube_http11 import Peer, Server, serving

from krt.kube.http11 import TransportError
from krt.kube.http11_response import (
    MAX_CHUNK_LINE_BYTES,
    MAX_HEAD_BYTES,
    ChunkedBody,
    MalformedBody,
    Unusual,
    parse_head,
)

HEAD = (
    b"HTTP/1.1 200 OK\r\nAudit-Id: a-1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 7\r\n\r\n"
)

# -- the usual head ------------------------------------------------------------------------


def test_usual_head_with_a_length() -> None:
    head = parse_head(HEAD + b'{"a":1}', "GET")
    assert head is not None
    assert (head.status, head.length, head.keep_alive, head.size) == (200, 7, True, len(HEAD))
    assert head.headers == [
        (b"audit-id", b"a-1"),
        (b"content-type", b"application/json"),
        (b"content-length", b"7"),
    ]


def test_usual_head_chunked_and_connection_close() -> None:
    data = b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: Chunked\r\nConnection: Close\r\n\r\n"
    head = parse_head(data, "PUT")
    assert head is not None
    assert (head.status, head.length, head.keep_alive) == (409, -1, False)


def test_a_repeated_equal_length_is_usual() -> None:
    """localkube before this change sent its content-length twice: h11 accepts that too."""
    head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n", "GET")
    assert head is not None
    assert head.length == 3


def test_status_line_without_a_reason_is_usual() -> None:
    head = parse_head(b"HTTP/1.1 201\r\nContent-Length: 0\r\n\r\n", "POST")
    assert head is not None
    assert head.status == 201


def test_incomplete_head_asks_for_more() -> None:
    for cut in range(len(HEAD) - 1):
        assert parse_head(HEAD[:cut], "GET") is None


@pytest.mark.parametrize(
    ("data", "method"),
    [
        pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", "GET", id="http-1.0"),
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n", "PUT", id="interim-1xx"),
        pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n", "DELETE", id="204"),
        pytest.param(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "GET", id="304"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", id="head-method"),
        pytest.param(b"HTTP/1.1 200 OK\r\n\r\n", "GET", id="close-delimited"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            id="both-framings",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "GET",
            id="two-different-lengths",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "GET", id="bad-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "GET", id="coding"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n folded\r\n\r\n", "GET", id="obs-fold"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\n", "GET", id="space-before-colon"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 1\r\n\r\n", "GET", id="nul-in-value"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nX: a\nb\r\nContent-Length: 1\r\n\r\n", "GET", id="bare-lf"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 1\r\n\r\n", "GET", id="bare-cr"
        ),
        pytest.param(b"HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\n", "GET", id="bad-status"),
        pytest.param(b"NOT HTTP AT ALL\r\n\r\n", "GET", id="garbage"),
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 4000, "GET", id="over-long-head"),
    ],
)
def test_unusual_heads_go_to_h11(data: bytes, method: str) -> None:
    with pytest.raises(Unusual):
        parse_head(data, method)


def test_head_limit() -> None:
    assert parse_head(b"HTTP/1.1 200 OK\r\n" + b"X" * (MAX_HEAD_BYTES - 100), "GET") is None


# -- chunked bodies ------------------------------------------------------------------------


def _chunk(data: bytes, extension: bytes = b"") -> bytes:
    return b"%x%s\r\n" % (len(data), extension) + data + b"\r\n"


BODY = _chunk(b'{"a":1}\n') + _chunk(b"x" * 300, b";name=value") + b"0\r\nTrailer: t\r\n\r\n"


def test_chunked_body_in_one_piece() -> None:
    body = ChunkedBody()
    assert b"".join(body.feed(BODY)) == b'{"a":1}\n' + b"x" * 300
    assert body.done
    assert body.leftover == b""


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64])
def test_chunked_body_fed_in_small_pieces(step: int) -> None:
    body = ChunkedBody()
    out = b""
    for start in range(0, len(BODY), step):
        assert not body.done
        out += b"".join(body.feed(BODY[start : start + step]))
    assert out == b'{"a":1}\n' + b"x" * 300
    assert body.done


def test_data_is_returned_before_its_chunk_is_whole() -> None:
    body = ChunkedBody()
    assert body.feed(b"a\r\n01234") == [b"01234"]
    assert body.feed(b"56789\r\n") == [b"56789"]


def test_bytes_after_the_body_are_kept_as_leftover() -> None:
    body = ChunkedBody()
    body.feed(_chunk(b"x") + b"0\r\n\r\nHTTP/1.1")
    assert body.done
    assert body.leftover == b"HTTP/1.1"
    assert body.feed(b" 200") == []
    assert body.leftover == b"HTTP/1.1 200"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        pytest.param(b"zz\r\n", "bad chunk-size line 'zz'", id="not-hex"),
        pytest.param(b"0x5\r\n", "bad chunk-size", id="0x-prefix"),
        pytest.param(b"+5\r\n", "bad chunk-size", id="sign"),
        pytest.param(b"\r\n", "bad chunk-size", id="empty"),
        pytest.param(b"3\r\nabcX\r\n", "not followed by CRLF", id="no-crlf-after-data"),
        pytest.param(b"1" * (MAX_CHUNK_LINE_BYTES + 1), "too long", id="size-line-too-long"),
        pytest.param(
            b"0\r\n" + b"T" * (MAX_CHUNK_LINE_BYTES + 1), "trailer line is too long", id="trailer"
        ),
    ],
)
def test_malformed_chunked_bodies_are_refused(data: bytes, words: str) -> None:
    with pytest.raises(MalformedBody, match=words):
        ChunkedBody().feed(data)


# -- through the pool ----------------------------------------------------------------------


def _respond(raw: bytes) -> object:
    async def handler(server: Server, peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.stream.send_all(raw)
            peer.h11 = type(peer.h11)(peer.h11.our_role)  # the scripted answer bypassed h11

    return handler


async def test_a_chunked_answer_to_a_request_is_read_whole_and_kept() -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + BODY
    async with serving(_respond(raw)) as (server, pool):  # type: ignore[arg-type]
        for _ in range(2):
            assert await pool.request("GET", "/", []) == (200, b'{"a":1}\n' + b"x" * 300)
        assert server.connections == 1


async def test_interim_answer_is_skipped_by_h11_and_the_connection_kept() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    async with serving(_respond(raw)) as (server, pool):  # type: ignore[arg-type]
        for _ in range(2):
            assert await pool.request("PUT", "/", [], b"x") == (200, b"ok")
        assert server.connections == 1


async def test_an_unusual_answer_split_across_reads_is_read_by_h11() -> None:
    async def slow(server: Server, peer: Peer) -> None:
        while await peer.request() is not None:
            for part in (b"HTTP/1.1 200 OK\r\nX: 1\r\n", b" folded\r\nContent-Length: 2\r\n\r\nok"):
                await peer.stream.send_all(part)
                await trio.testing.wait_all_tasks_blocked()  # the client has read this part
            peer.h11 = type(peer.h11)(peer.h11.our_role)

    async with serving(slow) as (server, pool):
        for _ in range(2):
            assert await pool.request("GET", "/", []) == (200, b"ok")  # h11 unfolds the line
        assert server.connections == 1


async def test_a_malformed_chunk_is_a_transport_error_and_closes() -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    async with serving(_respond(raw)) as (_, pool):  # type: ignore[arg-type]
        with pytest.raises(TransportError, match="malformed response: bad chunk-size line"):
            await pool.request("GET", "/", [])
        assert (pool.active_connections, pool.idle_connections) == (0, 0)
        with pytest.raises(TransportError, match="bad chunk-size line"):
            async with pool.stream("GET", "/w", []) as response:
                [line async for line in response.iter_lines()]
        assert (pool.active_connections, pool.idle_connections) == (0, 0)


async def test_bytes_after_a_response_make_the_connection_unusable() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"
    async with serving(_respond(raw)) as (server, pool):  # type: ignore[arg-type]
        assert await pool.request("GET", "/", []) == (200, b"ok")
        assert pool.idle_connections == 0
        assert await pool.request("GET", "/", []) == (200, b"ok")
        assert server.connections == 2


async def test_eof_in_a_chunked_body_is_a_transport_error() -> None:
    async def short(server: Server, peer: Peer) -> None:
        await peer.request()
        await peer.stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")

    async with serving(short) as (_, pool):
        with pytest.raises(TransportError, match="closed the connection before the response"):
            await pool.request("GET", "/", [])
        assert (pool.active_connections, pool.idle_connections) == (0, 0)


async def test_an_empty_body_with_a_length_is_kept() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    async with serving(_respond(raw)) as (server, pool):  # type: ignore[arg-type]
        for _ in range(3):
            assert await pool.request("DELETE", "/", []) == (200, b"")
        assert server.connections == 1


async def test_watch_lines_split_and_joined_across_chunks() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + _chunk(b'{"a":1}\n')
        + _chunk(b'{"b"')
        + _chunk(b":2}\n{")
        + _chunk(b'"c":3}\n\n{"d":4}')
        + b"0\r\n\r\n"
    )
    async with serving(_respond(raw)) as (server, pool):  # type: ignore[arg-type]
        async with pool.stream("GET", "/w", []) as response:
            lines = [line async for line in response.iter_lines()]
        assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b"", b'{"d":4}']
        assert pool.idle_connections == 1
