"""``registration_digest``: the idempotency check of RegisterFunction (seed 002).

Seed 002, Registration Identity: "registration_digest is a lowercase SHA-256 digest
calculated by runtimed from canonical, immutable registration inputs: resolved source
identity, handler, environment, and runtime-visible registration settings. It excludes the
transient working-directory path."

Canonical form: one JSON object, keys sorted, no insignificant whitespace, UTF-8, with a
format version (``"v": 1``) so a later change of the inputs cannot collide with this one.
The source identity is the SHA-256 of the inline text plus the file it is written to, or
``repoURL`` plus ``commitSHA`` (already immutable); the environment is the list of
``[name, value]`` pairs sorted by name; the runtime-visible settings are the Runtime name
and ``idleTimeoutSeconds`` (sent to the Runtime Server in the same request). Every input is
immutable after creation (CRD transition rules), so the digest of one Run never changes:
re-adoption after a runtimed restart sends the same digest and gets the same registration.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from krt.api.run import FunctionMode, Run, Source

__all__ = ["DIGEST_FORMAT_VERSION", "canonical_inputs", "registration_digest", "source_identity"]

#: Bumped whenever the canonical inputs change shape.
DIGEST_FORMAT_VERSION: Final = 1


def source_identity(source: Source | None, *, inline_path: str) -> dict[str, str]:
    """The resolved, immutable identity of ``spec.source``.

    Args:
        source: ``spec.source`` (``None``: no source).
        inline_path: the file inline source is written to (after the runtime default).

    Returns:
        ``{"inlineSHA256", "inlinePath"}``, ``{"repoURL", "commitSHA"}`` (plus the inline
        pair when both are set), or ``{}`` for no source.
    """
    if source is None:
        return {}
    identity: dict[str, str] = {}
    if source.repo_url is not None or source.commit_sha is not None:
        identity["repoURL"] = source.repo_url or ""
        identity["commitSHA"] = (source.commit_sha or "").lower()
    if source.inline is not None:
        identity["inlineSHA256"] = hashlib.sha256(source.inline.encode("utf-8")).hexdigest()
        identity["inlinePath"] = inline_path
    return identity


def canonical_inputs(run: Run, *, inline_path: str, env: Mapping[str, str] | None = None) -> bytes:
    """The canonical JSON bytes the digest is taken over.

    Args:
        run: a function Run.
        inline_path: the file inline source is written to.
        env: the environment sent to the Runtime Server (default: ``spec.env``).

    Raises:
        ValueError: ``run`` is not a function Run.
    """
    mode = run.spec.mode
    if not isinstance(mode, FunctionMode):
        raise ValueError(f"Run {run.key} is a task Run; only function Runs are registered")
    environment = env if env is not None else {e.name: e.value for e in run.spec.env}
    document: dict[str, Any] = {
        "v": DIGEST_FORMAT_VERSION,
        "runtime": run.spec.runtime,
        "source": source_identity(run.spec.source, inline_path=inline_path),
        "handler": mode.handler,
        "env": sorted([name, value] for name, value in environment.items()),
        "idleTimeoutSeconds": mode.idle_timeout_seconds or 0,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def registration_digest(run: Run, *, inline_path: str, env: Mapping[str, str] | None = None) -> str:
    """The lowercase hex SHA-256 of :func:`canonical_inputs` (64 characters, no prefix).

    Args:
        run: a function Run.
        inline_path: the file inline source is written to (``inlinePath`` or the runtime's
            default); the working directory is deliberately not an input.
        env: the environment sent to the Runtime Server (default: ``spec.env``).

    Raises:
        ValueError: ``run`` is not a function Run.
    """
    return hashlib.sha256(canonical_inputs(run, inline_path=inline_path, env=env)).hexdigest()
