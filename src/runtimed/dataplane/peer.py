"""Mutual TLS between runtimed instances: the peer hop transport (seed 000, Runtime Gateway).

Seed 000: "Peer connections use mTLS with workload identities; a hop marker prevents proxy
loops." The installation provides the material as a Secret mounted in every Runtime Pod;
``--peer-tls-dir`` (``RUNTIMED_PEER_TLS_DIR``) names its directory with the usual
``kubernetes.io/tls`` keys plus the CA: ``tls.crt`` (chain), ``tls.key``, ``ca.crt``.

One port serves both the gateway and peers, so the server *requests* a client certificate
(``CERT_OPTIONAL``): a certificate that is presented must chain to the installation CA or
the handshake fails, and a connection without one (the gateway) is still served. A hop
marker is honoured only on a connection whose client certificate was verified
(:func:`peer_verified`); anything else that claims to be a hop is refused. The client side
presents the same certificate and trusts only ``ca.crt``. Host names are not checked on the
peer hop: every runtimed shares the Secret's certificate and is dialled by Pod IP, so the
dedicated installation CA is the identity, and the owner further fences the hop on its own
Pod UID, Run UID and attempt.

The gateway, by contrast, dials the Runtime's Service name (``runtime-<rt>.<ns>.svc``) and
checks it against the certificate, so the shared certificate must name it (for example a
``*.<ns>.svc`` DNS name per Runtime namespace; ``krt dev up`` issues that).

Certificates rotate (cert-manager renews them before they expire; the kubelet swaps the
mounted Secret's files in place): :func:`watch_peer_tls` looks at the three files every
:data:`RELOAD_PERIOD_SECONDS` and loads a changed set into the contexts already in use, so
new connections (both ways) present the new certificate and trust the new CA, with no
restart. Connections already open keep the material they started with. A new ``ca.crt`` is
added to the trusted set (both CAs are trusted while certificates of either are in use
during a CA rotation). Unusable material (a half-written update, a key that does not match)
is logged and the contexts keep serving the last good set; the next look tries again.

The Secret is mounted ``optional: true`` by the control plane, so at start the directory
may exist empty (the Secret is not created yet) or be absent: :func:`peer_tls_present`
tells that case (runtimed then warns and serves plaintext without hops) from a Secret that
lacks some of the files (an error).
"""

from __future__ import annotations

import contextvars
import logging
import ssl
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio.abc
import trio
from anyio.streams.tls import TLSAttribute

from krt.file_watch import watch_files
from krt.pem_files import ca_pem_text, load_cert_chain_bytes

__all__ = [
    "PeerTLSAppeared",
    "await_peer_tls",
    "PEER_TLS_FILES",
    "PeerTLS",
    "PeerTLSError",
    "connection_has_verified_peer",
    "load_peer_tls",
    "peer_tls_present",
    "peer_verified",
    "reload_peer_tls",
    "reset_peer_verified",
    "set_peer_verified",
    "watch_peer_tls",
]

log = logging.getLogger(__name__)

#: The files expected in ``--peer-tls-dir``.
PEER_TLS_FILES: Final = ("tls.crt", "tls.key", "ca.crt")
#: Seconds between looks at the peer TLS files for a rotated certificate.
RELOAD_PERIOD_SECONDS: Final = 30.0

_VERIFIED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runtimed_peer_verified", default=False
)


class PeerTLSError(ValueError):
    """The peer TLS directory is incomplete or its files are unusable (names the file)."""


@dataclass(frozen=True, slots=True)
class PeerTLS:
    """TLS contexts of the Service port and of outgoing peer hops.

    Attributes:
        server: the listening side: serves ``tls.crt``, requests a client certificate
            chaining to ``ca.crt`` (optional, see the module docstring), ALPN ``h2``.
        client: the hop side: presents ``tls.crt``, trusts only ``ca.crt``, ALPN ``h2``.
    """

    server: ssl.SSLContext
    client: ssl.SSLContext


