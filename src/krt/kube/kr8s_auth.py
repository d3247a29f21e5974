"""kr8s's ``KubeAuth``, minus the credential files it leaves in the temporary directory.

kr8s (0.20.15, the latest release; its main branch is unchanged) writes every inline
kubeconfig credential -- ``certificate-authority-data``, ``client-certificate-data``,
``client-key-data``, and the certificate/key an exec plugin returns -- to a
``tempfile.NamedTemporaryFile(delete=False)`` each time it loads the configuration (on
connect, and again on every ``reauthenticate()`` after a 401), only to read them back when
it builds an ``ssl.SSLContext``, and never deletes them. Every component start, every ``krt``
command and every test left a CA file in ``/tmp``, and a private key file where the
kubeconfig has ``client-key-data`` (kubectl writes nothing).

:class:`ScrubbingKubeAuth` lets kr8s load the configuration unchanged, then at once reads
each file kr8s wrote for an inline entry into memory and deletes it (synchronously, so no
cancellation can fall between reading and deleting; a few hundred bytes, at connect and
after a 401 only). TLS contexts -- for :mod:`krt.kube.http11`'s pool and for kr8s's own
httpx session alike, which kr8s rebuilds after ``aclose()`` or a re-authentication -- are
then built from memory (:func:`krt.kube.tls_material.build_ssl_context`). A file the
kubeconfig names by path (or the ServiceAccount's ``ca.crt``) is read in place and never
deleted.

Reliance on kr8s internals (pinned ``kr8s<0.21`` in pyproject.toml; tests in
``tests/kube/test_kube_credential_files.py`` fail if any of this changes):

* the public attributes ``client_key_file``, ``client_cert_file``, ``server_ca_file``;
* the loaded ``_user`` / ``_cluster`` kubeconfig sections (which ``*-data`` keys were given:
  exactly those entries make kr8s write a temporary file) and
  ``_insecure_skip_tls_verify``;
* the files living directly in ``tempfile.gettempdir()`` with the ``tmp`` name prefix.

A file that should be kr8s's but does not look like it raises
:class:`Kr8sInternalsChanged` instead of being deleted or silently kept.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from kr8s._auth import KubeAuth
from kr8s.asyncio import Api

from krt.kube.tls_material import Pem, TlsMaterial, build_ssl_context

__all__ = [
    "Kr8sInternalsChanged",
    "ScrubbingKubeAuth",
    "private_api",
    "scrubbing_auth_for",
    "uses_client_certificate",
]

log = logging.getLogger(__name__)


class Kr8sInternalsChanged(RuntimeError):
    """kr8s no longer stores its credential files the way :mod:`krt.kube.kr8s_auth` expects."""


@dataclass(frozen=True)
class _Slot:
    """One credential kr8s may write to a temporary file."""

    attribute: str  # KubeAuth attribute holding the file path
    section: str  # KubeAuth attribute holding the loaded kubeconfig section
    data_key: str  # inline entry: kr8s writes it to a temporary file
    path_key: str  # entry naming a file


_KEY = _Slot("client_key_file", "_user", "client-key-data", "client-key")
_CERT = _Slot("client_cert_file", "_user", "client-certificate-data", "client-certificate")
_CA = _Slot("server_ca_file", "_cluster", "certificate-authority-data", "certificate-authority")
_SLOTS = (_KEY, _CERT, _CA)

#: The ``kr8s.asyncio.Api`` keyword arguments kr8s passes on to its ``KubeAuth``.
AUTH_ARGUMENTS = ("url", "kubeconfig", "serviceaccount", "namespace", "context")


class ScrubbingKubeAuth(KubeAuth):
    """``kr8s._auth.KubeAuth`` keeping inline credentials in memory (module docstring).

    Constructed with ``KubeAuth``'s keyword arguments (``kubeconfig``, ``url``,
    ``serviceaccount``, ``namespace``, ``context``).

    Attributes:
        tls_material: what the last successful load configured (CA, client certificate
            and key as bytes or paths); empty before the first load.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tls_material = TlsMaterial()
        self._reload_lock = anyio.Lock()

    async def reauthenticate(self) -> None:
        """Load the configuration through kr8s, then take kr8s's credential files.

        Files kr8s wrote are deleted even when loading fails part-way (e.g. after an exec
        plugin answered, or on an unsupported ``username``); :attr:`tls_material` then keeps
        its previous value.

        Raises:
            Kr8sInternalsChanged: kr8s wrote an inline credential somewhere this module does
                not recognise (that file is left in place).
            Exception: whatever kr8s raises while loading (ValueError, KeyError,
                yaml.YAMLError, OSError, kr8s.ServerError).
        """
        async with self._reload_lock:
            before = {slot.attribute: getattr(self, slot.attribute) for slot in _SLOTS}
            try:
                await super().reauthenticate()
            except BaseException:
                try:
                    self._take_written_files(before, loaded=False)
                except (OSError, Kr8sInternalsChanged) as exc:  # kr8s's error comes first
                    log.warning("cannot remove kr8s's credential files: %s", exc)
                raise
            taken = self._take_written_files(before, loaded=True)
            self.tls_material = self._material(taken)

    async def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS context for the API server, built from :attr:`tls_material`.

        Same contract as kr8s's (its httpx session passes the answer as ``verify=``).

        Returns:
            A new ``ssl.SSLContext``, or True when nothing is configured (the default trust
            store).

        Raises:
            ssl.SSLError: unusable certificate or key. OSError: a named file is unreadable.
        """
        context = build_ssl_context(self.tls_material)
        return True if context is None else context

    def _take_written_files(self, before: Mapping[str, Any], *, loaded: bool) -> dict[str, bytes]:
        """Read and delete the files kr8s wrote in this load; forget their paths.

        Args:
            before: the slot attributes before the load.
            loaded: whether kr8s finished loading (every inline entry then has its file).

        Returns:
            ``{attribute: content}`` for every file taken.
        """
        taken: dict[str, bytes] = {}
        for slot in _SLOTS:
            path = self._written_file(slot, before[slot.attribute], loaded=loaded)
            if path is not None:
                taken[slot.attribute] = _read_and_delete(path)
                setattr(self, slot.attribute, None)  # the file is gone: nobody may open it
        return taken

    def _written_file(self, slot: _Slot, before: Any, *, loaded: bool) -> str | None:
        """The temporary file kr8s wrote for ``slot`` in this load, or None."""
        section = getattr(self, slot.section, None)
        if not isinstance(section, Mapping):
            raise Kr8sInternalsChanged(
                f"kr8s KubeAuth.{slot.section} is {type(section).__name__}, not a mapping"
            )
        value = getattr(self, slot.attribute)
        if slot.data_key not in section:
            return None
        written = value is not None and value != before
        if not loaded:
            # Loading stopped part-way: only a file kr8s certainly wrote is deleted, never
            # one that may be the file the kubeconfig names (nor is kr8s's error masked).
            if written and slot.path_key not in section and _is_temporary_file(str(value)):
                return str(value)
            return None
        if not written or not _is_temporary_file(str(value)):
            raise Kr8sInternalsChanged(
                f"kr8s stored {slot.data_key} as {value!r} (expected a new file directly in "
                f"{tempfile.gettempdir()!r} named {tempfile.gettempprefix()}*): "
                "krt.kube.kr8s_auth needs an update for this kr8s version"
            )
        return str(value)

    def _material(self, taken: Mapping[str, bytes]) -> TlsMaterial:
        """The TLS material of a finished load: taken file contents, else named paths."""

        def pem(slot: _Slot) -> Pem | None:
            if slot.attribute in taken:
                return Pem(data=taken[slot.attribute])
            path = getattr(self, slot.attribute)
            return None if path is None else Pem(path=str(path))

        insecure = getattr(self, "_insecure_skip_tls_verify", None)
        if not isinstance(insecure, bool):
            raise Kr8sInternalsChanged("kr8s KubeAuth._insecure_skip_tls_verify is not a bool")
        return TlsMaterial(
            ca=pem(_CA),
            client_cert=pem(_CERT),
            client_key=pem(_KEY),
            insecure_skip_tls_verify=insecure,
        )


def _is_temporary_file(path: str) -> bool:
    """Whether ``path`` is where ``tempfile.NamedTemporaryFile()`` puts a file."""
    where = Path(path)
    return where.parent == Path(tempfile.gettempdir()) and where.name.startswith(
        tempfile.gettempprefix()
    )


def _read_and_delete(path: str) -> bytes:
    """The content of kr8s's file ``path``, which is deleted even if reading fails."""
    try:
        return Path(path).read_bytes()
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            log.warning("kr8s credential file %s was already gone", path)


