"""Peer mTLS material (``--peer-tls-dir``): loading, errors naming the file, CLI validation."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from click.testing import CliRunner
from dp_harness import write_peer_tls

from runtimed.__main__ import main
from runtimed.dataplane.peer import PeerTLSError, load_peer_tls


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


def test_cli_refuses_an_incomplete_peer_tls_dir(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "--pod-name=p",
            "--pod-namespace=ns",
            "--pod-uid=u",
            "--runtime-server=127.0.0.1:9091",
            f"--workspace-dir={tmp_path / 'ws'}",
            f"--peer-tls-dir={tmp_path / 'nothing'}",
        ],
    )
    assert result.exit_code == 2
    assert "tls.crt is missing" in result.output