def peer_tls_present(directory: Path) -> bool:
    """Whether ``directory`` holds the peer TLS material: all three files, or none of them.

    Args:
        directory: the mounted Secret's directory (``--peer-tls-dir``).

    Returns:
        True when ``tls.crt``, ``tls.key`` and ``ca.crt`` are all there; False when the
        directory is missing or has none of them (the optional Secret does not exist yet).

    Raises:
        PeerTLSError: some of the files are there but not all (the message names the
            missing ones): the Secret exists with the wrong keys.
    """
    present = [name for name in PEER_TLS_FILES if (Path(directory) / name).is_file()]
    if not present:
        return False
    missing = [name for name in PEER_TLS_FILES if name not in present]
    if missing:
        raise PeerTLSError(
            f"--peer-tls-dir {str(directory)!r}: {', '.join(missing)} missing "
            f"(the Secret must hold {', '.join(PEER_TLS_FILES)})"
        )
    return True


@dataclass(frozen=True, slots=True)
class _PeerFiles:
    """The contents of ``tls.crt``, ``tls.key`` and ``ca.crt``, each read once."""

    cert: bytes
    key: bytes
    ca: str


def _read_peer_files(directory: Path) -> _PeerFiles:
    """Read the three files of ``directory``.

    Raises:
        PeerTLSError: a file is missing or unreadable, or ``ca.crt`` is not PEM.
    """
    contents: dict[str, bytes] = {}
    for name in PEER_TLS_FILES:
        path = Path(directory) / name
        try:
            contents[name] = path.read_bytes()
        except FileNotFoundError:
            raise PeerTLSError(f"--peer-tls-dir {str(directory)!r}: {name} is missing") from None
        except OSError as exc:
            raise PeerTLSError(f"--peer-tls-dir: {name} cannot be read: {exc}") from exc
    try:
        ca = ca_pem_text(contents["ca.crt"])
    except ValueError as exc:
        raise PeerTLSError(f"--peer-tls-dir: ca.crt cannot be loaded: {exc}") from exc
    return _PeerFiles(contents["tls.crt"], contents["tls.key"], ca)


def load_peer_tls(directory: Path) -> PeerTLS:
    """Build the contexts from ``tls.crt``, ``tls.key`` and ``ca.crt`` in ``directory``.

    Args:
        directory: the mounted Secret's directory.

    Returns:
        The contexts (TLS 1.2 minimum).

    Raises:
        PeerTLSError: a file is missing or cannot be loaded (the message names it).
    """
    return _peer_contexts(_read_peer_files(directory))


def _peer_contexts(files: _PeerFiles) -> PeerTLS:
    contexts: list[ssl.SSLContext] = []
    for purpose in (ssl.Purpose.CLIENT_AUTH, ssl.Purpose.SERVER_AUTH):
        try:
            context = ssl.create_default_context(purpose, cadata=files.ca)
        except ssl.SSLError as exc:
            raise PeerTLSError(f"--peer-tls-dir: ca.crt cannot be loaded: {exc}") from exc
        _load_pair(context, files)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        contexts.append(context)
    server, client = contexts
    server.verify_mode = ssl.CERT_OPTIONAL
    client.check_hostname = False
    client.verify_mode = ssl.CERT_REQUIRED
    _check_issued_by_ca(server, files.ca)
    return PeerTLS(server=server, client=client)


def _load_pair(context: ssl.SSLContext, files: _PeerFiles) -> None:
    try:
        load_cert_chain_bytes(context, files.cert, files.key)
    except ssl.SSLError as exc:
        raise PeerTLSError(
            f"--peer-tls-dir: tls.crt/tls.key cannot be loaded as a pair: {exc}"
        ) from exc


def _check_issued_by_ca(server: ssl.SSLContext, ca: str) -> None:
    """Refuse a ``tls.crt`` that a peer trusting only ``ca.crt`` would refuse.

    Every runtimed presents the same certificate and trusts only ``ca.crt``: a leaf from
    another CA would load fine and then fail every hop and the gateway's handshakes. A TLS
    handshake in memory against a client that trusts just ``ca.crt`` tells (host names are
    not checked on the peer hop).

    Raises:
        PeerTLSError: the handshake fails (the message says why).
    """
    verifier = ssl.create_default_context(cadata=ca)
    verifier.check_hostname = False
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client_end = verifier.wrap_bio(client_in, client_out)
    server_end = server.wrap_bio(server_in, server_out, server_side=True)
    ends = [client_end, server_end]
    try:
        for _ in range(8):
            for end in list(ends):
                try:
                    end.do_handshake()
                    ends.remove(end)
                except ssl.SSLWantReadError:
                    pass
            server_in.write(client_out.read())
            client_in.write(server_out.read())
            if not ends:
                return
    except ssl.SSLError as exc:
        raise PeerTLSError(
            f"--peer-tls-dir: tls.crt is not accepted by a peer trusting ca.crt: {exc}"
        ) from exc
    raise PeerTLSError("--peer-tls-dir: tls.crt could not be checked against ca.crt")


