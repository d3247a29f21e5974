"""Transport failures read as words, from the socket up to ``krt``'s one-line error.

The Kubernetes client's errors reach users verbatim (``error: cannot reach the Kubernetes
API server: ...``), so a failure below HTTP must say what happened ("connection refused",
"TLS handshake failed: certificate verify failed: ...") and never show a Python exception
repr such as ``OSError('all attempts ...')`` or ``BrokenResourceError()``. The exception
types (``TransportError``, ``ConnectionFailed``) and the CLI exit code stay as they were.
"""

from __future__ import annotations

import base64
import errno
import re
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trustme
import yaml
from proxy_fake import connect_proxy

from krt.cli.exitcodes import ExitCode
from krt.cli.failures import run_async
from krt.kube.client import connect
from krt.kube.errors import ConnectionFailed
from krt.kube.http11 import Http11Pool, TransportError, parse_origin
from krt.kube.http11_errors import describe_failure
from localkube.apiserver import ApiServerHandle

#: What an exception repr looks like inside a message (``OSError(``, ``BrokenResourceError(``).
REPR = re.compile(r"\w+(Error|Exception|Group)\(")
CLOSED_HERE = "this client closed the connection (it was shut down during the exchange)"


def assert_words(text: str) -> None:
    assert not REPR.search(text), f"an exception repr in {text!r}"


def _cause(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


def _refused(host: str = "127.0.0.1") -> ConnectionRefusedError:
    # trio's own strerror for a refused address
    return ConnectionRefusedError(
        errno.ECONNREFUSED, f"Error connecting to ('{host}', 1): Connection refused"
    )


def _all_attempts_failed(*errors: OSError) -> OSError:
    """What trio.open_tcp_stream raises when every address failed."""
    message = "all attempts to connect to 127.0.0.1:1 failed"
    failed = OSError(message)
    failed.__cause__ = ExceptionGroup(message, list(errors))
    return failed


def _untrusted() -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(
        1,
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local "
        "issuer certificate (_ssl.c:1006)",
    )
    exc.verify_message = "unable to get local issuer certificate"
    return exc


# -- the wording, one shape at a time -----------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (_all_attempts_failed(_refused()), "connection refused"),
        (_all_attempts_failed(_refused("::1"), _refused()), "connection refused"),
        (
            _all_attempts_failed(
                _refused(), OSError(errno.ENETUNREACH, "Network is unreachable")
            ),
            "connection refused; network is unreachable",
        ),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve the host name (name "
         "or service not known)"),
        (trio.BrokenResourceError(), "the server closed the connection"),
        (
            _cause(trio.BrokenResourceError("socket connection broken"), ConnectionResetError(
                errno.ECONNRESET, "Connection reset by peer")),
            "the server reset the connection",
        ),
        (
            _cause(trio.BrokenResourceError(), BrokenPipeError(errno.EPIPE, "Broken pipe")),
            "the server closed the connection",
        ),
        (
            _cause(trio.BrokenResourceError(), _untrusted()),
            "certificate verify failed: unable to get local issuer certificate",
        ),
        (
            _cause(trio.BrokenResourceError(), ssl.SSLEOFError(8, "EOF occurred")),
            "the server closed the connection",
        ),
        (
            trio.ClosedResourceError(),
            CLOSED_HERE,
        ),
        (TimeoutError(errno.ETIMEDOUT, "Connection timed out"), "the connection timed out"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "no route to host"),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/no/ca.crt"),
            "no such file or directory: /no/ca.crt",
        ),
        (
            _cause(httpx.ConnectError("All connection attempts failed"), _refused()),
            "connection refused",
        ),
        (httpx.ConnectError("All connection attempts failed"), "all connection attempts failed"),
        (RuntimeError(), "unexpected RuntimeError"),
    ],
)  # fmt: skip
def test_failures_are_described_in_words(exc: BaseException, words: str) -> None:
    assert describe_failure(exc) == words
    assert_words(words)


def test_a_cause_cycle_does_not_recurse_forever() -> None:
    first = trio.BrokenResourceError("first")
    second = trio.BrokenResourceError("second")
    first.__cause__, second.__cause__ = second, first
    assert_words(describe_failure(first))


# -- the pool, against real sockets ---------------------------------------------------------


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@asynccontextmanager
async def _server(handler: Callable[[trio.SocketStream], Awaitable[None]]) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"), handler, 0)
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def _failure(pool: Http11Pool, method: str = "GET", body: bytes | None = None) -> str:
    try:
        with pytest.raises(TransportError) as info:
            await pool.request(method, "/version", [], body)
    finally:
        await pool.aclose()
    assert pool.active_connections == 0
    text = str(info.value)
    assert_words(text)
    return text


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_refused_connection_reads_connection_refused() -> None:
    port = _closed_port()
    pool = Http11Pool(parse_origin(f"http://127.0.0.1:{port}"), ssl_context=None)
    assert await _failure(pool) == f"cannot connect to 127.0.0.1:{port}: connection refused"


async def test_untrusted_certificate_reads_tls_handshake_failed() -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("localhost").configure_cert(server_context)

    async def tls(stream: trio.SocketStream) -> None:
        with pytest.raises(trio.BrokenResourceError):
            await trio.SSLStream(stream, server_context, server_side=True).do_handshake()

    async with _server(tls) as port:
        pool = Http11Pool(
            parse_origin(f"https://127.0.0.1:{port}"),
            ssl_context=_trusting(trustme.CA()),  # another CA: the server is not trusted
            server_hostname="localhost",
        )
        assert await _failure(pool) == (
            f"cannot connect to 127.0.0.1:{port}: TLS handshake failed: certificate verify "
            "failed: unable to get local issuer certificate"
        )


