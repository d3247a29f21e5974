"""The API client's TLS context, built from kubeconfig material held in memory.

A kubeconfig carries its CA certificate and client certificate/key either inline
(``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``) or as
paths (``certificate-authority``, ``client-certificate``, ``client-key``; the in-cluster
ServiceAccount's ``ca.crt``). :class:`TlsMaterial` holds the inline ones as bytes and the
paths as paths; :func:`build_ssl_context` turns it into an ``ssl.SSLContext`` without
leaving a file behind:

* the CA goes in through ``load_verify_locations(cadata=...)``, entirely in memory;
* ``ssl.SSLContext.load_cert_chain`` only reads files, so an inline client certificate or
  key is handed to it as an anonymous in-memory file (:func:`krt.pem_files.pem_file`).
  Files the kubeconfig names by path are read in place and never touched.

Pure of kr8s: :mod:`krt.kube.kr8s_auth` fills a :class:`TlsMaterial` from kr8s's loaded
configuration.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from krt.pem_files import pem_file

__all__ = ["Pem", "TlsMaterial", "TlsMaterialError", "build_ssl_context"]


@dataclass(frozen=True)
class Pem:
    """One piece of TLS material: inline bytes or a file path (exactly one is set).

    Attributes:
        data: the decoded kubeconfig ``*-data`` value (PEM text as bytes; DER for a CA is
            accepted too), or None.
        path: a file the kubeconfig (or the ServiceAccount mount) names, or None.
    """

    data: bytes | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError("Pem: exactly one of data and path must be given")


@dataclass(frozen=True)
class TlsMaterial:
    """What the API client's TLS context is made of (kubeconfig ``clusters[]``/``users[]``).

    Attributes:
        ca: the cluster CA (``certificate-authority[-data]``), or None for the default trust
            store.
        client_cert: ``client-certificate[-data]``, or None.
        client_key: ``client-key[-data]``, or None.
        insecure_skip_tls_verify: ``insecure-skip-tls-verify: true`` (no server check).
    """

    ca: Pem | None = None
    client_cert: Pem | None = None
    client_key: Pem | None = None
    insecure_skip_tls_verify: bool = False

    @property
    def has_client_certificate(self) -> bool:
        """Whether a client certificate and key are configured (mutual TLS)."""
        return self.client_cert is not None and self.client_key is not None

    @property
    def is_empty(self) -> bool:
        """Whether nothing TLS-related is configured (the default context applies)."""
        return (
            self.ca is None
            and self.client_cert is None
            and self.client_key is None
            and not self.insecure_skip_tls_verify
        )


def build_ssl_context(material: TlsMaterial) -> ssl.SSLContext | None:
    """Build the client ``ssl.SSLContext`` for ``material``; no file outlives the call.

    The rules are kr8s's (``KubeAuth.ssl_context``), which match client-go's: a client
    certificate is used only when both certificate and key are given, the CA replaces the
    default trust store, and ``insecure-skip-tls-verify`` turns off both the chain and the
    host-name check.

    Args:
        material: see :class:`TlsMaterial`.

    Returns:
        A new context, or None when ``material`` configures nothing (the caller then uses
        its default context: the system / certifi trust store).

    Raises:
        TlsMaterialError: a certificate or key that does not parse, a key that does not match
            the certificate, or a file named by path that cannot be read (the message names
            the kubeconfig entries).
    """
    if material.is_empty:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if material.insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if material.client_cert is not None and material.client_key is not None:
        try:
            with ExitStack() as stack:
                certfile = stack.enter_context(_readable_file(material.client_cert, "client.crt"))
                keyfile = stack.enter_context(_readable_file(material.client_key, "client.key"))
                context.load_cert_chain(certfile=certfile, keyfile=keyfile, password=None)
        except (ssl.SSLError, OSError) as exc:
            entries = (
                f"{_entry(material.client_cert, 'client-certificate')} and "
                f"{_entry(material.client_key, 'client-key')}"
            )
            raise TlsMaterialError(
                f"the client certificate and key ({entries}) do not load: {_reason(exc)}"
            ) from exc
    if material.ca is not None:
        try:
            if material.ca.path is not None:
                context.load_verify_locations(cafile=material.ca.path)
            else:
                context.load_verify_locations(cadata=_cadata(material.ca.data or b""))
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsMaterialError(
                f"the CA ({_entry(material.ca, 'certificate-authority')}) does not load: "
                f"{_reason(exc)}"
            ) from exc
    return context


class TlsMaterialError(ValueError):
    """The kubeconfig's TLS material does not load (the message names the entries)."""


def _entry(pem: Pem, key: str) -> str:
    """How the kubeconfig gives ``pem``: ``client-key-data``, or ``client-key /path``."""
    return f"{key}-data" if pem.path is None else f"{key} {pem.path}"


def _reason(exc: BaseException) -> str:
    """OpenSSL's reason (``KEY_VALUES_MISMATCH`` -> ``key values mismatch``) or the error."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return reason.lower().replace("_", " ")
    strerror = getattr(exc, "strerror", None)
    return str(strerror or exc)


def _cadata(data: bytes) -> str | bytes:
    """``cadata`` for ``load_verify_locations``: PEM as text, anything else as DER bytes."""
    if b"-----BEGIN" in data:
        return data.decode("ascii", "replace")
    return data


@contextmanager
def _readable_file(pem: Pem, name: str) -> Iterator[str]:
    """A path OpenSSL can open for ``pem``, valid inside the ``with`` block only."""
    if pem.path is not None:
        yield pem.path
        return
    with pem_file(pem.data or b"", name) as path:
        yield path
