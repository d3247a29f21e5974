"""The gateway's TLS material, reloaded when its files change (no restart on rotation).

Two sets of files: the HTTPS listener's certificate and key (``--tls-cert-file``,
``--tls-key-file``), and, with peer mTLS, the client material for runtimed
(``--upstream-ca-file``, ``--upstream-cert-file``, ``--upstream-key-file``).

The listener.

hypercorn builds its server TLS context once, when it starts listening
(``Config.create_ssl_context``). cert-manager renews the gateway's certificate before it
expires and the kubelet swaps the mounted Secret's files in place, so a gateway that read
them only at start would serve the old certificate until it expired. :class:`ListenerTLSConfig`
keeps the context hypercorn uses; :func:`watch_listener_tls` loads a changed certificate and
key into that same context (``SSLContext.load_cert_chain`` replaces the pair for handshakes
from then on), so new connections get the new certificate and open ones keep theirs.

A changed pair is checked on a fresh context first: a half-written update or a key that does
not match its certificate is logged and the listener keeps serving the last good pair until
the files change again.

The upstream. :class:`UpstreamTLS` is the client context the connection pool dials runtimed
with, and the files it came from; :func:`watch_upstream_tls` loads changed files into that
context the same way, so new connections present the new client certificate and trust the
new CA (added to the trusted set: both CAs are trusted during a CA rotation, as runtimed's
peer contexts do). Connections already open keep what they started with.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, NoReturn

from hypercorn.config import Config as HypercornConfig

from krt.file_watch import watch_files
from krt.pem_files import ca_pem_text, load_cert_chain_bytes

__all__ = [
    "RELOAD_PERIOD_SECONDS",
    "ListenerTLSConfig",
    "TLSFilesError",
    "UpstreamTLS",
    "reload_listener_tls",
    "reload_upstream_tls",
    "upstream_tls",
    "watch_listener_tls",
    "watch_upstream_tls",
]

log = logging.getLogger("gateway.tls_reload")

#: How often the certificate and key files are compared with what is loaded (seconds).
RELOAD_PERIOD_SECONDS: Final = 30.0


class TLSFilesError(ValueError):
    """TLS files cannot be read or do not load (the message names the option and why)."""


class ListenerTLSConfig(HypercornConfig):
    """hypercorn's configuration whose server TLS context stays reachable for reloads.

    ``create_ssl_context`` builds the context on its first call and returns the same object
    afterwards; :attr:`ssl_context` is that object (``None`` until hypercorn asked for it,
    or when TLS is off).
    """

    ssl_context: ssl.SSLContext | None = None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        """hypercorn's context, built once (see the class docstring)."""
        if self.ssl_context is None:
            self.ssl_context = super().create_ssl_context()
        return self.ssl_context


