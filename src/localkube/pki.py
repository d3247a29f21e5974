"""The cluster's key material: CA, serving certificate, ServiceAccount key, admin token.

Issue 3 asks for an HTTPS API server whose kubeconfig (cluster CA + admin bearer token)
works with kubectl and kr8s, and whose ServiceAccount tokens stay valid across a restart.
:class:`ClusterPKI` owns all of that under ``STATE_DIR/pki/``::

    ca.crt, ca.key              cluster CA (EC P-256), the kubeconfig's certificate-authority-data
    apiserver.crt, apiserver.key serving certificate for the requested hosts, signed by the CA
    sa.key                      ServiceAccount token signing key (EC P-256, ES256)
    admin-token                 the admin bearer token (random, 256 bits)

Certificates are made with trustme, which can persist and reload a CA
(``CA.from_pem``/``cert_pem``/``private_key_pem``) and puts IP addresses and DNS names in
the right SubjectAltName types; cryptography (which trustme builds on) handles the
signing key and the checks on reload. A restart loads everything it finds, re-issues the
serving certificate only if the hosts changed or it no longer matches the CA, and
generates what is missing. Every file is written atomically (temporary file + rename) with
mode 0600, and the CA key is written before the CA certificate, so a crash never leaves a
certificate without its key.

All methods do blocking file I/O and are meant for start-up; from trio call them through
``trio.to_thread.run_sync`` if the event loop is already serving.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import ssl
import tempfile
import weakref
from pathlib import Path
from typing import Literal

import trustme
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from localkube.auth.authn import BearerAuthenticator
from localkube.auth.tokens import TokenAuthority

ISSUER = "https://kubernetes.default.svc.cluster.local"
"""ServiceAccount token issuer and default API audience, as on a kubeadm cluster."""

DEFAULT_HOSTS = (
    "localhost",
    "127.0.0.1",
    "::1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
"""Names every API server certificate covers in addition to the requested hosts."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class PKIError(Exception):
    """The state directory holds key material that cannot be used (and is not replaced)."""


def normalize_host(host: object, *, field: str = "host") -> str:
    """Return a host as it goes into a SubjectAltName, or raise.

    Args:
        host: an IPv4/IPv6 address (returned in canonical form, ``::1``) or a DNS name
            (lower-cased; a leading ``*.`` wildcard label is allowed).
        field: the name used in error messages (``hosts[2]``).

    Raises:
        ValueError: neither a valid IP address nor a valid DNS name (which and why).
    """
    if not isinstance(host, str) or not host:
        raise ValueError(f"{field}: must be a non-empty string, got {host!r}")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    name = host.lower().rstrip(".")
    if len(name) > 253:
        raise ValueError(f"{field}: DNS name {host!r} is longer than 253 characters")
    labels = name.split(".")
    if labels[0] == "*":
        labels = labels[1:]
    if not labels or not all(_DNS_LABEL.match(label) for label in labels):
        raise ValueError(
            f"{field}: {host!r} is neither an IP address nor a DNS name "
            "(labels of a-z, 0-9 and '-', at most 63 characters each)"
        )
    return name


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _san_hosts(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    names = {str(n) for n in san.get_values_for_type(x509.DNSName)}
    names |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return names


def _same_public_key(cert: x509.Certificate, key_pem: bytes) -> bool:
    key = serialization.load_pem_private_key(key_pem, password=None)
    der = serialization.Encoding.DER
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
    )


def _signed_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


