"""runtimed says in words why an upstream or an access review failed (no reprs, no class
names)."""

from __future__ import annotations

import functools
import re
import ssl

import pytest
import trio

from krt.kube.errors import ConnectionFailed, ServerError
from runtimed.dataplane.authz import AuthzUnavailable, KubeReviewer
from runtimed.dataplane.channels import ConnectFailed, open_channels

#: A Python repr inside a message: ``OSError(``, ``BrokenResourceError()``.
REPR = re.compile(r"\w+Error\(|\w+\(\)")


async def test_a_refused_connection_reads_connection_refused() -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    async with open_channels() as channels:
        with pytest.raises(ConnectFailed) as failed:
            await channels.unary_call("127.0.0.1", port, "InvokeFunction", b"")
    assert str(failed.value) == f"cannot connect to 127.0.0.1:{port}: connection refused"


async def test_a_failed_tls_handshake_is_named_so() -> None:
    async def not_tls(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, not_tls, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        async with open_channels(ssl_context=ssl.create_default_context()) as channels:
            with pytest.raises(ConnectFailed) as failed:
                await channels.unary_call("127.0.0.1", port, "InvokeFunction", b"")
        nursery.cancel_scope.cancel()
    text = str(failed.value)
    assert text.startswith(f"cannot connect to 127.0.0.1:{port}: TLS handshake failed: ")
    assert not REPR.search(text)


async def test_a_peer_closing_during_the_handshake_is_no_certificate_problem() -> None:
    # a restarting runtimed behind a Service: the TCP connection is accepted, then closed
    async def close_at_once(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, close_at_once, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        async with open_channels(ssl_context=ssl.create_default_context()) as channels:
            with pytest.raises(ConnectFailed) as failed:
                await channels.unary_call("127.0.0.1", port, "InvokeFunction", b"")
        nursery.cancel_scope.cancel()
    assert str(failed.value) == (
        f"cannot connect to 127.0.0.1:{port}: the connection closed before the TLS handshake"
        " completed (is the peer restarting?)"
    )


class FailingCaller:
    """A client view whose SelfSubjectAccessReview create fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def with_token(self, token: str) -> FailingCaller:
        return self

    async def create(self, ref: object, body: object) -> dict[str, object]:
        await trio.lowlevel.checkpoint()
        raise self.error


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (
            ConnectionFailed("cannot reach the API server: connection refused"),
            "SelfSubjectAccessReview failed: cannot reach the API server: connection refused",
        ),
        (
            ServerError(500, "InternalError", "etcd says no to system:serviceaccount:x:y"),
            "SelfSubjectAccessReview failed: the API server answered 500 InternalError",
        ),
    ],
)
async def test_an_access_review_that_cannot_be_made_says_why(error: Exception, text: str) -> None:
    reviewer = KubeReviewer(FailingCaller(error))  # type: ignore[arg-type]
    with pytest.raises(AuthzUnavailable) as failed:
        await reviewer.review("token", namespace="ns", name="fn")
    assert str(failed.value) == text