def uses_client_certificate(auth: Any) -> bool:
    """Whether kr8s authentication ``auth`` presents a TLS client certificate.

    Args:
        auth: a loaded :class:`ScrubbingKubeAuth` (or kr8s ``KubeAuth``).
    """
    if isinstance(auth, ScrubbingKubeAuth):
        return auth.tls_material.has_client_certificate
    return bool(getattr(auth, "client_cert_file", None) and getattr(auth, "client_key_file", None))


def scrubbing_auth_for(api_kwargs: Mapping[str, Any]) -> ScrubbingKubeAuth:
    """The :class:`ScrubbingKubeAuth` for ``kr8s.asyncio.Api(**api_kwargs)``.

    Built from the same arguments kr8s's ``Api.__init__`` gives its own ``KubeAuth``; assign
    it to ``api.auth`` before the Api is awaited.

    Args:
        api_kwargs: the Api's keyword arguments (others than :data:`AUTH_ARGUMENTS` are
            ignored).
    """
    return ScrubbingKubeAuth(**{name: api_kwargs.get(name) for name in AUTH_ARGUMENTS})


def private_api(**kwargs: Any) -> Api:
    """A private ``kr8s.asyncio.Api`` (outside kr8s's per-loop cache) with scrubbing auth.

    For code that uses kr8s directly instead of :func:`krt.kube.client.connect` (which does
    this itself): ``await private_api(kubeconfig=path)`` loads the configuration and checks
    the server version, as ``await kr8s.asyncio.Api(...)`` does, without leaving kr8s's
    credential files behind.

    Args:
        kwargs: ``kr8s.asyncio.Api``'s keyword arguments (``kubeconfig``, ``url``,
            ``serviceaccount``, ``namespace``, ``context``), without ``bypass_factory``.

    Returns:
        The Api, not yet awaited.
    """
    api = Api(bypass_factory=True, **kwargs)
    api.auth = scrubbing_auth_for(kwargs)
    return api
