"""The gateway serves a rotated certificate without a restart (gateway.tls_reload)."""

from __future__ import annotations

import logging
import ssl
from functools import partial
from pathlib import Path

import pytest
import trio
import trustme
from conftest import StackFactory, TLSFiles

from gateway.server import GatewayConfig, serve_gateway
from gateway.targets import StaticResolver
from gateway.tls_reload import (
    ListenerTLSConfig,
    TLSFilesError,
    reload_listener_tls,
    reload_upstream_tls,
    upstream_tls,
    watch_listener_tls,
    watch_upstream_tls,
)


def _write_leaf(ca: trustme.CA, directory: Path) -> tuple[str, str]:
    """A fresh leaf for 127.0.0.1/localhost from ``ca`` in ``directory``: (cert, key) paths."""
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    key_file.write_bytes(leaf.private_key_pem.bytes())
    return str(cert_file), str(key_file)


def _handshake(
    client_end: ssl.SSLObject, server_end: ssl.SSLObject, bios: list[ssl.MemoryBIO]
) -> None:
    """Run a TLS handshake in memory (``bios``: client in/out, server in/out)."""
    pending = [client_end, server_end]
    for _ in range(8):
        for end in list(pending):
            try:
                end.do_handshake()
                pending.remove(end)
            except ssl.SSLWantReadError:
                pass
        bios[2].write(bios[1].read())
        bios[0].write(bios[3].read())
        if not pending:
            break


def _served_serial(server: ssl.SSLContext, ca: trustme.CA) -> int:
    """The serial number of the certificate ``server`` presents (handshake in memory)."""
    client = ssl.create_default_context()
    ca.configure_trust(client)
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client_end = client.wrap_bio(bios[0], bios[1], server_hostname="localhost")
    server_end = server.wrap_bio(bios[2], bios[3], server_side=True)
    _handshake(client_end, server_end, bios)
    certificate = client_end.getpeercert()
    assert certificate is not None
    return int(certificate["serialNumber"], 16)


def _write_key(key_file: str, pem: bytes) -> None:
    Path(key_file).write_bytes(pem)


def _listener(cert_file: str, key_file: str) -> ListenerTLSConfig:
    config = ListenerTLSConfig()
    config.certfile, config.keyfile = cert_file, key_file
    return config


def _serial_of(cert_file: str) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).serial_number


def test_hypercorn_gets_one_context_that_stays_reachable(tmp_path: Path) -> None:
    config = _listener(*_write_leaf(trustme.CA(), tmp_path))
    context = config.create_ssl_context()
    assert context is not None
    assert config.create_ssl_context() is context is config.ssl_context


async def test_a_rotated_certificate_is_served_after_the_next_look(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    ca = trustme.CA()
    cert_file, key_file = _write_leaf(ca, tmp_path)
    config = _listener(cert_file, key_file)
    context = config.create_ssl_context()
    assert context is not None
    old = _serial_of(cert_file)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(watch_listener_tls, config, cert_file, key_file, period=30.0))
        await trio.sleep(1)
        _write_leaf(ca, tmp_path)
        await trio.sleep(10)
        assert _served_serial(context, ca) == old  # not looked yet
        await trio.sleep(30)
        assert _served_serial(context, ca) == _serial_of(cert_file) != old
        nursery.cancel_scope.cancel()


async def test_an_unusable_pair_keeps_the_last_certificate_until_fixed(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    cert_file, key_file = _write_leaf(ca, tmp_path)
    config = _listener(cert_file, key_file)
    context = config.create_ssl_context()
    assert context is not None
    old = _serial_of(cert_file)
    caplog.set_level(logging.INFO, logger="gateway.tls_reload")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(watch_listener_tls, config, cert_file, key_file, period=30.0))
        await trio.sleep(1)
        _write_leaf(ca, tmp_path)
        _write_key(key_file, ca.issue_cert("other").private_key_pem.bytes())  # a mismatch
        await trio.sleep(95)  # three looks at the same broken pair
        assert _served_serial(context, ca) == old
        warnings = [r for r in caplog.records if "not usable" in r.getMessage()]
        assert len(warnings) == 1
        assert "--tls-key-file" in warnings[0].getMessage()
        _write_leaf(ca, tmp_path)
        await trio.sleep(30)
        assert _served_serial(context, ca) == _serial_of(cert_file) != old
        assert any("reloaded" in r.getMessage() for r in caplog.records)
        nursery.cancel_scope.cancel()


