"""Install kruntimes on a dev cluster and wait until it serves (issue 9, ``krt dev up``).

What is installed, in dependency order (each step idempotent, :mod:`krt.cli.dev_apply`):

1. the ``kruntimes-system`` namespace and the CRDs (Run, Runtime), then a wait until the API
   serves them;
2. the kruntimes chart without its Deployments: RBAC, ServiceAccounts, Services;
3. TLS material (:mod:`krt.cli.dev_certs`): the ``runtime-gateway-tls`` Secret, signed by
   the dev gateway CA for the Service's DNS names and its ClusterIP (known once the Service
   exists); the peer mTLS Secret ``kruntimes-peer-tls`` (``tls.crt``, ``tls.key``,
   ``ca.crt``; valid for the Runtimes' Service names the gateway dials) in
   ``kruntimes-system`` (the gateway's client certificate) and in the Runtimes' namespace;
   and, in the Runtimes' namespace, the ConfigMap ``kruntimes-gateway-ca`` (``ca.crt``: the
   gateway CA, what runtimed publishes as ``status.endpoint.caBundle``). The chart's control
   plane mounts both into every Runtime Pod's runtimed (``--gateway-ca-configmap``,
   ``--peer-tls-secret``), so they exist before the first Runtime Pod starts;
4. the control plane and gateway Deployments (their Secret exists, so the Pods start at once);
5. the kruntimes-runtimes chart: the built-in ``python`` and ``bash`` Runtimes in
   ``default``, which the control plane turns into warm Runtime Pods. These are created
   only when missing: once they exist they are the user's (``kubectl edit runtime bash``
   sticks across ``krt dev up``; delete one to get its default back).

Every object gets a progress line as ``kubectl apply`` prints it
(``deployment.apps/krt-kruntimes-gateway configured``, ``runtime.kruntimes.io/bash kept ...``),
so a re-run never changes anything silently: steps 1-4 are applied like ``kubectl apply``
(a user's edit of the control plane or gateway is put back, and says ``configured``).

Then :func:`wait_until_ready` polls (every :data:`POLL_SECONDS`) until the control plane
and gateway Pods are Ready, the gateway Service has a ready endpoint, and every Runtime
reports all its replicas ready, printing a progress line whenever the picture changes
("waiting for Runtime python: 0/1 ready"). A container that keeps crashing or whose image
cannot run fails the wait at once with the path of its log. The caller bounds the wait
(``trio.fail_after``) and, on timeout, reports :meth:`ReadinessTracker.summary`.

This module never imports localkube (production code must not): the caller passes the node's
Pod directory, where each Pod's logs are (``<pods>/<ns>_<name>_<uid>/logs/<container>/N.log``,
docs/localkube.md).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from krt.cli.dev_apply import ApplyResult, load_manifests, object_name
from krt.cli.dev_apply import apply as apply_manifest
from krt.cli.dev_certs import GATEWAY_SERVICE, gateway_hosts, gateway_tls, peer_tls, tls_secret
from krt.kube.client import Kube
from krt.kube.errors import KubeError, NotFound
from krt.kube.resources import ENDPOINTSLICES, PODS, RUNS, RUNTIMES, SERVICES

__all__ = [
    "GATEWAY_CA_CONFIGMAP",
    "GATEWAY_TLS_SECRET",
    "PEER_TLS_SECRET",
    "POLL_SECONDS",
    "RUNTIMES_NAMESPACE",
    "SYSTEM_NAMESPACE",
    "Component",
    "InstallError",
    "Installed",
    "ReadinessTracker",
    "container_problem",
    "install",
    "latest_log",
    "wait_until_ready",
]

Obj = dict[str, Any]
Progress = Callable[[str], None]

#: Namespaces of the install (the charts were rendered for them, see dev_manifests).
SYSTEM_NAMESPACE: Final = "kruntimes-system"
RUNTIMES_NAMESPACE: Final = "default"
#: The gateway's serving certificate Secret (gateway.tls.secretName of the rendering).
GATEWAY_TLS_SECRET: Final = "runtime-gateway-tls"
#: The peer mTLS Secret (tls.crt, tls.key, ca.crt), in both namespaces.
PEER_TLS_SECRET: Final = "kruntimes-peer-tls"
#: ConfigMap with the gateway CA (key ca.crt) in the Runtimes' namespace, for runtimed.
GATEWAY_CA_CONFIGMAP: Final = "kruntimes-gateway-ca"
#: Seconds between readiness polls.
POLL_SECONDS: Final = 0.5
#: Seconds between repeated progress lines while nothing changes.
PROGRESS_REPEAT_SECONDS: Final = 5.0
#: A container restarted this many times while ``krt dev up`` waits is crash-looping, not
#: starting. Counted from the first restartCount the wait sees: a resumed cluster's Pods
#: carry the restarts of earlier sessions (every node restart adds one), which say nothing
#: about the container now.
CRASH_RESTARTS: Final = 2
#: Waiting reasons that will not go away by waiting (the image cannot run at all).
FATAL_WAITING: Final = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
#: Lines of a failing container's log quoted in an error.
LOG_TAIL_LINES: Final = 15
#: Said after an object ``krt dev up`` left as the user edited it (a ``kept`` result).
KEPT_NOTE: Final = (
    " (differs from the built-in default: left as you changed it; delete it to get the"
    " default back)"
)


class InstallError(Exception):
    """kruntimes could not be installed or did not come up (the message says what and where)."""


@dataclass(frozen=True)
class Component:
    """A part of the install whose Pods must be Ready.

    Attributes:
        label: how progress lines name it (``control plane``, ``Runtime python``).
        namespace: where its Pods are.
        selector: label selector of its Pods.
        runtime: the Runtime's name when the part is a Runtime (ready per its status).
    """

    label: str
    namespace: str
    selector: str
    runtime: str | None = None


@dataclass(frozen=True)
class Installed:
    """A kruntimes install that is ready.

    Attributes:
        gateway_url: ``https://<ClusterIP>:443``: where the host reaches the gateway
            (``krt invoke --gateway-url`` / ``KRT_GATEWAY_URL``).
        gateway_ca_file: the gateway CA's certificate (PEM), for clients.
        runtimes: ``name -> ready replicas`` of the installed Runtimes.
        applied: how many objects were ``created``, ``configured``, left ``unchanged``, or
            ``kept`` as the user changed them.
    """

    gateway_url: str
    gateway_ca_file: Path
    runtimes: dict[str, int]
    applied: dict[str, int]


@dataclass
class ReadinessTracker:
    """What the readiness wait last saw, for progress lines and the timeout message.

    Attributes:
        pods_dir: the node's Pod directory (logs), or None when unknown.
        pending: component label -> its last progress text, for parts not ready yet.
        logs: component label -> log file of one of its Pods (the latest run).
        first_restarts: ``(Pod UID, container name) -> restartCount`` when the wait first
            saw the container: the baseline :func:`container_problem` counts restarts from.
    """

    pods_dir: Path | None
    pending: dict[str, str] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    first_restarts: dict[tuple[str, str], int] = field(default_factory=dict)

    def restarts_before(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """The baseline restart count of each container of ``pod`` (recorded at first sight).

        Args:
            pod: a Pod object as listed.

        Returns:
            ``container name -> restartCount`` the first time this wait saw that container
            of this Pod (a new Pod UID starts a new baseline).
        """
        uid = str((pod.get("metadata") or {}).get("uid"))
        baseline = {}
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            name = str(status.get("name"))
            count = int(status.get("restartCount") or 0)
            baseline[name] = self.first_restarts.setdefault((uid, name), count)
        return baseline

    def summary(self) -> str:
        """One line per part that is not ready, with its log path when known."""
        if not self.pending:
            return "everything reported ready"
        lines = []
        for label, text in self.pending.items():
            log = self.logs.get(label)
            lines.append(f"  {text}" + (f" (log: {log})" if log else ""))
        return "\n".join(lines)


def _components(runtimes: Sequence[Obj]) -> list[Component]:
    parts = [
        Component("control plane", SYSTEM_NAMESPACE, "app.kubernetes.io/component=controlplane"),
        Component("gateway", SYSTEM_NAMESPACE, "app.kubernetes.io/component=gateway"),
    ]
    for runtime in runtimes:
        name = runtime["metadata"]["name"]
        parts.append(
            Component(
                f"Runtime {name}",
                runtime["metadata"].get("namespace") or RUNTIMES_NAMESPACE,
                f"kruntimes.io/runtime={name}",
                runtime=name,
            )
        )
    return parts


async def install(
    kube: Kube,
    *,
    state_dir: Path,
    tracker: ReadinessTracker,
    progress: Progress,
) -> Installed:
    """Install kruntimes (see the module docstring) and wait until every part is ready.

    Never returns before everything is ready: bound it with ``trio.fail_after`` and report
    ``tracker.summary()`` on timeout.

    Args:
        kube: an admin client of the dev cluster.
        state_dir: the dev cluster's state directory (the CAs live under ``kruntimes/``).
        tracker: receives what is still pending (read it after a timeout).
        progress: called with each progress line (no newline): one per object applied
            (``<kind>[.<group>]/<name> created|configured|unchanged|kept``), then the
            readiness lines.

    Returns:
        Where the gateway is and how many replicas of each Runtime are ready.

    Raises:
        InstallError: a manifest was refused, or a Pod cannot start (with its log path).
    """
    runtimes = load_manifests("runtimes")
    kruntimes = load_manifests("kruntimes")
    applied: Counter[str] = Counter()

    async def apply(doc: Mapping[str, Any], *, overwrite: bool = True) -> ApplyResult:
        result = await apply_manifest(kube, doc, overwrite=overwrite)
        applied[result] += 1
        progress(f"{object_name(doc)} {result}" + (KEPT_NOTE if result == "kept" else ""))
        return result

    try:
        await apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}
        )
        for crd in load_manifests("crds"):
            await apply(crd)
        await _wait_crds_served(kube, progress)
        for doc in kruntimes:
            if doc["kind"] != "Deployment":
                await apply(doc)
        cluster_ip = await _gateway_cluster_ip(kube)
        gateway_pair = await trio.to_thread.run_sync(
            gateway_tls, state_dir, gateway_hosts(SYSTEM_NAMESPACE, cluster_ip)
        )
        peer_pair = await trio.to_thread.run_sync(peer_tls, state_dir, [RUNTIMES_NAMESPACE])
        changed = await apply(tls_secret(GATEWAY_TLS_SECRET, SYSTEM_NAMESPACE, gateway_pair))
        for namespace in (SYSTEM_NAMESPACE, RUNTIMES_NAMESPACE):
            await apply(tls_secret(PEER_TLS_SECRET, namespace, peer_pair))
        await apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": GATEWAY_CA_CONFIGMAP,
                    "namespace": RUNTIMES_NAMESPACE,
                    "labels": {
                        "app.kubernetes.io/part-of": "kruntimes",
                        "kruntimes.io/dev": "true",
                    },
                },
                "data": {"ca.crt": gateway_pair.ca.decode("ascii")},
            }
        )
        if changed == "configured":
            # the Secret differed from the dev certificate (issued anew when the ClusterIP
            # changed, or edited by hand): the gateway would reload it within ~40 s (volume
            # sync, then its file watch); restarting it serves the right one at once
            restarted = await _restart_pods(
                kube, SYSTEM_NAMESPACE, "app.kubernetes.io/component=gateway"
            )
            source = state_dir / "kruntimes" / "gateway-tls"
            for pod in restarted:
                progress(
                    f"pod/{pod} deleted (secret/{GATEWAY_TLS_SECRET} was set back to the "
                    f"dev certificate in {source})"
                )
            # until they are gone the readiness check below could count them, and "Ready"
            # would come before the replacement serves (T3 F6)
            await _wait_pods_gone(kube, SYSTEM_NAMESPACE, restarted)
        for doc in kruntimes:
            if doc["kind"] == "Deployment":
                await apply(doc)
        for doc in runtimes:
            await apply(doc, overwrite=False)  # the user's once created (module docstring)
    except ValueError as exc:
        raise InstallError(f"cannot install kruntimes: {exc}") from exc
    except KubeError as exc:
        raise InstallError(f"the API server refused the install: {exc}") from exc
    counts = ", ".join(
        f"{applied[k]} {k}"
        for k in ("created", "configured", "unchanged", "kept")
        if applied[k] or k != "kept"
    )
    progress(f"kruntimes applied ({counts}): waiting for the control plane, gateway, Runtimes")
    ready = await wait_until_ready(kube, _components(runtimes), tracker=tracker, progress=progress)
    return Installed(
        gateway_url=f"https://{cluster_ip}:443",
        gateway_ca_file=state_dir / "kruntimes" / "gateway-ca" / "ca.crt",
        runtimes=ready,
        applied=dict(applied),
    )


async def _wait_crds_served(kube: Kube, progress: Progress) -> None:
    said = False
    while True:
        try:
            await kube.list(RUNTIMES, RUNTIMES_NAMESPACE, page_size=1)
            await kube.list(RUNS, RUNTIMES_NAMESPACE, page_size=1)
            return
        except NotFound:
            if not said:
                progress("waiting for the API server to serve the Run and Runtime CRDs ...")
                said = True
            await trio.sleep(0.1)


async def _gateway_cluster_ip(kube: Kube) -> str:
    while True:
        svc = await kube.get(SERVICES, GATEWAY_SERVICE, SYSTEM_NAMESPACE)
        ip = (svc.get("spec") or {}).get("clusterIP")
        if ip and ip != "None":
            return str(ip)
        await trio.sleep(0.1)


async def _restart_pods(kube: Kube, namespace: str, selector: str) -> list[str]:
    """Delete the Pods matching ``selector`` (their Deployment replaces them); their names."""
    pods, _ = await kube.list(PODS, namespace, label_selector=selector)
    deleted = []
    for pod in pods:
        try:
            await kube.delete(PODS, pod["metadata"]["name"], namespace)
        except NotFound:
            continue
        deleted.append(str(pod["metadata"]["name"]))
    return deleted


#: Seconds :func:`_wait_pods_gone` waits for deleted Pods (their grace period is 30 s).
PODS_GONE_WAIT_SECONDS = 40.0


async def _wait_pods_gone(kube: Kube, namespace: str, names: Sequence[str]) -> None:
    """Wait (at most :data:`PODS_GONE_WAIT_SECONDS`) until the named Pods no longer exist."""
    with trio.move_on_after(PODS_GONE_WAIT_SECONDS):
        for name in names:
            while True:
                try:
                    await kube.get(PODS, name, namespace)
                except NotFound:
                    break
                await trio.sleep(POLL_SECONDS)


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def latest_log(pods_dir: Path, pod: Mapping[str, Any], container: str) -> Path | None:
    """The log file of a container's latest run on the localkube node, or None."""
    meta = pod.get("metadata") or {}
    root = pods_dir / f"{meta.get('namespace')}_{meta.get('name')}_{meta.get('uid')}"
    runs = []
    for path in (root / "logs" / container).glob("*.log"):
        try:
            runs.append((int(path.stem), path))
        except ValueError:
            continue
    return max(runs)[1] if runs else None


