"""The dev install's TLS material: gateway serving certificate and peer mTLS pair."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from gateway.targets import service_dns_name
from krt.cli.dev_certs import gateway_hosts, gateway_tls, peer_hosts, peer_tls, tls_secret

NS = "kruntimes-system"


def sans(pem: bytes) -> set[str]:
    cert = x509.load_pem_x509_certificate(pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }


def test_gateway_hosts_cover_the_service_names_and_its_cluster_ip() -> None:
    assert gateway_hosts(NS, "127.0.200.7") == [
        "runtime-gateway.kruntimes-system.svc.cluster.local",
        "runtime-gateway.kruntimes-system.svc",
        "runtime-gateway.kruntimes-system",
        "127.0.200.7",
    ]
    assert gateway_hosts(NS, None)[-1] == "runtime-gateway.kruntimes-system"
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        gateway_hosts(NS, "not-an-ip")


def handshake(pair_cert: bytes, pair_key: bytes, ca: bytes, tmp: Path, server_name: str) -> None:
    """A real TLS handshake: a server with the pair, a client trusting only ``ca``."""
    (tmp / "c.pem").write_bytes(pair_cert)
    (tmp / "k.pem").write_bytes(pair_key)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    client_ctx = ssl.create_default_context(cadata=ca.decode())
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with client_ctx.wrap_socket(raw, server_hostname=server_name) as tls:
                assert tls.version()
    finally:
        thread.join(5)
        listener.close()


def test_gateway_certificate_verifies_for_its_names_against_the_dev_ca(tmp_path: Path) -> None:
    hosts = gateway_hosts(NS, "127.0.200.9")
    pair = gateway_tls(tmp_path, hosts)
    assert sans(pair.cert) == set(hosts)
    handshake(
        pair.cert, pair.key, pair.ca, tmp_path, "runtime-gateway.kruntimes-system.svc.cluster.local"
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(pair.cert, pair.key, pair.ca, tmp_path, "elsewhere.example.com")
    # the files are private
    for path in (tmp_path / "kruntimes").rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o077 == 0, path


def test_rerun_keeps_ca_and_leaf_and_a_new_cluster_ip_reissues_the_leaf_only(
    tmp_path: Path,
) -> None:
    first = gateway_tls(tmp_path, gateway_hosts(NS, "127.0.200.9"))
    again = gateway_tls(tmp_path, gateway_hosts(NS, "127.0.200.9"))
    assert again == first
    moved = gateway_tls(tmp_path, gateway_hosts(NS, "127.0.200.10"))
    assert moved.ca == first.ca
    assert moved.cert != first.cert
    assert "127.0.200.10" in sans(moved.cert)


def test_a_leaf_not_signed_by_the_ca_is_replaced(tmp_path: Path) -> None:
    hosts = gateway_hosts(NS, None)
    first = gateway_tls(tmp_path, hosts)
    # another CA's leaf with the same names put in place of ours
    other = gateway_tls(tmp_path / "other", hosts)
    (tmp_path / "kruntimes" / "gateway-tls" / "tls.crt").write_bytes(other.cert)
    fixed = gateway_tls(tmp_path, hosts)
    assert fixed.cert != other.cert
    handshake(fixed.cert, fixed.key, first.ca, tmp_path, hosts[0])


def test_bad_hosts_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither an IP address nor a DNS name"):
        gateway_tls(tmp_path, ["bad host!"])
    with pytest.raises(ValueError, match="at least one"):
        gateway_tls(tmp_path, [])
    assert not (tmp_path / "kruntimes").exists()


def test_peer_pair_has_its_own_ca_and_the_secret_carries_all_three_files(tmp_path: Path) -> None:
    peer = peer_tls(tmp_path, ["default"])
    gateway = gateway_tls(tmp_path, gateway_hosts(NS, None))
    assert peer.ca != gateway.ca
    secret = tls_secret("kruntimes-peer-tls", "default", peer)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "kruntimes-peer-tls",
        "namespace": "default",
        "labels": {"app.kubernetes.io/part-of": "kruntimes", "kruntimes.io/dev": "true"},
    }
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {"tls.crt": peer.cert, "tls.key": peer.key, "ca.crt": peer.ca}
    cert = x509.load_pem_x509_certificate(peer.cert)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.ExtendedKeyUsageOID.CLIENT_AUTH in usages  # usable as the mTLS client side


def test_peer_certificate_names_every_runtime_service_the_gateway_dials(tmp_path: Path) -> None:
    assert peer_hosts(["default", "team-a"]) == [
        "runtimed.kruntimes.peer",
        "*.default.svc",
        "*.default.svc.cluster.local",
        "*.team-a.svc",
        "*.team-a.svc.cluster.local",
    ]
    peer = peer_tls(tmp_path, ["default"])
    assert "*.default.svc" in sans(peer.cert)
    # the gateway verifies the Runtime Service's name (gateway.targets): a real handshake
    # with hostname checking, as the gateway's upstream context does it
    name = service_dns_name("default", "python")
    assert name == "runtime-python.default.svc"
    handshake(peer.cert, peer.key, peer.ca, tmp_path, name)
    handshake(peer.cert, peer.key, peer.ca, tmp_path, f"{name}.cluster.local")
    # another namespace's Service is not covered: verification fails, it is not skipped
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(peer.cert, peer.key, peer.ca, tmp_path, service_dns_name("other", "python"))


def test_peer_leaf_is_reissued_when_the_namespaces_change(tmp_path: Path) -> None:
    first = peer_tls(tmp_path, ["default"])
    assert peer_tls(tmp_path, ["default"]).cert == first.cert  # kept on a re-run
    wider = peer_tls(tmp_path, ["default", "team-a"])
    assert wider.cert != first.cert
    assert wider.ca == first.ca
    assert "*.team-a.svc" in sans(wider.cert)


def test_a_wildcard_must_be_the_whole_leftmost_label(tmp_path: Path) -> None:
    for bad in ("*.svc", "a*.default.svc", "x.*.svc"):
        with pytest.raises(ValueError, match="neither an IP address nor a DNS name"):
            gateway_tls(tmp_path, [bad])