class ClusterPKI:
    """Key material of one localkube cluster; build it with :meth:`create`.

    Attributes:
        directory: where the files live (``STATE_DIR/pki`` or a temporary directory).
        ca_pem: the CA certificate (PEM bytes), for kubeconfig and clients.
        server_cert_file, server_key_file: the API server's certificate and key (PEM).
        hosts: the names and addresses the serving certificate covers.
        admin_token: the admin bearer token.
        token_authority: mints and verifies ServiceAccount tokens.
        authenticator: bearer-token authentication (admin token + ServiceAccount tokens).
    """

    def __init__(
        self,
        *,
        directory: Path,
        ca: trustme.CA,
        hosts: list[str],
        admin_token: str,
        signing_key: ec.EllipticCurvePrivateKey,
    ) -> None:
        self.directory = directory
        self._ca = ca
        self.ca_pem: bytes = ca.cert_pem.bytes()
        self.hosts = hosts
        self.server_cert_file = directory / "apiserver.crt"
        self.server_key_file = directory / "apiserver.key"
        self.admin_token = admin_token
        self.token_authority = TokenAuthority(signing_key, ISSUER)
        self.authenticator = BearerAuthenticator(
            admin_token=admin_token, token_authority=self.token_authority
        )

    @classmethod
    def create(cls, state_dir: Path | None, hosts: list[str]) -> ClusterPKI:
        """Load the cluster's key material from ``state_dir``, creating what is missing.

        Args:
            state_dir: the localkube state directory (files go to ``state_dir/pki``), or
                None for a temporary directory removed when the object is collected.
            hosts: extra IP addresses and DNS names for the serving certificate (on top of
                :data:`DEFAULT_HOSTS`).

        Returns:
            The loaded or new PKI. Loading keeps the CA, signing key and admin token, so
            kubeconfigs and ServiceAccount tokens issued before a restart stay valid.

        Raises:
            ValueError: a host is not an IP address or DNS name (nothing is written).
            PKIError: ``ca.crt`` exists without ``ca.key``, or a file cannot be parsed.
        """
        wanted = list(
            dict.fromkeys(normalize_host(h, field=f"hosts[{i}]") for i, h in enumerate(hosts))
        )
        all_hosts = list(dict.fromkeys([*DEFAULT_HOSTS, *wanted]))
        if state_dir is None:
            directory = Path(tempfile.mkdtemp(prefix="localkube-pki-"))
            temporary = True
        else:
            directory = Path(state_dir) / "pki"
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = False
        ca = _load_or_create_ca(directory)
        _ensure_server_cert(directory, ca, all_hosts)
        signing_key = _load_or_create_signing_key(directory / "sa.key")
        admin_token = _load_or_create_admin_token(directory / "admin-token")
        pki = cls(
            directory=directory,
            ca=ca,
            hosts=all_hosts,
            admin_token=admin_token,
            signing_key=signing_key,
        )
        if temporary:
            weakref.finalize(pki, shutil.rmtree, directory, ignore_errors=True)
        return pki

    def ssl_context(
        self, *, client_auth: Literal["none", "optional", "required"] = "none"
    ) -> ssl.SSLContext:
        """Return a server-side TLS context with the serving certificate.

        TLS 1.2 or newer, ALPN ``http/1.1`` (the API server speaks HTTP/1.1 only).

        Args:
            client_auth: whether to ask for client certificates signed by the cluster CA
                (for peer mTLS later); the API server itself uses bearer tokens.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.server_cert_file, self.server_key_file)
        context.set_alpn_protocols(["http/1.1"])
        if client_auth != "none":
            context.load_verify_locations(cadata=self.ca_pem.decode("ascii"))
            context.verify_mode = (
                ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
            )
        return context

    def client_ssl_context(self) -> ssl.SSLContext:
        """Return a client-side TLS context that trusts only the cluster CA."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        return context

    def issue_serving_cert(self, hosts: list[str], *, out_dir: Path) -> tuple[Path, Path]:
        """Issue a leaf certificate for ``hosts`` signed by the cluster CA.

        The certificate is valid for both server and client authentication (gateway
        serving, peer mTLS).

        Args:
            hosts: at least one IP address or DNS name.
            out_dir: created if missing; receives ``tls.crt`` and ``tls.key`` (0600).

        Returns:
            ``(cert_file, key_file)``.

        Raises:
            ValueError: no hosts, or a host that is neither an IP address nor a DNS name
                (nothing is written).
        """
        if not hosts:
            raise ValueError("hosts: at least one IP address or DNS name is required")
        names = list(
            dict.fromkeys(normalize_host(h, field=f"hosts[{i}]") for i, h in enumerate(hosts))
        )
        leaf = self._ca.issue_cert(*names, organization_name="localkube")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = out_dir / "tls.crt", out_dir / "tls.key"
        _write_private(key_file, leaf.private_key_pem.bytes())
        _write_private(cert_file, b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        return cert_file, key_file


def _load_or_create_ca(directory: Path) -> trustme.CA:
    cert_file, key_file = directory / "ca.crt", directory / "ca.key"
    if cert_file.exists():
        if not key_file.exists():
            raise PKIError(
                f"{cert_file} exists but {key_file} is missing: restore the key or remove "
                "the whole pki directory (every kubeconfig and token will change)"
            )
        try:
            return trustme.CA.from_pem(cert_file.read_bytes(), key_file.read_bytes())
        except ValueError as exc:
            raise PKIError(f"cannot load the cluster CA from {directory}: {exc}") from exc
    # ca.key without ca.crt is a creation interrupted before anyone could trust it
    ca = trustme.CA(organization_name="localkube")
    _write_private(key_file, ca.private_key_pem.bytes())
    _write_private(cert_file, ca.cert_pem.bytes())
    return ca


def _ensure_server_cert(directory: Path, ca: trustme.CA, hosts: list[str]) -> None:
    cert_file, key_file = directory / "apiserver.crt", directory / "apiserver.key"
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    if cert_file.exists() and key_file.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
            if (
                _san_hosts(cert) == set(hosts)
                and _signed_by(cert, ca_cert)
                and _same_public_key(cert, key_file.read_bytes())
            ):
                return
        except ValueError:
            pass  # unreadable: issue a new one below
    leaf = ca.issue_cert(*hosts, common_name="kube-apiserver", organization_name="localkube")
    _write_private(key_file, leaf.private_key_pem.bytes())
    _write_private(cert_file, b"".join(blob.bytes() for blob in leaf.cert_chain_pems))


def _load_or_create_signing_key(path: Path) -> ec.EllipticCurvePrivateKey:
    if path.exists():
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except ValueError as exc:
            raise PKIError(f"cannot load the ServiceAccount signing key {path}: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            kind = "RSA" if isinstance(key, rsa.RSAPrivateKey) else type(key).__name__
            raise PKIError(f"{path}: expected an EC P-256 key, found {kind}")
        return key
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_private(path, pem)
    return key


def _load_or_create_admin_token(path: Path) -> str:
    if path.exists():
        token = path.read_text(encoding="ascii").strip()
        if len(token) < 16:
            raise PKIError(f"{path}: the admin token must be at least 16 characters")
        return token
    token = secrets.token_urlsafe(32)
    _write_private(path, token.encode("ascii") + b"\n")
    return token