def container_problem(
    pod: Mapping[str, Any], *, restarts_before: Mapping[str, int] | None = None
) -> tuple[str, str] | None:
    """A container of ``pod`` that will not become ready by waiting, or None.

    Args:
        pod: a Pod object as listed.
        restarts_before: ``container name -> restartCount`` already counted before the
            wait began (:meth:`ReadinessTracker.restarts_before`); only restarts beyond it
            count towards :data:`CRASH_RESTARTS`. None: count every restart.

    Returns:
        ``(container name, what is wrong)`` for a container that crash-loops (restarted
        :data:`CRASH_RESTARTS` times during the wait, or in ``CrashLoopBackOff``) or whose
        image cannot run (:data:`FATAL_WAITING`, or ``StartError``: the command cannot be
        executed).
    """
    before = restarts_before or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        name = str(status.get("name"))
        state = status.get("state") or {}
        waiting = state.get("waiting") or {}
        last = (status.get("lastState") or {}).get("terminated") or {}
        reason = waiting.get("reason")
        if reason in FATAL_WAITING or reason == "StartError" or last.get("reason") == "StartError":
            why = waiting.get("message") or last.get("message") or reason or "StartError"
            return name, f"cannot start ({why})"
        restarts = int(status.get("restartCount") or 0)
        if reason == "CrashLoopBackOff" or restarts - before.get(name, 0) >= CRASH_RESTARTS:
            code = last.get("exitCode")
            exit_text = f", last exit code {code}" if code is not None else ""
            return name, f"keeps exiting (restarted {restarts}x{exit_text})"
    return None


