"""Cluster PKI (localkube.pki): persistence across restarts, SANs, TLS with trio."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import ssl
import stat
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography import x509

from localkube.pki import DEFAULT_HOSTS, ClusterPKI, PKIError, normalize_host

NOW = 1_700_000_000.0


def sans(cert_file: Path) -> tuple[set[str], set[str]]:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return dns, ips


def test_restart_keeps_ca_admin_token_and_service_account_tokens(tmp_path: Path) -> None:
    first = ClusterPKI.create(tmp_path, ["10.1.2.3"])
    token, _ = first.token_authority.issue(
        "ns", "sa", "u", audiences=[], expiration_seconds=3600, now=NOW
    )
    cert_before = first.server_cert_file.read_bytes()
    second = ClusterPKI.create(tmp_path, ["10.1.2.3"])
    assert second.ca_pem == first.ca_pem
    assert second.admin_token == first.admin_token
    assert second.server_cert_file.read_bytes() == cert_before  # same hosts: kept
    user = second.token_authority.authenticate(token, now=NOW + 1)
    assert user is not None
    assert user.username == "system:serviceaccount:ns:sa"
    assert second.authenticator.authenticate(first.admin_token, now=NOW) is not None


def test_new_hosts_reissue_the_serving_cert_under_the_same_ca(tmp_path: Path) -> None:
    first = ClusterPKI.create(tmp_path, [])
    second = ClusterPKI.create(tmp_path, ["api.example.test"])
    assert second.ca_pem == first.ca_pem
    dns, _ = sans(second.server_cert_file)
    assert "api.example.test" in dns
    ca = x509.load_pem_x509_certificate(second.ca_pem)
    x509.load_pem_x509_certificate(second.server_cert_file.read_bytes()).verify_directly_issued_by(
        ca
    )


def test_sans_put_ips_and_names_in_the_right_types(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, ["127.0.0.5", "0:0::1", "Node-1.Local", "*.svc.test"])
    dns, ips = sans(pki.server_cert_file)
    assert {"127.0.0.1", "::1", "127.0.0.5"} <= ips
    assert {"localhost", "kubernetes.default.svc", "node-1.local", "*.svc.test"} <= dns
    assert not any(_is_ip(name) for name in dns)
    assert set(pki.hosts) == set(DEFAULT_HOSTS) | {"127.0.0.5", "node-1.local", "*.svc.test"}


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "bad", ["", "under_score.test", "-lead.test", "a..b", "x" * 64 + ".test", "http://x"]
)
def test_bad_hosts_are_rejected_before_anything_is_written(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match=r"hosts\[1\]"):
        ClusterPKI.create(tmp_path / "state", ["ok.test", bad])
    assert not (tmp_path / "state").exists()


def test_normalize_host() -> None:
    assert normalize_host("::0001") == "::1"
    assert normalize_host("Example.COM.") == "example.com"


def test_files_are_private(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    for name in ("ca.key", "apiserver.key", "sa.key", "admin-token"):
        mode = stat.S_IMODE(os.stat(pki.directory / name).st_mode)
        assert mode == 0o600, name


def test_ca_certificate_without_its_key_is_an_error(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    (pki.directory / "ca.key").unlink()
    with pytest.raises(PKIError, match="ca.key is missing"):
        ClusterPKI.create(tmp_path, [])


def test_interrupted_ca_creation_starts_over(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    (pki.directory / "ca.crt").unlink()
    again = ClusterPKI.create(tmp_path, [])
    assert again.ca_pem != pki.ca_pem
    ca = x509.load_pem_x509_certificate(again.ca_pem)
    # the serving cert was re-issued under the new CA
    x509.load_pem_x509_certificate(again.server_cert_file.read_bytes()).verify_directly_issued_by(
        ca
    )


def test_corrupt_signing_key_is_an_error(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    (pki.directory / "sa.key").write_bytes(b"not a key")
    with pytest.raises(PKIError, match="sa.key"):
        ClusterPKI.create(tmp_path, [])


def test_temporary_pki_is_removed_when_collected() -> None:
    pki = ClusterPKI.create(None, [])
    directory = pki.directory
    assert (directory / "ca.crt").exists()
    del pki
    import gc

    gc.collect()
    assert not directory.exists()


def test_issue_serving_cert_for_arbitrary_hosts(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    cert_file, key_file = pki.issue_serving_cert(
        ["127.0.3.4", "gw.ns.svc"], out_dir=tmp_path / "gw"
    )
    assert (cert_file.name, key_file.name) == ("tls.crt", "tls.key")
    dns, ips = sans(cert_file)
    assert dns == {"gw.ns.svc"}
    assert ips == {"127.0.3.4"}
    ca = x509.load_pem_x509_certificate(pki.ca_pem)
    x509.load_pem_x509_certificate(cert_file.read_bytes()).verify_directly_issued_by(ca)
    with pytest.raises(ValueError, match="at least one"):
        pki.issue_serving_cert([], out_dir=tmp_path / "none")
    with pytest.raises(ValueError, match=r"hosts\[0\]"):
        pki.issue_serving_cert(["bad host"], out_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()


async def _echo_over_tls(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, host: str
) -> tuple[bytes, str | None]:
    async def handler(stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            data = await stream.receive_some(100)
            await stream.send_all(data.upper())
            await stream.aclose()
        except trio.BrokenResourceError:
            pass  # the client refused our certificate

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_ssl_over_tcp, handler, 0, server_ctx, host=host)
        )
        port = listeners[0].transport_listener.socket.getsockname()[1]
        with trio.fail_after(5):
            client = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=client_ctx)
            await client.send_all(b"ping")
            reply = bytes(await client.receive_some(100))
            alpn = client.selected_alpn_protocol()
            await client.aclose()
        nursery.cancel_scope.cancel()
    return reply, alpn


async def test_client_trusting_ca_pem_connects_to_ssl_context(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    client_ctx = ssl.create_default_context(cadata=pki.ca_pem.decode())
    client_ctx.set_alpn_protocols(["h2", "http/1.1"])
    reply, alpn = await _echo_over_tls(pki.ssl_context(), client_ctx, "127.0.0.1")
    assert reply == b"PING"
    assert alpn == "http/1.1"
    reply, _ = await _echo_over_tls(pki.ssl_context(), pki.client_ssl_context(), "127.0.0.1")
    assert reply == b"PING"


@pytest.mark.parametrize("host", ["::1", "localhost"])
async def test_ipv6_and_dns_hosts_verify(tmp_path: Path, host: str) -> None:
    if host == "::1":
        try:
            with socket.socket(socket.AF_INET6) as probe:
                probe.bind(("::1", 0))
        except OSError as exc:
            pytest.skip(f"no IPv6 loopback on this machine: {exc}")
    pki = ClusterPKI.create(tmp_path, [])
    reply, _ = await _echo_over_tls(pki.ssl_context(), pki.client_ssl_context(), host)
    assert reply == b"PING"


async def test_client_without_the_ca_is_refused(tmp_path: Path) -> None:
    pki = ClusterPKI.create(tmp_path, [])
    other = ClusterPKI.create(tmp_path / "other", [])
    refused = pytest.RaisesExc(
        trio.BrokenResourceError,
        check=lambda e: isinstance(e.__cause__, ssl.SSLCertVerificationError),
    )
    with pytest.RaisesGroup(refused):
        await _echo_over_tls(pki.ssl_context(), other.client_ssl_context(), "127.0.0.1")


def test_server_context_refuses_tls_1_1(tmp_path: Path) -> None:
    ctx = ClusterPKI.create(tmp_path, []).ssl_context()
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    assert (
        ClusterPKI.create(tmp_path, []).ssl_context(client_auth="required").verify_mode
        == ssl.CERT_REQUIRED
    )


VERSION_BODY = (
    b'{"major":"1","minor":"32","gitVersion":"v1.32.0-localkube","platform":"linux/amd64"}'
)


@pytest.mark.kubectl
async def test_kubectl_trusts_the_serving_certificate(tmp_path: Path) -> None:
    """Go's TLS stack (kubectl) accepts the CA and serving certificate, and sends the token."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    pki = ClusterPKI.create(tmp_path, [])
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(pki.ca_pem)
    seen_headers: list[bytes] = []

    async def handler(stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                request += chunk
            seen_headers.append(request)
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: "
                + str(len(VERSION_BODY)).encode()
                + b"\r\n\r\n"
            )
            await stream.send_all(head + VERSION_BODY)
            await stream.aclose()
        except trio.BrokenResourceError:
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_ssl_over_tcp, handler, 0, pki.ssl_context(), host="127.0.0.1")
        )
        port = listeners[0].transport_listener.socket.getsockname()[1]
        with trio.fail_after(20):
            result = await trio.run_process(
                [
                    kubectl,
                    f"--server=https://127.0.0.1:{port}",
                    f"--certificate-authority={ca_file}",
                    f"--token={pki.admin_token}",
                    "version",
                    "-o",
                    "json",
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")},
            )
        nursery.cancel_scope.cancel()
    assert result.returncode == 0, result.stderr.decode()
    assert b"v1.32.0-localkube" in result.stdout
    assert any(f"Bearer {pki.admin_token}".encode() in h for h in seen_headers)
