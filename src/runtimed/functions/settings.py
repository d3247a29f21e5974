"""Configuration of the function lifecycle: the published endpoint, defaults and deadlines.

Seed 000, Run Status API: ``status.endpoint`` is ``{protocol: HTTPS, url, caBundle?}``; the
URL is the shared gateway's base URL plus the invoke path
(:func:`krt.api.endpoint.function_endpoint_url`), and ``caBundle`` is the PEM trust bundle
of the installation's CA when the gateway certificate is signed by it (omitted when it
chains to a root clients already trust). Both come from runtimed's configuration
(``--gateway-url`` / ``--gateway-ca-file``), not from the Run.

The CA file comes from a ConfigMap the control plane mounts ``optional: true``; a file that
is not there (the ConfigMap does not exist yet, or lacks ``ca.crt``) means "no caBundle"
(:func:`load_optional_ca_bundle`), while a file that is there but unusable is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from krt.api.endpoint import function_endpoint_url
from krt.api.limits import MAX_CA_BUNDLE_BYTES
from krt.api.run import Endpoint, EndpointProtocol, Run

__all__ = [
    "DEFAULT_GATEWAY_URL",
    "FunctionSettings",
    "FunctionTimings",
    "default_inline_path",
    "load_ca_bundle",
    "load_optional_ca_bundle",
]

#: The shared gateway Service of the default installation (seed 001/000 examples).
DEFAULT_GATEWAY_URL: Final = "https://runtime-gateway.kruntimes-system.svc.cluster.local"
#: Default file of inline function source by language (issue 7).
INLINE_DEFAULTS: Final[Mapping[str, str]] = {"python": "main.py", "bash": "main.sh"}


def default_inline_path(runtime: str, overrides: Mapping[str, str] | None = None) -> str:
    """The file inline function source is written to when ``inlinePath`` is unset.

    Args:
        runtime: ``spec.runtime`` (a Runtime name).
        overrides: Runtime name -> file, consulted first.

    Returns:
        ``overrides[runtime]``; else ``main.sh`` when the Runtime's name says Bash
        (``bash``, ``sh`` or a ``-bash``/``bash-`` variant); else ``main.py``.
    """
    if overrides and runtime in overrides:
        return overrides[runtime]
    words = runtime.lower().replace("_", "-").split("-")
    if "bash" in words or "sh" in words:
        return INLINE_DEFAULTS["bash"]
    return INLINE_DEFAULTS["python"]


def load_ca_bundle(path: Path) -> bytes:
    """Read a PEM CA bundle for ``status.endpoint.caBundle``.

    Raises:
        ValueError: the file is empty, larger than 16 KiB, or has no PEM certificate.
        OSError: it cannot be read.
    """
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"gateway CA bundle {path} is empty")
    if len(data) > MAX_CA_BUNDLE_BYTES:
        raise ValueError(
            f"gateway CA bundle {path} is {len(data)} bytes; status.endpoint.caBundle allows"
            f" {MAX_CA_BUNDLE_BYTES}"
        )
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ValueError(f"gateway CA bundle {path} holds no PEM certificate")
    return data


def load_optional_ca_bundle(path: Path) -> bytes | None:
    """Like :func:`load_ca_bundle`, but ``None`` when ``path`` does not exist.

    Raises:
        ValueError: the file exists but is empty, over 16 KiB, or has no PEM certificate.
        OSError: it exists but cannot be read.
    """
    if not path.exists():
        return None
    return load_ca_bundle(path)


@dataclass(frozen=True, slots=True)
class FunctionTimings:
    """Deadlines and periods of the function lifecycle, seconds.

    Attributes:
        rpc: one FunctionStatus / UnregisterFunction call.
        register: one RegisterFunction call (the server starts the worker and imports the
            handler before it answers).
        prepare: one source preparation (git checkout included).
        drain: how long cleanup waits for an in-flight invocation before cancelling it.
        poll_min, poll_max: bounds of the idle poller's period; the period is
            ``idleTimeoutSeconds / 4`` within them (``poll_max`` without an idle timeout).
        unavailable_retry: look again this long after the Runtime Server did not answer.
    """

    rpc: float = 5.0
    register: float = 60.0
    prepare: float = 300.0
    drain: float = 5.0
    poll_min: float = 0.5
    poll_max: float = 5.0
    unavailable_retry: float = 1.0

    def __post_init__(self) -> None:
        for name in ("rpc", "register", "prepare", "poll_min", "poll_max", "unavailable_retry"):
            if getattr(self, name) <= 0:
                raise ValueError(f"FunctionTimings.{name} must be > 0 seconds")
        if self.drain < 0:
            raise ValueError("FunctionTimings.drain must be >= 0 seconds")
        if self.poll_min > self.poll_max:
            raise ValueError("FunctionTimings.poll_min must not exceed poll_max")

    def poll_period(self, idle_timeout_seconds: int | None) -> float:
        """The poller's period for a Run: ``clamp(idle / 4, poll_min, poll_max)`` seconds."""
        if not idle_timeout_seconds:
            return self.poll_max
        return min(self.poll_max, max(self.poll_min, idle_timeout_seconds / 4))


@dataclass(frozen=True, slots=True)
class FunctionSettings:
    """What the function lifecycle publishes and defaults.

    Attributes:
        gateway_url: absolute base URL of the shared gateway (no query or fragment).
        ca_bundle: PEM bytes for ``caBundle`` (<= 16 KiB), or ``None`` to omit it.
        inline_paths: Runtime name -> default inline file (see :func:`default_inline_path`).
        timings: deadlines and periods.

    Raises:
        EndpointPathError: ``gateway_url`` is not an absolute http(s) URL.
        ValueError: ``ca_bundle`` is over 16 KiB.
    """

    gateway_url: str = DEFAULT_GATEWAY_URL
    ca_bundle: bytes | None = None
    inline_paths: Mapping[str, str] = field(default_factory=dict)
    timings: FunctionTimings = field(default_factory=FunctionTimings)

    def __post_init__(self) -> None:
        # validates the base URL once, with a placeholder Run
        function_endpoint_url(
            self.gateway_url, "ns", "runtime", "00000000-0000-0000-0000-000000000000"
        )
        if self.ca_bundle is not None and len(self.ca_bundle) > MAX_CA_BUNDLE_BYTES:
            raise ValueError(f"ca_bundle exceeds {MAX_CA_BUNDLE_BYTES} bytes")

    @property
    def protocol(self) -> EndpointProtocol:
        """HTTPS for an https base URL, HTTP for a plain one (local development only)."""
        scheme = urlsplit(self.gateway_url).scheme
        return EndpointProtocol.HTTPS if scheme == "https" else EndpointProtocol.HTTP

    def endpoint(self, run: Run) -> Endpoint:
        """The ``status.endpoint`` of ``run``.

        Raises:
            EndpointPathError: the Run's namespace, Runtime or UID is not valid in a path.
        """
        url = function_endpoint_url(
            self.gateway_url, run.metadata.namespace, run.spec.runtime, run.metadata.uid
        )
        return Endpoint(protocol=self.protocol, url=url, ca_bundle=self.ca_bundle)

    def inline_path(self, run: Run) -> str:
        """The file inline source of ``run`` is written to."""
        source = run.spec.source
        if source is not None and source.inline_path:
            return source.inline_path
        return default_inline_path(run.spec.runtime, self.inline_paths)