def _tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    # CRI format: "<timestamp> <stream> <F|P> <text>"
    texts = [
        parts[3] if len(parts) == 4 else line for line in lines for parts in [line.split(" ", 3)]
    ]
    return "\n".join(texts[-LOG_TAIL_LINES:])


async def wait_until_ready(
    kube: Kube,
    components: Sequence[Component],
    *,
    tracker: ReadinessTracker,
    progress: Progress,
) -> dict[str, int]:
    """Poll until every component is ready; see the module docstring.

    Args:
        kube: an admin client.
        components: what must be ready.
        tracker: updated with what is pending and the log paths seen.
        progress: receives a line per change (and every few seconds while waiting).

    Returns:
        ``Runtime name -> ready replicas``.

    Raises:
        InstallError: a container crash-loops or cannot start (message with its log path
            and the log's last lines).
    """
    last_text: dict[str, str] = {}
    last_said = time.monotonic()
    while True:
        ready_runtimes: dict[str, int] = {}
        tracker.pending.clear()
        for part in components:
            text = await _check(kube, part, tracker, ready_runtimes)
            if text is not None:
                tracker.pending[part.label] = text
        if not tracker.pending:
            return ready_runtimes
        now = time.monotonic()
        changed = {k: v for k, v in tracker.pending.items() if last_text.get(k) != v}
        if changed or now - last_said >= PROGRESS_REPEAT_SECONDS:
            for text in (changed or tracker.pending).values():
                progress(f"{text} ...")
            last_said = now
        last_text = dict(tracker.pending)
        await trio.sleep(POLL_SECONDS)