def reload_peer_tls(tls: PeerTLS, directory: Path) -> None:
    """Load the files of ``directory`` into ``tls``'s contexts, for connections made from now.

    Each file is read once; the contents are checked by building fresh contexts from them
    and the same bytes are then loaded into ``tls``, so unusable material (or files that
    change meanwhile) leaves ``tls`` exactly as it was.

    Args:
        tls: the contexts in use (the listener's and the peer channels').
        directory: the mounted Secret's directory.

    Raises:
        PeerTLSError: a file is missing or cannot be loaded (the message names it).
    """
    files = _read_peer_files(directory)
    _peer_contexts(files)
    for context in (tls.server, tls.client):
        _load_pair(context, files)
        context.load_verify_locations(cadata=files.ca)


class PeerTLSAppeared(Exception):  # noqa: N818 - an event, not an error
    """The peer TLS material a plaintext runtimed was started without is there now.

    runtimed cannot switch its Service port from plaintext to TLS in place; it stops, so
    that its container restarts and serves TLS (:func:`await_peer_tls`).

    Attributes:
        directory: the ``--peer-tls-dir`` that now holds usable material.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__(f"peer TLS material appeared in {str(directory)!r}")
        self.directory = directory


async def await_peer_tls(directory: Path, *, period: float = RELOAD_PERIOD_SECONDS) -> None:
    """Raise :class:`PeerTLSAppeared` once ``directory`` holds usable peer TLS material.

    For a runtimed started while the optional peer TLS Secret did not exist: it serves
    plaintext, which a gateway that requires mTLS cannot reach, so its functions would stay
    Ready yet uninvocable until someone restarts the Pod. Looks every ``period`` seconds;
    material that is incomplete or does not load is waited out (the next look tries again).

    Args:
        directory: the mounted Secret's directory (``--peer-tls-dir``).
        period: seconds between looks.

    Raises:
        PeerTLSAppeared: the three files are there and load.
    """
    while True:
        await trio.sleep(period)
        try:
            if peer_tls_present(directory):
                load_peer_tls(directory)
                raise PeerTLSAppeared(directory)
        except PeerTLSError:
            continue


async def watch_peer_tls(
    tls: PeerTLS, directory: Path, *, period: float = RELOAD_PERIOD_SECONDS
) -> None:
    """Reload ``tls`` from ``directory`` whenever its files change; never returns.

    Loads the files once at start (what the caller loaded may have changed since), then
    looks every ``period`` seconds (:func:`krt.file_watch.watch_files`). A change whose
    material cannot be loaded (or files that are gone) is logged once and retried at the
    next look; the contexts keep the last good material meanwhile (see the module
    docstring).

    Args:
        tls: the contexts in use.
        directory: the mounted Secret's directory (``--peer-tls-dir``).
        period: seconds between looks.
    """
    await watch_files(
        [Path(directory) / name for name in PEER_TLS_FILES],
        partial(reload_peer_tls, tls, directory),
        period=period,
        errors=(PeerTLSError,),
        what=f"peer TLS material (--peer-tls-dir {str(directory)!r})",
        logger=log,
    )


def connection_has_verified_peer(stream: anyio.abc.ByteStream) -> bool:
    """Whether ``stream`` is TLS with a client certificate the server context verified."""
    cert: Any = stream.extra(TLSAttribute.peer_certificate, None)
    return bool(cert)


def set_peer_verified(verified: bool) -> contextvars.Token[bool]:
    """Record, for the calls of the current connection's task tree, whether the peer is verified."""
    return _VERIFIED.set(verified)


def reset_peer_verified(token: contextvars.Token[bool]) -> None:
    """Undo :func:`set_peer_verified`."""
    _VERIFIED.reset(token)


def peer_verified() -> bool:
    """Whether the call being served arrived on a connection with a verified peer certificate."""
    return _VERIFIED.get()
