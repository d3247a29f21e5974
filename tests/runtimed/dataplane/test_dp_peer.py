"""Peer mTLS material (``--peer-tls-dir``): loading, errors naming the file, CLI validation.

Also the CLI's handling of the optional volumes the control plane mounts: an empty or absent
peer TLS directory or gateway CA file starts runtimed with the feature off and a warning;
present but broken material is a usage error.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trustme
from click.testing import CliRunner, Result
from cryptography import x509
from dp_harness import TLSFiles, write_peer_tls

import runtimed.__main__ as cli
from runtimed.__main__ import main
from runtimed.daemon import DaemonConfig
from runtimed.dataplane.peer import (
    PeerTLS,
    PeerTLSAppeared,
    PeerTLSError,
    await_peer_tls,
    load_peer_tls,
    peer_tls_present,
    reload_peer_tls,
    watch_peer_tls,
)


def test_contexts_require_the_installation_ca(tmp_path: Path) -> None:
    tls = load_peer_tls(write_peer_tls(tmp_path).directory)
    assert tls.server.verify_mode is ssl.CERT_OPTIONAL  # the gateway presents no certificate
    assert tls.client.verify_mode is ssl.CERT_REQUIRED
    assert not tls.client.check_hostname  # peers are dialled by Pod IP; the CA is the identity
    assert tls.server.minimum_version >= ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize("missing", ["tls.crt", "tls.key", "ca.crt"])
def test_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    write_peer_tls(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(PeerTLSError, match=f"{missing} is missing"):
        load_peer_tls(tmp_path)


def test_mismatched_key_is_rejected(tmp_path: Path) -> None:
    write_peer_tls(tmp_path)
    other = trustme.CA().issue_cert("x")
    (tmp_path / "tls.key").write_bytes(other.private_key_pem.bytes())
    with pytest.raises(PeerTLSError, match="cannot be loaded as a pair"):
        load_peer_tls(tmp_path)


def test_garbage_ca_is_rejected(tmp_path: Path) -> None:
    write_peer_tls(tmp_path)
    (tmp_path / "ca.crt").write_text("not a certificate")
    with pytest.raises(PeerTLSError, match=r"ca\.crt cannot be loaded"):
        load_peer_tls(tmp_path)


def _base_args(tmp_path: Path) -> list[str]:
    return [
        "--pod-name=p",
        "--pod-namespace=ns",
        "--pod-uid=u",
        "--runtime-server=127.0.0.1:9091",
        f"--workspace-dir={tmp_path / 'ws'}",
    ]


def _start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[Result, list[DaemonConfig], list[str]]:
    """Invoke the CLI up to ``trio.run``; return the result, the config and warnings."""
    started: list[DaemonConfig] = []
    warnings: list[str] = []
    monkeypatch.setattr(cli.trio, "run", lambda _fn, config: started.append(config))
    monkeypatch.setattr(cli.log, "warning", lambda message, *a, **k: warnings.append(message))
    result = CliRunner().invoke(main, [*_base_args(tmp_path), *args])
    return result, started, warnings


@pytest.mark.parametrize("present", [["tls.crt"], ["tls.crt", "ca.crt"], ["tls.key"]])
def test_cli_refuses_a_peer_tls_secret_missing_some_keys(
    tmp_path: Path, present: list[str]
) -> None:
    full = write_peer_tls(tmp_path / "full").directory
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in present:
        (partial / name).write_bytes((full / name).read_bytes())
    result = CliRunner().invoke(main, [*_base_args(tmp_path), f"--peer-tls-dir={partial}"])
    assert result.exit_code == 2
    missing = [n for n in ("tls.crt", "tls.key", "ca.crt") if n not in present]
    assert f"{', '.join(missing)} missing" in result.output


def test_presence_is_all_or_nothing(tmp_path: Path) -> None:
    assert peer_tls_present(tmp_path / "absent") is False
    (tmp_path / "empty").mkdir()
    assert peer_tls_present(tmp_path / "empty") is False
    assert peer_tls_present(write_peer_tls(tmp_path / "full").directory) is True


@pytest.mark.parametrize("exists", [True, False])
def test_an_empty_optional_peer_volume_starts_plaintext_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exists: bool
) -> None:
    directory = tmp_path / "peer-tls"
    if exists:
        directory.mkdir()  # what an optional Secret volume looks like before the Secret exists
    result, started, warnings = _start(tmp_path, monkeypatch, f"--peer-tls-dir={directory}")
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.dataplane is not None
    assert config.dataplane.peer_tls_dir is None  # plaintext port, no hops
    assert config.dataplane.awaited_peer_tls_dir == directory  # until the files appear
    assert any("peer hops are off" in w and str(directory) in w for w in warnings), warnings


def test_a_complete_peer_volume_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = write_peer_tls(tmp_path / "peer-tls").directory
    result, started, warnings = _start(tmp_path, monkeypatch, f"--peer-tls-dir={directory}")
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.dataplane is not None
    assert config.dataplane.peer_tls_dir == directory
    assert warnings == []


def test_a_missing_gateway_ca_file_omits_the_ca_bundle_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_file = tmp_path / "gateway-ca" / "ca.crt"
    result, started, warnings = _start(tmp_path, monkeypatch, f"--gateway-ca-file={ca_file}")
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.functions is not None
    assert config.functions.ca_bundle is None
    assert any("without caBundle" in w and str(ca_file) in w for w in warnings), warnings


def test_a_present_gateway_ca_file_is_published_and_a_broken_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = trustme.CA().cert_pem.bytes()
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(pem)
    result, started, warnings = _start(tmp_path, monkeypatch, f"--gateway-ca-file={ca_file}")
    assert result.exit_code == 0, result.output
    assert started[0].functions is not None
    assert started[0].functions.ca_bundle == pem
    assert warnings == []
    ca_file.write_text("no certificate here\n")
    refused = CliRunner().invoke(main, [*_base_args(tmp_path), f"--gateway-ca-file={ca_file}"])
    assert refused.exit_code == 2
    assert "--gateway-ca-file" in refused.output
    assert "holds no PEM certificate" in refused.output


def test_path_root_prefixes_the_mounted_material(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "pod"
    write_peer_tls(root / "etc" / "kruntimes" / "peer-tls")
    (root / "etc" / "kruntimes" / "gateway-ca").mkdir(parents=True)
    (root / "etc" / "kruntimes" / "gateway-ca" / "ca.crt").write_bytes(
        trustme.CA().cert_pem.bytes()
    )
    result, started, warnings = _start(
        tmp_path,
        monkeypatch,
        f"--path-root={root}",
        "--peer-tls-dir=/etc/kruntimes/peer-tls",
        "--gateway-ca-file=/etc/kruntimes/gateway-ca/ca.crt",
    )
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.dataplane is not None
    assert config.dataplane.peer_tls_dir == root / "etc" / "kruntimes" / "peer-tls"
    assert config.functions is not None
    assert config.functions.ca_bundle is not None
    assert warnings == []


# -- rotation: the mounted Secret's files change while runtimed runs -----------------------


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> int:
    """TLS handshake in memory; the serial number of the certificate the server presented."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client_end = client.wrap_bio(client_in, client_out, server_hostname="runtimed")
    server_end = server.wrap_bio(server_in, server_out, server_side=True)
    done = [False, False]
    for _ in range(10):
        for index, end in enumerate((client_end, server_end)):
            try:
                end.do_handshake()
                done[index] = True
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done):
            break
    certificate = client_end.getpeercert()
    assert certificate is not None
    return int(certificate["serialNumber"], 16)


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    """A gateway-like client context: trusts ``ca``, presents nothing, no host name check."""
    context = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    context.check_hostname = False
    return context


