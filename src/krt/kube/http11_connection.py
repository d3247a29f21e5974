"""One keep-alive HTTP/1.1 connection of :mod:`krt.kube.http11`, and a response read from it.

Part of :mod:`krt.kube.http11` (import :class:`StreamedResponse` from there). h11 parses
the responses; it never builds the requests: the pool writes each request head itself
(:func:`~krt.kube.http11_framing.request_head`) and :meth:`Connection.send_request` moves
h11's client state machine past a prebuilt minimal request of the same method, which is
all h11 needs to frame the answer (the method decides it, e.g. no body for ``HEAD``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Final

import h11
import trio

from krt.kube.http11_errors import BROKEN, TransportError, describe_failure

__all__ = ["RECEIVE_BYTES", "Connection", "StreamedResponse"]

#: Bytes asked of the stream per receive.
RECEIVE_BYTES: Final = 65536

_HOST: Final = [("Host", "h")]
_END: Final = h11.EndOfMessage()
_REQUESTS: Final = {
    m: h11.Request(method=m, target="/", headers=_HOST)
    for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
}


class Connection:
    """One keep-alive connection: a (TLS) stream and the h11 state of its current cycle.

    Args:
        stream: the connected stream (a ``trio.SSLStream`` or the TCP stream itself); the
            connection takes ownership of it.
        socket: the TCP socket under ``stream`` (closed directly by :meth:`close_now`, and
            polled for readability before reuse).

    Attributes:
        h11: the h11 client state of the current request/response cycle.
        idle_since: ``trio.current_time()`` when it was last put back idle (seconds).
        reused: whether the current exchange runs on a kept connection.
        received: bytes received in the current exchange (0: no answer byte yet).
    """

    __slots__ = ("h11", "idle_since", "received", "reused", "socket", "stream")

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.stream = stream
        self.socket = socket
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.reused = False
        self.received = 0

    def close_now(self) -> None:
        """Close the socket at once (no TLS close_notify: nothing waits for it)."""
        self.socket.close()

    def is_reusable(self) -> bool:
        """Whether request and response both ended cleanly and the server keeps it alive."""
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def send_request(self, method: str, head: bytes, body: bytes | None) -> None:
        """Send the request head and body in one write, and move h11 past the request.

        Args:
            method: HTTP method, upper case (decides how h11 frames the response).
            head: the request head (:func:`~krt.kube.http11_framing.request_head`).
            body: the body announced in ``head``, or None.

        Raises:
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        request = _REQUESTS.get(method) or h11.Request(method=method, target="/", headers=_HOST)
        self.h11.send(request)
        self.h11.send(_END)
        self.received = 0
        await self.stream.send_all(head + body if body else head)

    async def next_event(self) -> h11.Event:
        """Return the next response event (Response, Data or EndOfMessage), reading as needed.

        Raises:
            TransportError: EOF before the response ended, or a malformed response.
            OSError, trio.BrokenResourceError, trio.ClosedResourceError: from the stream.
        """
        connection = self.h11
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise TransportError(f"malformed response: {exc}") from exc
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(RECEIVE_BYTES)
                if not data:
                    return self._end_of_stream()
                self.received += len(data)
                connection.receive_data(bytes(data))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, (h11.Response, h11.Data, h11.EndOfMessage)):
                return event
            raise TransportError(f"unexpected {type(event).__name__} event in the response")

    def _end_of_stream(self) -> h11.Event:
        """The server closed: the end of a close-delimited body, or a broken response."""
        self.h11.receive_data(b"")
        try:
            event = self.h11.next_event()
        except h11.RemoteProtocolError as exc:
            raise TransportError(
                f"the server closed the connection before the response ended: {exc}"
            ) from exc
        if not isinstance(event, h11.EndOfMessage):
            raise TransportError("the server closed the connection before the response ended")
        return event


class StreamedResponse:
    """A response whose body is read as it arrives (watches); see ``Http11Pool.stream``.

    Args:
        connection: the connection the body arrives on (the pool still owns it).
        status: the HTTP status code.
        headers: the response headers, as h11 gives them.

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

    async def iter_bytes(self) -> AsyncGenerator[bytes, None]:
        """Yield body chunks (as received) until the response ends.

        Raises:
            TransportError: the stream broke.
        """
        connection = self._connection
        while not self.complete:
            try:
                event = await connection.next_event()
            except BROKEN as exc:
                raise TransportError(f"the response stream broke: {describe_failure(exc)}") from exc
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.complete = True

    async def iter_lines(self) -> AsyncGenerator[bytes, None]:
        """Yield complete ``\\n``-terminated lines (without the newline) as they arrive.

        A last line without a newline is yielded when the response ends.

        Raises:
            TransportError: the stream broke.
        """
        pending = b""
        async with aclosing(self.iter_bytes()) as chunks:
            async for chunk in chunks:
                if b"\n" not in chunk:
                    pending += chunk
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    yield line
        if pending:
            yield pending
