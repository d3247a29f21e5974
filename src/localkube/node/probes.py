"""Container probes: tcpSocket, httpGet, grpc and exec, and the kubelet's threshold rules.

A probe's result counts towards ``successThreshold`` consecutive successes or
``failureThreshold`` consecutive failures before it flips (:class:`ProbeTracker`, pure).
Readiness starts *failed* and liveness/startup start *successful*-until-proven-otherwise,
as in the kubelet. A probe attempt that exceeds ``timeoutSeconds`` fails. Named ports
(``port: http``) resolve through the container's ``ports``. httpGet succeeds on a status
code 200-399 and does not verify TLS certificates (like the kubelet); grpc speaks
``grpc.health.v1.Health/Check`` and succeeds on ``SERVING``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import trio


class ProbeConfigError(ValueError):
    """A probe that cannot run (no handler, unknown named port); the message says which."""


@dataclass
class ProbeTracker:
    """Consecutive-result counting for one probe.

    Attributes:
        success_threshold: consecutive successes to become successful (>= 1).
        failure_threshold: consecutive failures to become failed (>= 1).
        ok: the current result.
    """

    success_threshold: int = 1
    failure_threshold: int = 3
    ok: bool = False
    _successes: int = field(default=0, repr=False)
    _failures: int = field(default=0, repr=False)

    def observe(self, success: bool) -> bool:
        """Record one probe attempt; return True if the result flipped."""
        if success:
            self._successes += 1
            self._failures = 0
            if not self.ok and self._successes >= self.success_threshold:
                self.ok = True
                return True
        else:
            self._failures += 1
            self._successes = 0
            if self.ok and self._failures >= self.failure_threshold:
                self.ok = False
                return True
        return False


@dataclass(frozen=True)
class ProbeTiming:
    """Timing fields of a probe spec, in seconds (Kubernetes defaults)."""

    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> ProbeTiming:
        """Read ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``,
        ``successThreshold`` and ``failureThreshold`` (unset fields take the defaults)."""
        return cls(
            float(spec.get("initialDelaySeconds", 0)),
            float(spec.get("periodSeconds", 10)),
            float(spec.get("timeoutSeconds", 1)),
            int(spec.get("successThreshold", 1)),
            int(spec.get("failureThreshold", 3)),
        )


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    """Resolve a probe port (number or container port name).

    Raises:
        ProbeConfigError: if a named port is not among the container's ports.
    """
    if isinstance(port, int):
        return port
    if port.isdigit():
        return int(port)
    for p in container.get("ports", []) or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ProbeConfigError(f'container "{container.get("name")}" has no port named "{port}"')


async def tcp_probe(host: str, port: int) -> bool:
    """Succeed if a TCP connection to ``host:port`` opens."""
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError:
        return False
    await stream.aclose()
    return True


async def http_probe(url: str, headers: Mapping[str, str] | None = None) -> bool:
    """Succeed if a GET of ``url`` answers 200-399 (TLS not verified)."""
    try:
        async with httpx.AsyncClient(verify=False, timeout=None) as client:
            resp = await client.get(url, headers=dict(headers or {}))
    except httpx.HTTPError:
        return False
    return 200 <= resp.status_code < 400


@cache
def _health_messages() -> tuple[Any, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(
        name="localkube/grpc_health_v1.proto", package="grpc.health.v1", syntax="proto3"
    )
    req = fdp.message_type.add(name="HealthCheckRequest")
    req.field.add(name="service", number=1, type=9, label=1)  # string
    resp = fdp.message_type.add(name="HealthCheckResponse")
    resp.field.add(name="status", number=1, type=5, label=1)  # int32 (enum on the wire)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
        ),
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")
        ),
    )


async def grpc_probe(host: str, port: int, service: str = "") -> bool:
    """Succeed if ``grpc.health.v1.Health/Check`` answers ``SERVING`` (status 1)."""
    import purerpc

    request_cls, response_cls = _health_messages()
    try:
        async with purerpc.insecure_channel(host, port) as channel:
            client = purerpc.Client("grpc.health.v1.Health", channel)
            stub = client.get_method_stub(
                "Check",
                purerpc.RPCSignature(purerpc.Cardinality.UNARY_UNARY, request_cls, response_cls),
            )
            reply = await stub(request_cls(service=service))
    except Exception:  # noqa: BLE001 - any transport or RPC failure is a failed probe
        return False
    return int(reply.status) == 1


async def exec_probe(argv: list[str], *, env: Mapping[str, str], cwd: Path) -> bool:
    """Succeed if ``argv`` exits 0. The caller bounds it with ``timeoutSeconds``; on
    cancellation the probe process is killed."""
    try:
        result = await trio.run_process(
            argv,
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    except OSError:
        return False
    return result.returncode == 0


async def run_probe(
    spec: Mapping[str, Any],
    *,
    host: str,
    container: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: Path,
) -> bool:
    """Run one attempt of a probe spec (``tcpSocket``, ``httpGet``, ``grpc`` or ``exec``).

    Args:
        spec: the probe (``readinessProbe``/``livenessProbe``/``startupProbe`` value).
        host: the Pod IP (used when the handler gives no host).
        container: the container spec (for named ports).
        env: the container's environment (exec probes run with it).
        cwd: working directory for exec probes.

    Returns:
        Whether the attempt succeeded within ``timeoutSeconds``.

    Raises:
        ProbeConfigError: if the spec has no supported handler or a named port is unknown.
    """
    timing = ProbeTiming.from_spec(spec)
    with trio.move_on_after(timing.timeout):
        if "tcpSocket" in spec:
            h = spec["tcpSocket"]
            return await tcp_probe(h.get("host") or host, resolve_port(h["port"], container))
        if "httpGet" in spec:
            h = spec["httpGet"]
            scheme = str(h.get("scheme", "HTTP")).lower()
            path = h.get("path", "/") or "/"
            if not path.startswith("/"):
                path = "/" + path
            url = f"{scheme}://{h.get('host') or host}:{resolve_port(h['port'], container)}{path}"
            headers = {x["name"]: x["value"] for x in h.get("httpHeaders", []) or []}
            return await http_probe(url, headers)
        if "grpc" in spec:
            h = spec["grpc"]
            return await grpc_probe(host, int(h["port"]), h.get("service", "") or "")
        if "exec" in spec:
            return await exec_probe(list(spec["exec"]["command"]), env=env, cwd=cwd)
        raise ProbeConfigError(
            "probe has no tcpSocket, httpGet, grpc or exec handler: " + ", ".join(sorted(spec))
        )
    return False
