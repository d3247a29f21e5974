"""Validation of request fields shared by Execute and RegisterFunction.

Every function here either returns a normalised value or raises
:class:`~servers.common.errors.ContractError` (INVALID_ARGUMENT) naming the field and the
limit that was broken; none has side effects, so a rejected request leaves no partial state.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from servers.common import limits
from servers.common.errors import invalid_argument

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGEST_RE = re.compile(r"(sha256:)?[0-9a-f]{64}")


def validate_id(field: str, value: str) -> str:
    """Check an execution ID or Run UID, which is also used as a directory name.

    Args:
        field: the request field name, for the error message.
        value: non-empty, at most 128 bytes, ``[A-Za-z0-9][A-Za-z0-9._-]*``.

    Returns:
        ``value`` unchanged.

    Raises:
        ContractError: INVALID_ARGUMENT naming ``field`` and the broken rule.
    """
    if not value:
        raise invalid_argument(f"{field} is required")
    if len(value.encode()) > limits.MAX_ID_BYTES:
        raise invalid_argument(f"{field} is longer than {limits.MAX_ID_BYTES} bytes")
    if not _ID_RE.fullmatch(value):
        raise invalid_argument(
            f"{field} {value!r} must start with a letter or digit and contain only"
            " letters, digits, '.', '_' and '-'"
        )
    return value


def validate_env(env: Mapping[str, str]) -> dict[str, str]:
    """Check an environment map (variable names, NUL bytes, size).

    Args:
        env: names ``[A-Za-z_][A-Za-z0-9_]*``; values without NUL; at most 512 entries and
            256 KiB in total.

    Returns:
        A plain dict copy.

    Raises:
        ContractError: INVALID_ARGUMENT naming the offending variable or limit.
    """
    if len(env) > limits.MAX_ENV_ENTRIES:
        raise invalid_argument(f"env has {len(env)} entries; the limit is {limits.MAX_ENV_ENTRIES}")
    total = 0
    for name, value in env.items():
        if not _ENV_NAME_RE.fullmatch(name):
            raise invalid_argument(f"env name {name!r} is not a valid variable name")
        if "\0" in value:
            raise invalid_argument(f"env {name} contains a NUL byte")
        total += len(name.encode()) + len(value.encode()) + 2
    if total > limits.MAX_ENV_BYTES:
        raise invalid_argument(f"env is {total} bytes; the limit is {limits.MAX_ENV_BYTES}")
    return dict(env)


def validate_digest(value: str) -> str:
    """Check a registration digest: lowercase SHA-256 hex, optionally prefixed ``sha256:``.

    Raises:
        ContractError: INVALID_ARGUMENT when empty or malformed (seed 002, "Registration
            Identity").
    """
    if not value:
        raise invalid_argument("registration_digest is required")
    if not _DIGEST_RE.fullmatch(value):
        raise invalid_argument(
            "registration_digest must be a lowercase SHA-256 hex digest (64 characters,"
            " optionally prefixed 'sha256:')"
        )
    return value


def resolve_working_dir(work_dir: Path, value: str, *, default: Path, field: str) -> Path:
    """Resolve a requested working directory and check it lies under the server's work dir.

    Args:
        work_dir: the server's ``--work-dir`` (resolved).
        value: the requested path; absolute, or relative to ``work_dir``; empty means
            ``default``.
        default: used when ``value`` is empty (e.g. ``<work-dir>/<id>``).
        field: request field name for errors.

    Returns:
        The resolved path (symlinks followed). It is not required to exist here.

    Raises:
        ContractError: INVALID_ARGUMENT when the path escapes ``work_dir`` or has NUL bytes.
    """
    if "\0" in value:
        raise invalid_argument(f"{field} contains a NUL byte")
    # strings, not pathlib, on this per-request path (issue 6: a third of its cost)
    candidate = os.path.join(str(work_dir), value) if value else str(default)
    resolved = real_path(candidate)
    root = _real_root(str(work_dir))
    if resolved != root and not is_below_text(resolved, root):
        raise invalid_argument(f"{field} {value!r} is not under the server's work dir {root}")
    return Path(resolved)


def real_path(path: str) -> str:
    """``os.path.realpath(path)``: every symlink followed, an absolute path without ``..``.

    An existing path is resolved by the kernel (``open(O_PATH)`` and reading its
    ``/proc/self/fd`` link: three system calls). ``os.path.realpath`` makes a system call
    and a few microseconds of Python per component (issue 6: ~26 µs for a task's
    working dir). A path that does not exist (or ``/proc`` that is not mounted) goes to
    ``os.path.realpath``, which resolves what exists and keeps the rest as written.

    Args:
        path: an absolute path.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):  # missing, not a directory on the way, NUL byte
        return os.path.realpath(path)
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
    if not resolved.startswith("/") or resolved.endswith(" (deleted)"):
        return os.path.realpath(path)  # removed meanwhile, or outside our root
    return resolved


