"""TLS material of a dev cluster's kruntimes install: the gateway CA and the peer mTLS pair.

Seed 000 (Runtime Gateway) leaves certificate issuance to the installation: "a user-managed
Secret or optional cert-manager". ``krt dev up`` is that installation on localkube, so it
generates, per state directory, two private CAs with trustme (already a dependency):

* **gateway CA** (``<state>/kruntimes/gateway-ca/``): signs the serving certificate of the
  shared ``runtime-gateway`` Service, for its DNS names and its ClusterIP. Clients trust it
  through ``status.endpoint.caBundle``; it signs nothing else, so trusting it never means
  trusting the API server (localkube's own CA stays separate).
* **peer CA** (``<state>/kruntimes/peer-ca/``): signs the one certificate every runtimed and
  the gateway share for peer mTLS. The gateway dials a Runtime's Service by name
  (``runtime-<runtime>.<namespace>.svc``, :func:`gateway.targets.service_dns_name`) and
  verifies that name, so the certificate carries ``*.<ns>.svc`` and
  ``*.<ns>.svc.cluster.local`` for every Runtime namespace (:func:`peer_hosts`); the
  runtimed-to-runtimed hop dials Pod IPs and checks the CA only (``runtimed.dataplane.peer``:
  the dedicated CA is the identity there).

Every file is kept, so a re-run (or a restarted cluster) keeps the same CAs and the
caBundles published before stay valid. A leaf is re-issued only when its names change (the
ClusterIP of a re-created Service, for example) or it no longer chains to its CA. Files are
written with mode 0600, key before certificate. Blocking file I/O: call before or outside
the event loop (``trio.to_thread.run_sync``).
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trustme
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

__all__ = [
    "GATEWAY_SERVICE",
    "PEER_IDENTITY",
    "TlsPair",
    "foreign_certificate",
    "gateway_hosts",
    "gateway_tls",
    "installed_cas",
    "namespace_peer_tls",
    "peer_hosts",
    "peer_tls",
    "tls_secret",
]

#: The gateway Service's name (fixed by the chart: every endpoint URL names it).
GATEWAY_SERVICE: Final = "runtime-gateway"
#: The DNS name in the shared peer certificate (informational: peers verify the CA only).
PEER_IDENTITY: Final = "runtimed.kruntimes.peer"


@dataclass(frozen=True)
class TlsPair:
    """A leaf certificate with its key and the CA that signed it (PEM bytes).

    Attributes:
        cert: the leaf certificate followed by its chain.
        key: the leaf's private key (PKCS#8).
        ca: the signing CA's certificate.
    """

    cert: bytes
    key: bytes
    ca: bytes


def gateway_hosts(namespace: str, cluster_ip: str | None) -> list[str]:
    """Names the gateway's serving certificate covers.

    Args:
        namespace: the gateway's namespace (the release namespace).
        cluster_ip: the ``runtime-gateway`` Service's ClusterIP, or None.

    Returns:
        ``runtime-gateway.<ns>.svc.cluster.local``, ``.svc``, ``runtime-gateway.<ns>`` and the
        ClusterIP (what ``krt invoke --gateway-url`` dials on localkube).
    """
    base = f"{GATEWAY_SERVICE}.{namespace}"
    hosts = [f"{base}.svc.cluster.local", f"{base}.svc", base]
    if cluster_ip:
        hosts.append(str(ipaddress.ip_address(cluster_ip)))
    return hosts


def gateway_tls(state_dir: Path, hosts: list[str]) -> TlsPair:
    """The gateway's serving certificate for ``hosts``, from the dev cluster's gateway CA.

    Args:
        state_dir: the dev cluster's state directory.
        hosts: DNS names and IP addresses (see :func:`gateway_hosts`); at least one.

    Raises:
        ValueError: no hosts, or one that is neither a DNS name nor an IP address.
        OSError: the files cannot be read or written.
    """
    return _pair(state_dir / "kruntimes", "gateway", hosts)


def peer_hosts(namespaces: list[str]) -> list[str]:
    """Names the shared peer certificate covers.

    Args:
        namespaces: the namespaces whose Runtimes' Services the gateway dials.

    Returns:
        :data:`PEER_IDENTITY`, then ``*.<ns>.svc`` and ``*.<ns>.svc.cluster.local`` per
        namespace: every ``runtime-<runtime>.<ns>.svc`` name the gateway verifies.
    """
    hosts = [PEER_IDENTITY]
    for namespace in namespaces:
        hosts += [f"*.{namespace}.svc", f"*.{namespace}.svc.cluster.local"]
    return hosts


def peer_tls(state_dir: Path, namespaces: list[str]) -> TlsPair:
    """The shared runtimed/gateway peer mTLS certificate, from the dev cluster's peer CA.

    Args:
        state_dir: the dev cluster's state directory.
        namespaces: the Runtimes' namespaces (see :func:`peer_hosts`); an existing leaf
            for other names is re-issued.

    Raises:
        ValueError: a namespace that is not a DNS label.
        OSError: the files cannot be read or written.
    """
    return _pair(state_dir / "kruntimes", "peer", peer_hosts(namespaces))


def namespace_peer_tls(state_dir: Path, namespace: str) -> TlsPair:
    """A peer mTLS certificate for the Runtimes of one more namespace, from the peer CA.

    The shared leaf of :func:`peer_tls` names the install's own Runtime namespace; a
    Runtime created later in another namespace gets its own leaf from the same CA (kept
    under ``kruntimes/peer-tls-namespaces/<namespace>/``), so the gateway can verify
    ``runtime-<runtime>.<namespace>.svc`` and the Secrets already handed out stay as they
    are.

    Args:
        state_dir: the dev cluster's state directory.
        namespace: the Runtimes' namespace (a DNS label).

    Raises:
        ValueError: ``namespace`` is not a DNS label.
        OSError: the files cannot be read or written.
    """
    if not _dns_label(namespace):
        raise ValueError(f"namespace {namespace!r} is not a DNS label")
    root = state_dir / "kruntimes"
    return _pair(
        root, "peer", peer_hosts([namespace]), leaf_dir=root / "peer-tls-namespaces" / namespace
    )


def installed_cas(state_dir: Path) -> bool:
    """Whether ``krt dev up`` generated this cluster's gateway and peer CAs (it installed)."""
    root = state_dir / "kruntimes"
    return all(
        (root / f"{name}-ca" / leaf).is_file()
        for name in ("gateway", "peer")
        for leaf in ("ca.crt", "ca.key")
    )