def _read(option: str, path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise TLSFilesError(f"{option} {path!r}: {exc}") from exc


def reload_listener_tls(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """Load ``cert_file``/``key_file`` into ``context`` for handshakes from now on.

    Each file is read once; the pair is checked on a fresh context and the same bytes are
    then loaded into ``context``, so an unusable pair (or files that change meanwhile)
    leaves ``context`` exactly as it was.

    Raises:
        TLSFilesError: a file cannot be read, or the pair cannot be loaded.
    """
    cert, key = _read("--tls-cert-file", cert_file), _read("--tls-key-file", key_file)
    for target in (ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), context):
        try:
            load_cert_chain_bytes(target, cert, key)
        except ssl.SSLError as exc:
            raise TLSFilesError(
                f"--tls-cert-file {cert_file!r} / --tls-key-file {key_file!r}: {exc}"
            ) from exc


async def watch_listener_tls(
    config: ListenerTLSConfig,
    cert_file: str,
    key_file: str,
    *,
    period: float = RELOAD_PERIOD_SECONDS,
) -> NoReturn:
    """Reload the listener's certificate whenever its files change; never returns.

    Call it once hypercorn listens (``config.ssl_context`` is set then).

    Args:
        config: the HTTPS listener's configuration.
        cert_file: PEM certificate chain (``--tls-cert-file``).
        key_file: PEM private key (``--tls-key-file``).
        period: seconds between looks at the files.

    Raises:
        RuntimeError: hypercorn has not built the TLS context (TLS off, or not listening yet).
    """
    context = config.ssl_context
    if context is None:
        raise RuntimeError("the HTTPS listener has no TLS context to reload")
    await watch_files(
        [Path(cert_file), Path(key_file)],
        partial(reload_listener_tls, context, cert_file, key_file),
        period=period,
        errors=(TLSFilesError,),
        what="gateway TLS certificate",
        logger=log,
    )


@dataclass(frozen=True)
class UpstreamTLS:
    """The client TLS context for runtimed and the files it is loaded from.

    Attributes:
        context: the context the connection pool uses for new connections.
        ca_file: PEM CA bundle to trust (``--upstream-ca-file``), or ``None``: system roots.
        cert_file: PEM client certificate chain (``--upstream-cert-file``), or ``None``.
        key_file: PEM client key (``--upstream-key-file``), or ``None``.
    """

    context: ssl.SSLContext
    ca_file: str | None
    cert_file: str | None
    key_file: str | None

    @property
    def files(self) -> list[Path]:
        """The files to watch."""
        return [Path(f) for f in (self.ca_file, self.cert_file, self.key_file) if f is not None]


@dataclass(frozen=True)
class _UpstreamBytes:
    """The upstream files' names and contents, each file read once."""

    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    ca: str | None
    cert: bytes | None
    key: bytes | None

    @classmethod
    def read(
        cls, ca_file: str | None, cert_file: str | None, key_file: str | None
    ) -> _UpstreamBytes:
        """Read the files given.

        Raises:
            TLSFilesError: a file cannot be read, or the CA file holds no PEM certificate.
        """
        ca: str | None = None
        if ca_file is not None:
            try:
                ca = ca_pem_text(_read("--upstream-ca-file", ca_file))
            except ValueError as exc:
                raise TLSFilesError(f"--upstream-ca-file {ca_file!r}: {exc}") from exc
        return cls(
            ca_file,
            cert_file,
            key_file,
            ca=ca,
            cert=_read("--upstream-cert-file", cert_file) if cert_file is not None else None,
            key=_read("--upstream-key-file", key_file) if key_file is not None else None,
        )

    def load_into(self, context: ssl.SSLContext, *, with_ca: bool = True) -> None:
        """Add the CA (``with_ca``) to what ``context`` trusts and load the client pair.

        Raises:
            TLSFilesError: naming the option(s) whose content did not load.
        """
        if with_ca and self.ca is not None:
            try:
                context.load_verify_locations(cadata=self.ca)
            except ssl.SSLError as exc:
                raise TLSFilesError(f"--upstream-ca-file {self.ca_file!r}: {exc}") from exc
        if self.cert is not None and self.key is not None:
            try:
                load_cert_chain_bytes(context, self.cert, self.key)
            except ssl.SSLError as exc:
                raise TLSFilesError(
                    f"--upstream-cert-file {self.cert_file!r} / "
                    f"--upstream-key-file {self.key_file!r}: {exc}"
                ) from exc

    def fresh_context(self) -> ssl.SSLContext:
        """A new client context: only the CA file when given (else the system roots).

        Raises:
            TLSFilesError: the CA or the client pair does not load.
        """
        try:
            context = ssl.create_default_context(cadata=self.ca)
        except ssl.SSLError as exc:
            raise TLSFilesError(f"--upstream-ca-file {self.ca_file!r}: {exc}") from exc
        self.load_into(context, with_ca=False)
        return context


def upstream_tls(
    ca_file: str | None, cert_file: str | None, key_file: str | None
) -> UpstreamTLS | None:
    """The client context for runtimed (``None``: plaintext gRPC, no file given).

    Raises:
        TLSFilesError: only one of ``cert_file``/``key_file`` is given, or a file cannot be
            read or does not load (the message names the option).
    """
    if ca_file is None and cert_file is None and key_file is None:
        return None
    if (cert_file is None) != (key_file is None):
        raise TLSFilesError("--upstream-cert-file and --upstream-key-file go together")
    context = _UpstreamBytes.read(ca_file, cert_file, key_file).fresh_context()
    return UpstreamTLS(context, ca_file, cert_file, key_file)


def reload_upstream_tls(upstream: UpstreamTLS) -> None:
    """Load ``upstream``'s files into its context, for connections made from now on.

    Each file is read once; the contents are checked on a fresh context and the same bytes
    are then loaded into the context in use, so unusable files (or files that change
    meanwhile) leave it exactly as it was.

    Raises:
        TLSFilesError: a file cannot be read or does not load.
    """
    material = _UpstreamBytes.read(upstream.ca_file, upstream.cert_file, upstream.key_file)
    material.fresh_context()
    material.load_into(upstream.context)


async def watch_upstream_tls(
    upstream: UpstreamTLS, *, period: float = RELOAD_PERIOD_SECONDS
) -> NoReturn:
    """Reload ``upstream`` whenever one of its files changes; never returns.

    Args:
        upstream: the pool's client context and its files.
        period: seconds between looks at the files.
    """
    await watch_files(
        upstream.files,
        partial(reload_upstream_tls, upstream),
        period=period,
        errors=(TLSFilesError,),
        what="gateway upstream TLS material",
        logger=log,
    )