@functools.lru_cache(maxsize=16)
def _real_root(work_dir: str) -> str:
    # The work dir is fixed for the server's life; resolving it again per request cost as
    # much as resolving the request's own path.
    return os.path.realpath(work_dir)


def is_below(path: Path, root: Path) -> bool:
    """Whether ``path`` lies strictly below ``root`` (both already resolved; no I/O).

    A string prefix test on whole components: ``/a/bc`` is not below ``/a/b``. Cheaper than
    ``root in path.parents``, which builds a Path per ancestor.
    """
    return is_below_text(str(path), str(root))


def is_below_text(path: str, root: str) -> bool:
    """:func:`is_below` for normalized absolute path strings (no trailing separator but ``/``)."""
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path.startswith(prefix) and path != root


def require_directory(path: Path, *, field: str) -> None:
    """Check that a resolved working directory exists and is a directory.

    Args:
        path: the path returned by :func:`resolve_working_dir`.
        field: request field name for errors.

    Raises:
        ContractError: INVALID_ARGUMENT when it is missing, not a directory, or cannot be
            looked up at all (e.g. ``File name too long``).
    """
    try:
        exists = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:
        if exc.errno not in _MISSING:
            raise invalid_argument(f"{field} {str(path)!r}: {exc.strerror or exc}") from None
        exists = False
    if not exists:
        raise invalid_argument(f"{field} {str(path)!r} is not an existing directory")


#: lookup errors that mean "no such directory" (those ``Path.is_dir`` answers False for).
_MISSING: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def validate_entrypoint(entrypoint: str) -> str:
    """Check a task entrypoint: a relative path inside the working dir, without ``..``.

    Returns:
        ``entrypoint`` unchanged (empty is allowed and means "no entrypoint").

    Raises:
        ContractError: INVALID_ARGUMENT for absolute paths, ``..`` components or NUL bytes.
    """
    if not entrypoint:
        return entrypoint
    if "\0" in entrypoint:
        raise invalid_argument("entrypoint contains a NUL byte")
    if entrypoint.startswith("/"):
        raise invalid_argument(f"entrypoint {entrypoint!r} must be relative to the working dir")
    if ".." in entrypoint.split("/"):
        raise invalid_argument(f"entrypoint {entrypoint!r} must not contain '..'")
    return entrypoint


def is_json_media_type(content_type: str) -> bool:
    """True for ``application/json`` and ``*+json`` (any parameters, any case), and for "".

    An empty content type means JSON, the gateway's encoding (seed 002, "Proposed Protobuf
    API": the gateway initially accepts JSON).
    """
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type in ("", "application/json") or media_type.endswith("+json")


def valid_text(text: str) -> str:
    """Return ``text`` with what UTF-8 cannot encode (lone surrogates) replaced by ``?``.

    Handler exception messages can hold lone surrogates (e.g. decoded from JSON); protobuf
    strings and gRPC status messages must be valid UTF-8.
    """
    return text.encode("utf-8", "replace").decode("utf-8")


def bound_text(text: str, limit_bytes: int = limits.MAX_ERROR_TEXT_BYTES) -> str:
    """Cut ``text`` to at most ``limit_bytes`` UTF-8 bytes, marking the cut with ``...``.

    The result is always valid UTF-8 text (see :func:`valid_text`).
    """
    data = text.encode("utf-8", "replace")
    if len(data) <= limit_bytes:
        return data.decode("utf-8")
    marker = " ...[truncated]"
    return data[: limit_bytes - len(marker)].decode(errors="ignore") + marker