def _serial(directory: Path) -> int:
    pem = (directory / "tls.crt").read_bytes()
    return x509.load_pem_x509_certificate(pem).serial_number


@asynccontextmanager
async def _watched(directory: Path) -> AsyncIterator[tuple[TLSFiles, int, PeerTLS]]:
    """Material in ``directory`` (its CA, the leaf's serial), loaded and watched every 30 s."""
    first = write_peer_tls(directory)
    tls = load_peer_tls(directory)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(watch_peer_tls, tls, directory, period=30.0))
        await trio.sleep(1)
        yield first, _serial(directory), tls
        nursery.cancel_scope.cancel()


async def test_a_rotated_certificate_is_served_after_the_next_look(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    async with _watched(tmp_path) as (first, old_serial, tls):
        rotated = write_peer_tls(tmp_path)  # a new CA too: a CA rotation
        await trio.sleep(10)
        assert _handshake(tls.server, _trusting(first.ca)) == old_serial  # not looked yet
        await trio.sleep(30)
        assert _handshake(tls.server, _trusting(rotated.ca)) == _serial(tmp_path)
        # the peer hop presents the new certificate and trusts the new CA
        assert _handshake(load_peer_tls(tmp_path).server, tls.client) == _serial(tmp_path)


async def test_unusable_files_keep_the_last_material_until_fixed(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    async with _watched(tmp_path) as (first, old_serial, tls):
        write_peer_tls(tmp_path, first.ca)
        (tmp_path / "tls.key").write_bytes(trustme.CA().issue_cert("x").private_key_pem.bytes())
        await trio.sleep(95)  # three looks at the same broken files
        assert _handshake(tls.server, _trusting(first.ca)) == old_serial
        warnings = [r for r in caplog.records if "not usable" in r.getMessage()]
        assert len(warnings) == 1
        assert "cannot be loaded as a pair" in warnings[0].getMessage()
        write_peer_tls(tmp_path, first.ca)
        await trio.sleep(30)
        assert _handshake(tls.server, _trusting(first.ca)) == _serial(tmp_path) != old_serial


def _leaf_from_another_ca(directory: Path) -> None:
    """Replace tls.crt/tls.key with a pair issued by a CA that ca.crt does not hold."""
    leaf = trustme.CA().issue_cert("runtimed.kruntimes.internal")
    (directory / "tls.key").write_bytes(leaf.private_key_pem.bytes())
    (directory / "tls.crt").write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))