async def test_tls_to_a_plain_http_server_names_the_tls_reason() -> None:
    async def plain(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await stream.aclose()

    async with _server(plain) as port:
        pool = Http11Pool(
            parse_origin(f"https://127.0.0.1:{port}"), ssl_context=_trusting(trustme.CA())
        )
        assert await _failure(pool) == (
            f"cannot connect to 127.0.0.1:{port}: TLS handshake failed: wrong version number"
        )


async def test_server_closing_during_the_handshake_reads_closed() -> None:
    async def close(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with _server(close) as port:
        pool = Http11Pool(
            parse_origin(f"https://127.0.0.1:{port}"), ssl_context=_trusting(trustme.CA())
        )
        assert await _failure(pool) == (
            f"cannot connect to 127.0.0.1:{port}: TLS handshake failed: "
            "the server closed the connection"
        )


def _reset(stream: trio.SocketStream) -> None:
    """Close with an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def test_server_resetting_the_exchange_reads_reset() -> None:
    async def reset_after_request(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        _reset(stream)

    async with _server(reset_after_request) as port:
        pool = Http11Pool(parse_origin(f"http://127.0.0.1:{port}"), ssl_context=None)
        assert await _failure(pool, "POST", b"{}") == "the server reset the connection"


async def test_broken_watch_stream_reads_reset() -> None:
    first_line = trio.Event()

    async def reset_mid_body(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nline\n\r\n"
        )
        await first_line.wait()  # an RST drops data the client has not read yet
        _reset(stream)

    async with _server(reset_mid_body) as port:
        pool = Http11Pool(parse_origin(f"http://127.0.0.1:{port}"), ssl_context=None)
        lines: list[bytes] = []

        async def watch() -> None:
            async with pool.stream("GET", "/watch", []) as response:
                async for line in response.iter_lines():
                    lines.append(line)
                    first_line.set()

        try:
            with pytest.raises(TransportError) as info:
                await watch()
        finally:
            await pool.aclose()
    assert lines == [b"line"]
    assert str(info.value) == "the response stream broke: the server reset the connection"


async def test_proxy_failures_name_the_proxy() -> None:
    async def unused(stream: trio.SocketStream) -> None:
        await stream.aclose()

    context = ssl.create_default_context()
    async with _server(unused) as port, connect_proxy() as proxy:
        origin = parse_origin(f"https://127.0.0.1:{port}")
        proxy.refuse = 407
        pool = Http11Pool(
            origin, ssl_context=context, proxy=parse_origin(f"http://127.0.0.1:{proxy.port}")
        )
        assert await _failure(pool) == (
            f"cannot connect to 127.0.0.1:{port} via proxy 127.0.0.1:{proxy.port}: "
            f"the proxy answered 407 to CONNECT 127.0.0.1:{port}"
        )
    closed = _closed_port()
    pool = Http11Pool(origin, ssl_context=context, proxy=parse_origin(f"http://127.0.0.1:{closed}"))
    assert await _failure(pool) == (
        f"cannot connect to 127.0.0.1:{port} via proxy 127.0.0.1:{closed}: connection refused"
    )


# -- the client and the CLI line -------------------------------------------------------------


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_connect_to_nothing_is_connection_failed_in_words(tmp_path: Path) -> None:
    port = _closed_port()
    with pytest.raises(ConnectionFailed) as info:
        await connect(kubeconfig=_kubeconfig(tmp_path, f"https://127.0.0.1:{port}"))
    assert str(info.value) == (
        f"GET /version: cannot connect to 127.0.0.1:{port}: connection refused"
    )


async def test_connect_with_the_wrong_ca_says_the_certificate_failed(
    apiserver: ApiServerHandle, tmp_path: Path
) -> None:
    config = yaml.safe_load(apiserver.kubeconfig_path.read_text())
    other = trustme.CA().cert_pem.bytes()
    config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        other
    ).decode()
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConnectionFailed) as info:
        await connect(kubeconfig=path)
    text = str(info.value)
    assert_words(text)
    assert re.fullmatch(
        r"GET /version: cannot connect to [\w.:\[\]-]+: TLS handshake failed: "
        r"certificate verify failed: .+",
        text,
    ), text


def test_krt_prints_one_line_in_words_and_exits_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _closed_port()
    path = _kubeconfig(tmp_path, f"https://127.0.0.1:{port}")

    async def main() -> None:
        await connect(kubeconfig=path)

    with pytest.raises(SystemExit) as exit_info:
        run_async(main)
    assert exit_info.value.code == int(ExitCode.UNREACHABLE)
    assert capsys.readouterr().err == (
        "error: cannot reach the Kubernetes API server: GET /version: cannot connect to "
        f"127.0.0.1:{port}: connection refused\n"
    )


@pytest.mark.parametrize("tls", [False, True])
async def test_pool_closed_under_a_request_says_so(tls: bool) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca = trustme.CA()
    ca.issue_cert("localhost").configure_cert(server_context)
    received = trio.Event()

    async def hang(stream: trio.SocketStream) -> None:
        served: trio.abc.Stream = stream
        if tls:
            served = trio.SSLStream(stream, server_context, server_side=True)
        await served.receive_some(65536)
        received.set()
        await trio.sleep_forever()

    async with _server(hang) as port:
        scheme = "https" if tls else "http"
        pool = Http11Pool(
            parse_origin(f"{scheme}://127.0.0.1:{port}"),
            ssl_context=_trusting(ca) if tls else None,
            server_hostname="localhost",
        )
        failures: list[str] = []

        async def request() -> None:
            with pytest.raises(TransportError) as info:
                await pool.request("GET", "/version", [])
            failures.append(str(info.value))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(request)
            await received.wait()
            await pool.aclose()
    assert failures == [CLOSED_HERE]