async def _check(
    kube: Kube, part: Component, tracker: ReadinessTracker, ready_runtimes: dict[str, int]
) -> str | None:
    """Progress text for ``part`` when it is not ready, else None (fails on a broken Pod)."""
    pods, _ = await kube.list(PODS, part.namespace, label_selector=part.selector)
    for pod in pods:
        if tracker.pods_dir is not None:
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                log = latest_log(tracker.pods_dir, pod, str(status.get("name")))
                if log is not None and (part.label not in tracker.logs or not _pod_ready(pod)):
                    tracker.logs[part.label] = log
        problem = container_problem(pod, restarts_before=tracker.restarts_before(pod))
        if problem is not None:
            container, what = problem
            log = latest_log(tracker.pods_dir, pod, container) if tracker.pods_dir else None
            tail = _tail(log)
            raise InstallError(
                f"{part.label}: container {container} of Pod "
                f"{part.namespace}/{pod['metadata']['name']} {what}"
                + (f"\nlog: {log}" if log else "")
                + (f"\n{tail}" if tail else "")
            )
    ready_pods = sum(1 for p in pods if _pod_ready(p))
    if part.runtime is not None:
        try:
            runtime = await kube.get(RUNTIMES, part.runtime, part.namespace)
        except NotFound:
            return f"waiting for {part.label}: not created yet"
        wanted = int((runtime.get("spec") or {}).get("replicas") or 1)
        ready = int((runtime.get("status") or {}).get("readyReplicas") or 0)
        ready_runtimes[part.runtime] = ready
        if ready >= wanted:
            return None
        hint = ""
        if not pods:
            hint = " (no Pods yet: the control plane creates them)"
        return f"waiting for {part.label}: {ready}/{wanted} ready{hint}"
    if ready_pods == 0:
        return f"waiting for the {part.label}: 0/{max(len(pods), 1)} Pods ready"
    if part.label == "gateway" and not await _gateway_endpoint_ready(kube):
        return "waiting for the gateway: Service runtime-gateway has no ready endpoint yet"
    return None


async def _gateway_endpoint_ready(kube: Kube) -> bool:
    slices, _ = await kube.list(
        ENDPOINTSLICES,
        SYSTEM_NAMESPACE,
        label_selector=f"kubernetes.io/service-name={GATEWAY_SERVICE}",
    )
    return any(
        (endpoint.get("conditions") or {}).get("ready")
        for s in slices
        for endpoint in s.get("endpoints") or []
    )