def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    write_peer_tls(tmp_path)
    _leaf_from_another_ca(tmp_path)
    with pytest.raises(PeerTLSError, match="not accepted by a peer trusting ca.crt"):
        load_peer_tls(tmp_path)


async def test_a_rotation_to_another_ca_without_its_ca_crt_is_not_loaded(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    async with _watched(tmp_path) as (first, old_serial, tls):
        _leaf_from_another_ca(tmp_path)
        await trio.sleep(31)
        assert _handshake(tls.server, _trusting(first.ca)) == old_serial
        assert any("not accepted by a peer" in r.getMessage() for r in caplog.records)


def test_files_that_change_while_reloading_leave_the_contexts_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_peer_tls(tmp_path)
    tls = load_peer_tls(tmp_path)
    old_serial = _serial(tmp_path)
    real_read_bytes = Path.read_bytes

    def read_then_rotate(path: Path) -> bytes:
        data = real_read_bytes(path)
        if path.name == "tls.crt":  # a rotation lands between reading tls.crt and tls.key
            write_peer_tls(tmp_path, first.ca)
        return data

    monkeypatch.setattr(Path, "read_bytes", read_then_rotate)
    with pytest.raises(PeerTLSError, match="cannot be loaded as a pair"):
        reload_peer_tls(tls, tmp_path)
    monkeypatch.undo()
    # both contexts still hold the old, matching pair
    assert _handshake(tls.server, _trusting(first.ca)) == old_serial
    assert _handshake(load_peer_tls(tmp_path).server, tls.client) == _serial(tmp_path)


async def test_a_plaintext_runtimed_stops_once_the_peer_material_appears(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    from runtimed.__main__ import _appeared

    directory = tmp_path / "peer-tls"
    directory.mkdir()  # the optional Secret does not exist yet: an empty volume
    with pytest.raises(BaseExceptionGroup) as caught:  # noqa: PT012 - the files land meanwhile
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(await_peer_tls, directory, period=30.0))
            await trio.sleep(40)
            (directory / "tls.crt").write_bytes(b"not yet")  # half a Secret: waited out
            await trio.sleep(40)
            write_peer_tls(directory)
            await trio.sleep(35)
            pytest.fail("runtimed kept serving plaintext after the material appeared")
    appeared = _appeared(caught.value)
    assert appeared is not None
    assert appeared.directory == directory
    assert trio.current_time() < 120


def test_runtimed_exits_cleanly_for_its_container_to_restart() -> None:
    from runtimed.__main__ import _appeared

    appeared = PeerTLSAppeared(Path("/x"))
    assert _appeared(BaseExceptionGroup("nursery", [ValueError("a"), appeared])) is appeared
    assert _appeared(ValueError("other")) is None
