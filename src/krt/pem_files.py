"""TLS material held in memory, handed to OpenSSL as a file name for the moment it reads it.

``ssl.SSLContext.load_cert_chain`` only reads files. Two callers need it for bytes:

* the Kubernetes client (:mod:`krt.kube.tls_material`): inline kubeconfig credentials must
  not be left on disk;
* certificate reloads (:mod:`runtimed.dataplane.peer`, :mod:`gateway.tls_reload`): the
  files are read *once* and the same bytes are first checked on a fresh context and then
  loaded into the context in use, so files that change in between can never leave the
  context in use with a certificate and a key that do not match.

:func:`pem_file` writes the bytes to an anonymous in-memory file (Linux ``memfd_create``,
opened through ``/proc/self/fd``; it has no name on any file system and vanishes when
closed) or, where that is unavailable, to a private temporary directory (mode 0700, file
0600) removed on exit.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ca_pem_text", "load_cert_chain_bytes", "pem_file"]

#: Where a memfd's content can be opened by name (Linux).
_PROC_FD = Path("/proc/self/fd")


def memfd_usable() -> bool:
    """Whether anonymous memory files can be opened by name here (Linux with /proc)."""
    return hasattr(os, "memfd_create") and _PROC_FD.is_dir()


@contextmanager
def pem_file(data: bytes, name: str) -> Iterator[str]:
    """A path OpenSSL can open holding ``data``, valid inside the ``with`` block only.

    Args:
        data: the file's content (PEM, or DER for a CA).
        name: a label for the memory file or the temporary file's name (``client.key``).
    """
    if memfd_usable():
        fd = os.memfd_create(f"krt-{name}", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            yield str(_PROC_FD / str(fd))
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="krt-tls-") as directory:
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        yield path


def ca_pem_text(data: bytes) -> str:
    """A CA bundle's bytes as the text ``load_verify_locations(cadata=...)`` takes.

    Raises:
        ValueError: no PEM certificate in it (``cadata`` as text must be PEM).
    """
    text = data.decode("ascii", "replace")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("no PEM certificate in it")
    return text


def load_cert_chain_bytes(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``context.load_cert_chain`` for a PEM certificate chain and key held in memory.

    Raises:
        ssl.SSLError: the certificate or key does not parse, or they do not match.
    """
    with pem_file(cert, "tls.crt") as certfile, pem_file(key, "tls.key") as keyfile:
        context.load_cert_chain(certfile=certfile, keyfile=keyfile, password=None)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