def tls_secret(name: str, namespace: str, pair: TlsPair) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret holding ``tls.crt``, ``tls.key`` and ``ca.crt``."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "kruntimes", "kruntimes.io/dev": "true"},
        },
        "data": {"tls.crt": b64(pair.cert), "tls.key": b64(pair.key), "ca.crt": b64(pair.ca)},
    }


def foreign_certificate(live: Mapping[str, Any], desired: Mapping[str, Any]) -> str:
    """Why a live TLS Secret is not one ``krt dev up`` made, or ``""`` when it is.

    ``krt dev up``'s copies hold a leaf signed by the dev CA (``tls.crt``), its key
    (``tls.key``) and that CA (``ca.crt``). A leaf of the same CA for other names (issued
    before the gateway's ClusterIP or the Runtime namespaces changed) is still ``krt dev
    up``'s own: replacing it is a routine re-issue. Anything else was put there by someone
    else, e.g. a certificate rotated by hand with ``kubectl create secret tls``.

    Args:
        live: the Secret as the API server returned it (``data`` base64-encoded).
        desired: the Secret ``krt dev up`` writes (:func:`tls_secret`); its ``ca.crt`` is
            the dev CA.

    Returns:
        E.g. ``its tls.crt is not signed by the dev CA``; ``""`` for ``krt dev up``'s own.
    """
    data = live.get("data") or {}
    dev_ca_pem = base64.b64decode((desired.get("data") or {}).get("ca.crt") or "")
    try:
        cert_pem = base64.b64decode(data.get("tls.crt") or "", validate=True)
        key_pem = base64.b64decode(data.get("tls.key") or "", validate=True)
        ca_pem = base64.b64decode(data.get("ca.crt") or "", validate=True)
    except ValueError:
        return "its data is not base64"
    if not cert_pem or not key_pem:
        return "it has no tls.crt or no tls.key"
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return "its tls.crt is not a PEM certificate"
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return "its tls.key is not an unencrypted PEM private key"
    dev_ca = x509.load_pem_x509_certificate(dev_ca_pem)
    try:
        cert.verify_directly_issued_by(dev_ca)
    except (ValueError, TypeError, InvalidSignature):
        return "its tls.crt is not signed by the dev CA"
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, public) != cert.public_key().public_bytes(
        encoding, public
    ):
        return "its tls.key is not the key of its tls.crt"
    if ca_pem.strip() != dev_ca_pem.strip():
        return "its ca.crt is not the dev CA"
    return ""


def _pair(root: Path, name: str, hosts: list[str], *, leaf_dir: Path | None = None) -> TlsPair:
    if not hosts:
        raise ValueError(f"{name} certificate: at least one DNS name or IP address is required")
    for host in hosts:
        _check_host(host)
    ca_dir = root / f"{name}-ca"
    leaf_dir = leaf_dir or root / f"{name}-tls"
    ca = _load_or_create_ca(ca_dir, f"kruntimes dev {name} CA")
    ca_pem = ca.cert_pem.bytes()
    cert_file, key_file = leaf_dir / "tls.crt", leaf_dir / "tls.key"
    if cert_file.exists() and key_file.exists():
        cert, key = cert_file.read_bytes(), key_file.read_bytes()
        if _leaf_matches(cert, ca_pem, hosts):
            return TlsPair(cert=cert, key=key, ca=ca_pem)
    leaf = ca.issue_cert(*hosts, organization_name="kruntimes dev")
    key = leaf.private_key_pem.bytes()
    cert = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
    leaf_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_private(key_file, key)
    _write_private(cert_file, cert)
    return TlsPair(cert=cert, key=key, ca=ca_pem)


def _check_host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    labels = host.split(".")
    if labels[0] == "*" and len(labels) > 2:
        labels = labels[1:]  # a wildcard for one leftmost label (RFC 6125)
    if not host or len(host) > 253 or not all(_dns_label(label) for label in labels):
        raise ValueError(f"certificate host {host!r} is neither an IP address nor a DNS name")


def _dns_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and label[0].isalnum()
        and label[-1].isalnum()
        and all(c.isalnum() or c == "-" for c in label)
        and label.isascii()
    )


def _load_or_create_ca(directory: Path, name: str) -> trustme.CA:
    cert_file, key_file = directory / "ca.crt", directory / "ca.key"
    if cert_file.exists() and key_file.exists():
        return trustme.CA.from_pem(cert_file.read_bytes(), key_file.read_bytes())
    ca = trustme.CA(organization_name="kruntimes dev", organization_unit_name=name)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_private(key_file, ca.private_key_pem.bytes())
    _write_private(cert_file, ca.cert_pem.bytes())
    return ca


def _leaf_matches(cert_pem: bytes, ca_pem: bytes, hosts: list[str]) -> bool:
    """Whether the leaf covers exactly ``hosts`` and is signed by the CA."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    names = {str(n) for n in san.get_values_for_type(x509.DNSName)}
    names |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    if names != set(hosts):
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