def test_reload_refuses_a_missing_file_and_leaves_the_context(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert_file, key_file = _write_leaf(ca, tmp_path)
    config = _listener(cert_file, key_file)
    context = config.create_ssl_context()
    assert context is not None
    old = _serial_of(cert_file)
    with pytest.raises(TLSFilesError, match="--tls-cert-file"):
        reload_listener_tls(context, str(tmp_path / "gone.crt"), key_file)
    assert _served_serial(context, ca) == old


async def test_a_running_gateway_serves_the_rotated_certificate(
    gateway_stack: StackFactory, tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert_file, key_file = _write_leaf(ca, tmp_path)
    old = _serial_of(cert_file)
    async with gateway_stack(
        tls_cert_file=cert_file, tls_key_file=key_file, tls_reload_seconds=0.05
    ) as stack:
        host, port = stack.addresses.https.removeprefix("https://").rsplit(":", 1)
        client = ssl.create_default_context()
        ca.configure_trust(client)

        async def served() -> int:
            stream = await trio.open_ssl_over_tcp_stream(
                host, int(port), ssl_context=client, https_compatible=True
            )
            async with stream:
                await stream.do_handshake()
                certificate = stream.getpeercert()
            assert certificate is not None
            return int(certificate["serialNumber"], 16)

        assert await served() == old
        _write_leaf(ca, tmp_path)
        new = _serial_of(cert_file)
        with trio.fail_after(10):
            while await served() != new:  # noqa: ASYNC110 - files another task reloads
                await trio.sleep(0.05)


def _write_upstream(directory: Path, ca: trustme.CA) -> tuple[str, str, str]:
    """``ca.crt`` of ``ca`` and a client certificate it issued: (ca, cert, key) paths."""
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(ca.cert_pem.bytes())
    cert_file, key_file = _write_leaf(ca, directory)
    return str(ca_file), cert_file, key_file


def _client_serial_seen_by(server_ca: trustme.CA, client: ssl.SSLContext) -> int | None:
    """Handshake ``client`` with a server of ``server_ca`` that requires a client certificate.

    Returns the client certificate's serial the server saw, or ``None`` if the handshake
    failed (the client does not trust the server, or presents nothing it accepts).
    """
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ca.issue_cert("runtimed.test").configure_cert(server)
    server_ca.configure_trust(server)
    server.verify_mode = ssl.CERT_REQUIRED
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client_end = client.wrap_bio(bios[0], bios[1], server_hostname="runtimed.test")
    server_end = server.wrap_bio(bios[2], bios[3], server_side=True)
    try:
        _handshake(client_end, server_end, bios)
    except ssl.SSLError:
        return None
    seen = server_end.getpeercert()
    return int(seen["serialNumber"], 16) if seen else None


async def test_rotated_upstream_material_is_used_for_new_connections(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    ca_file, cert_file, key_file = _write_upstream(tmp_path, old_ca)
    upstream = upstream_tls(ca_file, cert_file, key_file)
    assert upstream is not None
    assert _client_serial_seen_by(old_ca, upstream.context) == _serial_of(cert_file)
    assert _client_serial_seen_by(new_ca, upstream.context) is None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(watch_upstream_tls, upstream, period=30.0))
        await trio.sleep(1)
        _write_upstream(tmp_path, new_ca)  # a CA rotation: new CA, new client certificate
        await trio.sleep(10)
        assert _client_serial_seen_by(new_ca, upstream.context) is None  # not looked yet
        await trio.sleep(30)
        assert _client_serial_seen_by(new_ca, upstream.context) == _serial_of(cert_file)
        nursery.cancel_scope.cancel()


def test_upstream_files_that_do_not_load_are_refused(tmp_path: Path) -> None:
    ca_file, cert_file, key_file = _write_upstream(tmp_path, trustme.CA())
    with pytest.raises(TLSFilesError, match="go together"):
        upstream_tls(ca_file, cert_file, None)
    with pytest.raises(TLSFilesError, match="--upstream-ca-file"):
        upstream_tls(str(tmp_path / "missing.crt"), None, None)
    _write_key(key_file, trustme.CA().issue_cert("x").private_key_pem.bytes())
    with pytest.raises(TLSFilesError, match="--upstream-key-file"):
        upstream_tls(ca_file, cert_file, key_file)
    assert upstream_tls(None, None, None) is None


def test_an_unusable_client_pair_is_named_without_the_ca_option(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file, cert_file, key_file = _write_upstream(tmp_path, ca)
    upstream = upstream_tls(ca_file, cert_file, key_file)
    assert upstream is not None
    _write_key(key_file, ca.issue_cert("other").private_key_pem.bytes())
    with pytest.raises(TLSFilesError) as caught:
        reload_upstream_tls(upstream)
    assert "--upstream-key-file" in str(caught.value)
    assert "--upstream-ca-file" not in str(caught.value)


async def test_an_idle_gateway_stops_at_once_on_shutdown(tls_files: TLSFiles) -> None:
    config = GatewayConfig(
        tls_cert_file=tls_files.cert_file,
        tls_key_file=tls_files.key_file,
        bind="127.0.0.1:0",
        metrics_bind="127.0.0.1:0",
        resolver=StaticResolver({}),
        upstream=upstream_tls(*_write_upstream_files(tls_files)),
    )
    shutdown = trio.Event()
    with trio.fail_after(4):  # the file watchers must not hold the shutdown back
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_gateway, config, shutdown=shutdown))
            shutdown.set()


def _write_upstream_files(tls_files: TLSFiles) -> tuple[str, str, str]:
    """The gateway test CA and leaf as upstream material (files already on disk)."""
    directory = Path(tls_files.cert_file).parent
    ca_file = directory / "upstream-ca.crt"
    ca_file.write_bytes(tls_files.ca.cert_pem.bytes())
    return str(ca_file), tls_files.cert_file, tls_files.key_file


async def test_files_that_change_while_reloading_leave_the_context_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway import tls_reload

    ca = trustme.CA()
    cert_file, key_file = _write_leaf(ca, tmp_path)
    config = _listener(cert_file, key_file)
    context = config.create_ssl_context()
    assert context is not None
    old = _serial_of(cert_file)
    real_read = tls_reload._read

    def read_then_rotate(option: str, path: str) -> bytes:
        data = real_read(option, path)
        if path == cert_file:  # a rotation lands between reading tls.crt and tls.key
            _write_leaf(ca, tmp_path)
        return data

    monkeypatch.setattr(tls_reload, "_read", read_then_rotate)
    with pytest.raises(TLSFilesError):
        reload_listener_tls(context, cert_file, key_file)
    assert _served_serial(context, ca) == old  # the context in use is intact
