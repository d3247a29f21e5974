"""One keep-alive HTTP/1.1 connection of :mod:`krt.kube.http11`, and a response read from it.

Part of :mod:`krt.kube.http11` (import :class:`StreamedResponse` from there). The pool
writes each request head itself (:func:`~krt.kube.http11_framing.request_head`). Responses
of the usual shape (an ``HTTP/1.1`` final status, a ``Content-Length`` or chunked body) are
read by :mod:`~krt.kube.http11_response`; any other response goes to h11 (see there for why
and the measured cost): the bytes received so far are handed to a fresh h11 client state
moved past a prebuilt minimal request of the same method, which is all h11 needs to frame
the answer (the method decides it, e.g. no body for ``HEAD``), and h11 reads the rest of
that exchange.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Final

import h11
import trio

from krt.kube.http11_errors import BROKEN, TransportError, describe_failure
from krt.kube.http11_response import ChunkedBody, MalformedBody, Unusual, parse_head
from krt.tls_stream import TlsStream

__all__ = ["RECEIVE_BYTES", "Connection", "StreamedResponse"]

#: Bytes asked of the stream per receive.
RECEIVE_BYTES: Final = 65536

_HOST: Final = [("Host", "h")]
_END: Final = h11.EndOfMessage()
_REQUESTS: Final = {
    m: h11.Request(method=m, target="/", headers=_HOST)
    for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
}
_CLOSED_EARLY: Final = "the server closed the connection before the response ended"


class Connection:
    """One keep-alive connection: a (TLS) stream and the state of its current exchange.

    One exchange at a time: :meth:`send_request`, :meth:`read_head`, then the body with
    :meth:`read_body` or :meth:`read_body_data`; :meth:`next_cycle` before the next one.

    Args:
        stream: the connected stream (a :class:`~krt.tls_stream.TlsStream` or the TCP
            stream itself); the connection takes ownership of it.
        socket: the TCP socket under ``stream`` (closed directly by :meth:`close_now`, and
            polled for readability before reuse).

    Attributes:
        idle_since: ``trio.current_time()`` when it was last put back idle (seconds).
        reused: whether the current exchange runs on a kept connection.
        received: bytes received in the current exchange (0: no answer byte yet).
    """

    __slots__ = (
        "_buffer",
        "_chunks",
        "_complete",
        "_eof",
        "_h11",
        "_keep_alive",
        "_method",
        "_remaining",
        "idle_since",
        "received",
        "reused",
        "socket",
        "stream",
    )

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.stream = stream
        self.socket = socket
        self.idle_since = 0.0
        self.reused = False
        self.received = 0
        self._method = "GET"
        self._buffer = b""  # received, not yet consumed (the usual-shape path only)
        self._h11: h11.Connection | None = None  # this exchange's reader when it is unusual
        self._chunks: ChunkedBody | None = None
        self._remaining = 0  # Content-Length bytes still to come
        self._keep_alive = True
        self._complete = False
        self._eof = False

    def close_now(self) -> None:
        """Close the socket at once (no TLS close_notify: nothing waits for it)."""
        if isinstance(self.stream, TlsStream):
            self.stream.close_now()  # marks the stream closed before its descriptor goes
        else:
            self.socket.close()

    def is_reusable(self) -> bool:
        """Whether the response ended cleanly, nothing followed it and the server keeps it."""
        if self._h11 is not None:
            connection = self._h11
            return (
                connection.our_state is h11.DONE
                and connection.their_state is h11.DONE
                and not connection.trailing_data[0]
            )
        return self._complete and self._keep_alive and not self._buffer and not self._eof

    def next_cycle(self) -> None:
        """Reset the exchange state for the next request (call only when reusable)."""
        self._h11 = None
        self._chunks = None
        self._complete = False
        self._keep_alive = True
        self.reused = False

    async def send_request(self, method: str, head: bytes, body: bytes | None) -> None:
        """Send the request head and body in one write.

        Args:
            method: HTTP method, upper case (decides how the response is framed).
            head: the request head (:func:`~krt.kube.http11_framing.request_head`).
            body: the body announced in ``head``, or None.

        Raises:
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        self._method = method
        self.received = 0
        await self.stream.send_all(head + body if body else head)

    async def _receive(self) -> bytes:
        if self._eof:
            return b""
        data = await self.stream.receive_some(RECEIVE_BYTES)
        if not data:
            self._eof = True  # later reads of this exchange see the end without reading
        self.received += len(data)
        return bytes(data)

    async def read_head(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """Read the response head (interim ``1xx`` answers are skipped).

        Returns:
            ``(status, headers)``: header names lower-cased, as bytes.

        Raises:
            TransportError: EOF before the head ended, or a malformed response.
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        buffer = b""
        while True:
            data = await self._receive()
            if not data:
                return await self._h11_head(buffer)  # h11 words the early end
            buffer = buffer + data if buffer else data
            try:
                head = parse_head(buffer, self._method)
            except Unusual:
                return await self._h11_head(buffer)
            if head is not None:
                break
        self._keep_alive = head.keep_alive
        self._buffer = buffer[head.size :]
        if head.length >= 0:
            self._remaining = head.length
            self._complete = head.length == 0
        else:
            self._chunks = ChunkedBody()
        return head.status, head.headers

    async def _h11_head(self, buffer: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
        """Hand the exchange to h11 from its start (``buffer``: every byte received)."""
        connection = h11.Connection(h11.CLIENT)
        request = _REQUESTS.get(self._method)
        if request is None:
            request = h11.Request(method=self._method, target="/", headers=_HOST)
        connection.send(request)
        connection.send(_END)
        if buffer:  # (h11 takes b"" for the end of the stream)
            connection.receive_data(buffer)
        self._h11 = connection
        event = await self._next_h11_event()
        while not isinstance(event, h11.Response):  # pragma: no cover - h11 order
            event = await self._next_h11_event()
        return event.status_code, list(event.headers)

    async def read_body_data(self) -> bytes | None:
        """Return the next body bytes as they arrive; None once the body has ended.

        Raises:
            TransportError: EOF before the body ended, or a malformed body.
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        if self._h11 is not None:
            while True:
                event = await self._next_h11_event()
                if type(event) is h11.Data:
                    return bytes(event.data)
                if type(event) is h11.EndOfMessage:
                    self._complete = True
                    return None
        if self._complete:
            return None
        chunks = self._chunks
        if chunks is not None:
            while True:
                data = self._buffer or await self._receive()
                self._buffer = b""
                if not data:
                    raise TransportError(_CLOSED_EARLY)
                try:
                    pieces = chunks.feed(data)
                except MalformedBody as exc:
                    raise TransportError(f"malformed response: {exc}") from exc
                if chunks.done:
                    self._complete = True
                    self._buffer = chunks.leftover
                if pieces:
                    return pieces[0] if len(pieces) == 1 else b"".join(pieces)
                if chunks.done:
                    return None
        data = self._buffer or await self._receive()
        if not data:
            raise TransportError(_CLOSED_EARLY)
        remaining = self._remaining
        if len(data) >= remaining:
            self._buffer = data[remaining:]
            data = data[:remaining]
            self._complete = True
        else:
            self._buffer = b""
        self._remaining = remaining - len(data)
        return data

    async def read_body(self) -> bytes:
        """Read the rest of the body.

        Raises:
            TransportError: EOF before the body ended, or a malformed body.
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        if self._h11 is None and self._chunks is None and len(self._buffer) >= self._remaining:
            return await self.read_body_data() or b""  # the whole body came with the head
        pieces: list[bytes] = []
        while (data := await self.read_body_data()) is not None:
            pieces.append(data)
            if self._complete and self._h11 is None:
                break
        return b"".join(pieces)

    async def _next_h11_event(self) -> h11.Event:
        """The next response event from h11, reading as needed."""
        connection = self._h11
        assert connection is not None
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise TransportError(f"malformed response: {exc}") from exc
            if event is h11.NEED_DATA:
                data = await self._receive()
                if not data:
                    return self._end_of_stream(connection)
                connection.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, (h11.Response, h11.Data, h11.EndOfMessage)):
                return event
            raise TransportError(f"unexpected {type(event).__name__} event in the response")

    @staticmethod
    def _end_of_stream(connection: h11.Connection) -> h11.Event:
        """The server closed: the end of a close-delimited body, or a broken response."""
        connection.receive_data(b"")
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            raise TransportError(f"{_CLOSED_EARLY}: {exc}") from exc
        if not isinstance(event, h11.EndOfMessage):
            raise TransportError(_CLOSED_EARLY)
        return event


class StreamedResponse:
    """A response whose body is read as it arrives (watches); see ``Http11Pool.stream``.

    Args:
        connection: the connection the body arrives on (the pool still owns it).
        status: the HTTP status code.
        headers: the response headers, names lower-cased (bytes).

    Attributes:
        status: the HTTP status code.
        headers: response headers, names lower-cased (bytes, as h11 gives them).
        complete: whether the whole body has been read.
    """

    def __init__(
        self, connection: Connection, status: int, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self._connection = connection
        self.status = status
        self.headers = headers
        self.complete = False

    async def read(self) -> bytes:
        """Read the rest of the body.

        Raises:
            TransportError: the stream broke.
        """
        return b"".join([chunk async for chunk in self.iter_bytes()])

    async def _next(self) -> bytes | None:
        try:
            data = await self._connection.read_body_data()
        except BROKEN as exc:
            raise TransportError(f"the response stream broke: {describe_failure(exc)}") from exc
        if data is None:
            self.complete = True
        return data

    async def iter_bytes(self) -> AsyncGenerator[bytes, None]:
        """Yield body chunks (as received) until the response ends.

        Raises:
            TransportError: the stream broke.
        """
        while not self.complete:
            data = await self._next()
            if data:
                yield data

    async def iter_lines(self) -> AsyncGenerator[bytes, None]:
        """Yield complete ``\\n``-terminated lines (without the newline) as they arrive.

        A last line without a newline is yielded when the response ends.

        Raises:
            TransportError: the stream broke.
        """
        pending = b""
        while not self.complete:
            data = await self._next()
            if not data:
                continue
            if pending:
                data = pending + data
            if data[-1] == 0x0A and data.count(b"\n") == 1:  # one whole line: a watch event
                pending = b""
                yield data[:-1]
                continue
            *lines, pending = data.split(b"\n")
            for line in lines:
                yield line
        if pending:
            yield pending
