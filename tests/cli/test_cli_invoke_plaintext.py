"""``krt invoke`` never sends the bearer token over plaintext HTTP (F19).

Seed 000, Gateway: "Plaintext HTTP is not supported because every client request carries a
Kubernetes bearer token." A plain ``http://`` ``--gateway-url``/``KRT_GATEWAY_URL`` is a usage
error (exit 2) and a ``status.endpoint.url`` that is not https is refused (exit 13), both
before any connection is made: a listener standing where the token would go sees nothing.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed
from krt.cli.invoking import (
    Invocation,
    check_endpoint_url,
    check_gateway_url,
    override_base,
    post,
)
from krt.kube.client import Kube

from .conftest import CliRun, set_status
from .test_cli_invoke import ready_function

ENDPOINT = "https://runtime-gateway.kruntimes-system.svc/v1/namespaces/d/runtimes/python/functions/u:invoke"


@asynccontextmanager
async def tcp_listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A plain TCP listener on 127.0.0.1 that records what each connection sends."""
    received: list[bytes] = []

    async def record(stream: trio.SocketStream) -> None:
        received.append(b"")  # a connection was made at all
        with trio.move_on_after(2):
            while data := await stream.receive_some(65536):
                received[-1] += data

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            functools.partial(trio.serve_tcp, record, 0, host="127.0.0.1")
        )
        yield listener.socket.getsockname()[1], received
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8443", "HTTP://127.0.0.1:8443", "ftp://127.0.0.1", "ws://gw:443"],
)
def test_a_gateway_url_that_is_not_https_is_refused_naming_the_reason(url: str) -> None:
    with pytest.raises(ValueError, match="plaintext HTTP is not supported because every request"):
        check_gateway_url(url)
    with pytest.raises(ValueError, match="not an https:// URL"):
        override_base(ENDPOINT, url)


def test_an_https_gateway_url_in_any_case_is_dialled_as_https() -> None:
    check_gateway_url("HTTPS://127.0.0.1:8443")
    new, _ = override_base(ENDPOINT, "HTTPS://127.0.0.1:8443/")
    assert new.startswith("https://127.0.0.1:8443/v1/")


@pytest.mark.parametrize(
    "url", ["http://gw/v1/x:invoke", "gw/v1/x:invoke", "https:///v1/x:invoke", "file:///etc"]
)
def test_an_endpoint_url_that_is_not_absolute_https_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="is not an https:// URL"):
        check_endpoint_url(url)


async def test_post_refuses_a_plain_http_url_without_connecting() -> None:
    async with tcp_listener() as (port, received):
        with pytest.raises(CommandFailed) as caught:
            await post(
                Invocation(url=f"http://127.0.0.1:{port}/v1/x:invoke", body=b"{}", token="secret")
            )
        await trio.sleep(0.05)  # let a (wrong) connection reach the listener
    assert caught.value.code is ExitCode.SERVER_ERROR
    assert "refusing to send the bearer token" in caught.value.message
    assert received == []


@pytest.mark.parametrize("via_env", [False, True])
async def test_invoke_with_a_plain_http_gateway_url_is_a_usage_error_and_sends_nothing(
    kube: Kube, cli: CliRun, via_env: bool
) -> None:
    async with tcp_listener() as (port, received):
        await ready_function(kube, "fn", host="127.0.0.1", port=port, ca_pem=None)
        plain = f"http://127.0.0.1:{port}"
        if via_env:
            result = await cli("invoke", "fn", "-d", "{}", env={"KRT_GATEWAY_URL": plain})
        else:
            result = await cli("invoke", "fn", "-d", "{}", "--gateway-url", plain)
        await trio.sleep(0.05)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "'--gateway-url' (env KRT_GATEWAY_URL)" in result.stderr
    assert f"'{plain}' is not an https:// URL" in result.stderr
    assert "plaintext HTTP is not supported" in result.stderr
    assert received == []


async def test_invoke_refuses_a_ready_run_whose_endpoint_is_plain_http(
    kube: Kube, cli: CliRun
) -> None:
    """A rewritten (or misconfigured) ``status.endpoint`` must not get the token in clear."""
    async with tcp_listener() as (port, received):
        url = await ready_function(kube, "fn", host="127.0.0.1", port=port, ca_pem=None)
        plain = url.replace("https://", "http://", 1)
        await set_status(kube, "fn", {"endpoint": {"protocol": "HTTP", "url": plain}})
        result = await cli("invoke", "fn", "-d", "{}")
        # an https --gateway-url does not make a plaintext endpoint acceptable either
        forwarded = await cli(
            "invoke", "fn", "-d", "{}", "--gateway-url", f"https://127.0.0.1:{port}"
        )
        await trio.sleep(0.05)
    for answer in (result, forwarded):
        assert answer.exit_code == ExitCode.SERVER_ERROR, answer.output
        assert answer.stderr.startswith(
            f"error: function fn: refusing to send the bearer token: status.endpoint.url "
            f"'{plain}' is not an https:// URL: plaintext HTTP is not supported"
        )
    assert received == []
