"""``krt invoke`` says in words why it could not reach the gateway (no Python reprs)."""

from __future__ import annotations

import trio

from krt.cli.exitcodes import ExitCode
from krt.kube.client import Kube

from .conftest import CliRun
from .fake_gateway import GATEWAY_HOST
from .test_cli_invoke import ready_function


async def test_a_refused_connection_reads_connection_refused(kube: Kube, cli: CliRun) -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    await ready_function(kube, "fn", host="127.0.0.1", port=port, ca_pem=None)
    result = await cli("invoke", "fn", "-d", "{}")
    assert result.exit_code == ExitCode.UNREACHABLE
    assert result.stderr.startswith(
        f"error: cannot connect to the gateway at 127.0.0.1:{port}: connection refused "
        "(outside the cluster?"
    )


async def test_a_name_that_does_not_resolve_says_so(kube: Kube, cli: CliRun) -> None:
    await ready_function(kube, "fn", host=GATEWAY_HOST, port=443, ca_pem=None)
    result = await cli("invoke", "fn", "-d", "{}")
    assert result.exit_code == ExitCode.UNREACHABLE
    assert result.stderr.startswith(
        f"error: cannot connect to the gateway at {GATEWAY_HOST}:443: cannot resolve the host "
        "name ("
    )


async def _refused_port() -> int:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()  # nothing listens there
    return port


async def test_with_gateway_url_the_outside_cluster_hint_is_left_out(
    kube: Kube, cli: CliRun
) -> None:
    """F4: the hint suggests --gateway-url/KRT_GATEWAY_URL; it is wrong when one is in use."""
    port = await _refused_port()
    await ready_function(kube, "fn", host=GATEWAY_HOST, port=443, ca_pem=None)
    for args, env in (
        (["--gateway-url", f"https://127.0.0.1:{port}"], {}),
        ([], {"KRT_GATEWAY_URL": f"https://127.0.0.1:{port}"}),
    ):
        result = await cli("invoke", "fn", "-d", "{}", *args, env=env)
        assert result.exit_code == ExitCode.UNREACHABLE
        assert result.stderr == (
            f"error: cannot connect to the gateway at 127.0.0.1:{port} (from "
            "--gateway-url/KRT_GATEWAY_URL): connection refused\n"
        )


async def test_a_gateway_closing_during_the_handshake_reads_as_restarting(
    kube: Kube, cli: CliRun
) -> None:
    """F4: a restarting gateway accepts TCP then closes: no SSL error text, no wrong hint."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def close_each(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, close_each, listeners)
        await ready_function(kube, "fn", host="127.0.0.1", port=port, ca_pem=None)
        result = await cli("invoke", "fn", "-d", "{}")
        nursery.cancel_scope.cancel()
    assert result.exit_code == ExitCode.UNREACHABLE
    assert result.stderr == (
        f"error: the gateway at 127.0.0.1:{port} closed the connection before the request "
        "was sent (restarting?); nothing was invoked, retry\n"
    )
