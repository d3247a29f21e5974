"""The fast request-head reader (:mod:`localkube.http_head`) agrees with h11 wherever it answers.

It may decline anything (h11 then parses), but a head it accepts must give exactly what
h11 gives: method, target, lowercased header names with stripped values, body length.
"""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localkube import http_head
from localkube.http_head import DECLINE, NEED_MORE, Head, read_head

LIMIT = 64 * 1024


def h11_parse(data: bytes) -> tuple[h11.Request, bytes] | None:
    """What h11 makes of ``data`` as one complete request (None: an error or incomplete)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMIT)
    conn.receive_data(data)
    try:
        request = conn.next_event()
        if not isinstance(request, h11.Request):
            return None
        body = b""
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            else:
                return None
    except h11.RemoteProtocolError:
        return None


def assert_same_as_h11(data: bytes) -> Head | Any:
    found = read_head(data, max_head_bytes=LIMIT)
    if isinstance(found, Head):
        parsed = h11_parse(data)
        assert parsed is not None, f"h11 rejects what the fast path accepted: {data!r}"
        request, body = parsed
        assert found.method == request.method
        assert found.target == request.target
        assert request.http_version == b"1.1"
        assert found.headers == list(request.headers)
        assert found.content_length == len(body)
        assert data[found.size :] == body
    return found


PLAIN = (
    b"PUT /apis/kruntimes.io/v1alpha1/namespaces/default/runs/r/status?dryRun=All HTTP/1.1\r\n"
    b"Host: 127.0.0.1:6443\r\nAuthorization: Bearer abc.def.ghi\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


def test_a_plain_request_is_parsed_as_h11_parses_it() -> None:
    found = assert_same_as_h11(PLAIN)
    assert isinstance(found, Head)
    assert found.method == b"PUT"
    assert found.content_length == 2
    assert (b"authorization", b"Bearer abc.def.ghi") in found.headers
    assert not found.close


def test_an_incomplete_head_needs_more_and_a_complete_one_does_not() -> None:
    head_end = PLAIN.index(b"\r\n\r\n") + 4
    for cut in range(head_end):
        assert read_head(PLAIN[:cut], max_head_bytes=LIMIT) is NEED_MORE
    assert isinstance(read_head(PLAIN[:head_end], max_head_bytes=LIMIT), Head)


def test_connection_close_is_reported() -> None:
    found = assert_same_as_h11(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n")
    assert isinstance(found, Head)
    assert found.close


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",  # HTTP/1.0: keep-alive rules differ
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  folded\r\n\r\n",  # obsolete line folding
        b"GET / HTTP/1.1\nHost: a\n\n",  # bare LF line ends
        b"GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\nx",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n",  # non-ASCII value
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",  # control byte
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: 1\r\n\r\n",
        b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",  # leading blank line
        b"\x16\x03\x01\x02\x00",  # a TLS handshake on plain HTTP
        b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
    ],
)
def test_unusual_requests_are_left_to_h11(data: bytes) -> None:
    assert read_head(data, max_head_bytes=LIMIT) is DECLINE


def test_a_head_over_the_limit_is_left_to_h11() -> None:
    big = b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"y" * 200
    assert read_head(big, max_head_bytes=100) is DECLINE  # incomplete and already too large
    assert read_head(big + b"\r\n\r\n", max_head_bytes=100) is DECLINE
    assert isinstance(read_head(big + b"\r\n\r\n", max_head_bytes=LIMIT), Head)


TOKEN = st.text("abcXYZ019-!#$%&'*+.^_`|~", min_size=1, max_size=8)
VISIBLE = st.sampled_from([b"a", b"Z", b"0", b"/", b"?", b"=", b"%", b"~", b"\x21", b"\x7e"])
ODD = st.sampled_from([b"\x00", b"\x01", b"\r", b"\n", b"\x7f", b"\x80", b"\xff", b"\x0b", b" "])


def mostly(draw: st.DrawFn, common: st.SearchStrategy[bytes], *, max_size: int) -> bytes:
    """Bytes from ``common``, with an odd byte in about one draw out of six."""
    parts = draw(st.lists(common, max_size=max_size))
    if parts and draw(st.integers(0, 5)) == 0:
        parts.insert(draw(st.integers(0, len(parts))), draw(ODD))
    return b"".join(parts)


@st.composite
def request_heads(draw: st.DrawFn) -> bytes:
    """Request bytes near the common shape, sometimes with an odd byte or line."""
    method = draw(st.sampled_from([b"GET", b"PUT", b"POST", b"DELETE", b"PATCH", b"HEAD"]))
    target = b"/" + mostly(draw, VISIBLE, max_size=12)
    version = draw(st.sampled_from([b"HTTP/1.1"] * 4 + [b"HTTP/1.0", b"HTTP/2.0"]))
    lines = [method + b" " + target + b" " + version]
    lines += [b"Host: h"] * draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
    body = draw(st.binary(max_size=20))
    if draw(st.booleans()):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    else:
        body = b""
    for _ in range(draw(st.integers(0, 4))):
        name = draw(TOKEN).encode()
        value = mostly(draw, VISIBLE | st.sampled_from([b" ", b"\t", b",", b":"]), max_size=10)
        lines.append(name + draw(st.sampled_from([b":", b": ", b" :", b":\t", b": \t"])) + value)
    headers = lines[1:]
    draw(st.randoms()).shuffle(headers)
    lines[1:] = headers
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@settings(max_examples=400, deadline=None)
@given(request_heads())
def test_whatever_the_fast_path_accepts_h11_parses_the_same(data: bytes) -> None:
    assert_same_as_h11(data)


@settings(max_examples=200, deadline=None)
@given(request_heads())
def test_plain_heads_take_the_fast_path(data: bytes) -> None:
    """The fast path is not a mere "decline everything": heads of the common shape pass."""
    first_line_end = data.index(b"\r\n")
    lines = data[: data.index(b"\r\n\r\n")].split(b"\r\n")
    plain = (
        data[:first_line_end].endswith(b" HTTP/1.1")
        and all(0x21 <= byte <= 0x7E for byte in data[data.index(b" ") + 1 : first_line_end - 9])
        and sum(1 for line in lines if line == b"Host: h") == 1
        and all(line == b"Host: h" or line.startswith(b"Content-Length: ") for line in lines[1:])
    )
    if plain:
        assert isinstance(assert_same_as_h11(data), Head)


def test_header_lines_seen_before_give_the_same_answers() -> None:
    """Parsed lines are kept (a connection repeats them): the answers never change."""
    token = b"Authorization: Bearer " + b"t" * 900
    good = b"GET /a HTTP/1.1\r\nHost: x\r\n" + token + b"\r\nContent-Length: 3\r\n\r\nabc"
    first = read_head(good, max_head_bytes=65536)
    assert isinstance(first, Head)
    assert read_head(good, max_head_bytes=65536) == first
    assert (b"authorization", b"Bearer " + b"t" * 900) in first.headers
    # a kept line does not vouch for a different one, nor for a head h11 must take
    assert read_head(good.replace(b"t" * 900, b"t\x01" * 450), max_head_bytes=65536) is DECLINE
    chunked = good.replace(b"Content-Length: 3", b"Transfer-Encoding: chunked")
    assert read_head(chunked, max_head_bytes=65536) is DECLINE
    twice = good.replace(b"Content-Length: 3\r\n", b"Content-Length: 3\r\nContent-Length: 3\r\n")
    assert read_head(twice, max_head_bytes=65536) is DECLINE


def test_long_header_lines_are_parsed_but_not_kept() -> None:
    """What is kept is bounded: a line over MAX_PARSED_LINE_BYTES is parsed every time."""
    long_line = b"X-Big: " + b"v" * http_head.MAX_PARSED_LINE_BYTES
    head = read_head(
        b"GET / HTTP/1.1\r\nHost: x\r\n" + long_line + b"\r\n\r\n", max_head_bytes=65536
    )
    assert isinstance(head, Head)
    assert (b"x-big", b"v" * http_head.MAX_PARSED_LINE_BYTES) in head.headers
    assert long_line not in http_head._PARSED_LINES
    assert b"Host: x" in http_head._PARSED_LINES
