"""The chaos suite's cluster: localkube (restartable API server) with kruntimes installed.

:func:`start_cluster` starts ``localkube_runner.py`` in its own session, installs kruntimes
with ``krt dev up --detach`` on it (the same install as the quick start), scales the python
Runtime to :data:`PYTHON_REPLICAS` Pods and creates the caller identity the load uses: the
ServiceAccount :data:`CALLER` with a Role that may ``get`` Runs (what the gateway's
SelfSubjectAccessReview asks). :func:`stop_cluster` runs ``krt dev down`` and reports any
process of the cluster still alive.

Processes are found the way the node marks them: every container run carries
``KRT_CONTAINER_RUN=<pod-dir>/<container>/<run>`` in its environment (inherited by
descendants), and ``run/<container>.pid`` in the Pod root records the current run's mark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from krt.kube.client import Kube, connect
from krt.kube.errors import Conflict, NotFound
from krt.kube.resources import (
    DEPLOYMENTS,
    LEASES,
    PODS,
    ROLEBINDINGS,
    ROLES,
    RUNTIMES,
    SERVICEACCOUNTS,
    ResourceRef,
)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KRT = str(BIN / "krt")
RUNNER = Path(__file__).with_name("localkube_runner.py")
#: Where the Runtimes and Runs live (the dev install's Runtimes namespace).
NS = "default"
SYSTEM_NS = "kruntimes-system"
#: Runtime Pods of the python Runtime during the suite (the issue asks for 2-3).
PYTHON_REPLICAS = 3
#: The invoking identity: may get Runs in NS, nothing else.
CALLER = "chaos-caller"
CONTROLPLANE_DEPLOYMENT = "krt-kruntimes-controlplane"
CONTROLPLANE_LEASE = "krt-kruntimes-controlplane"
GATEWAY_SELECTOR = "app.kubernetes.io/component=gateway"
CONTROLPLANE_SELECTOR = "app.kubernetes.io/component=controlplane"
PYTHON_SELECTOR = "kruntimes.io/runtime=python"
SECRETS = ResourceRef("", "v1", "secrets", True, "Secret")
MARK_ENV = b"KRT_CONTAINER_RUN="


@dataclass(frozen=True)
class ChaosCluster:
    """A running chaos cluster.

    Attributes:
        state_dir: localkube's state directory (Pods under ``node/pods``).
        kubeconfig: the admin kubeconfig.
        gateway_url: ``https://<ClusterIP>:443`` of the runtime-gateway Service.
        gateway_ca: the gateway CA certificate (PEM file).
        runner_pid: the localkube runner process (SIGUSR1 restarts its API server).
    """

    state_dir: Path
    kubeconfig: Path
    gateway_url: str
    gateway_ca: Path
    runner_pid: int

    @property
    def pods_dir(self) -> Path:
        """The node's Pod roots."""
        return self.state_dir / "node" / "pods"

    @property
    def ledger_dir(self) -> Path:
        """Where task Runs append one line per execution (see ``workload.py``)."""
        return self.state_dir / "chaos-ledger"

    async def connect(self) -> Kube:
        """A new admin client (use as ``async with``)."""
        return await connect(kubeconfig=self.kubeconfig)

    def pod_root(self, pod: dict[str, Any]) -> Path:
        """The Pod root of ``pod`` on the node."""
        meta = pod["metadata"]
        return self.pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def invoke_url(self, endpoint_url: str) -> str:
        """``status.endpoint.url`` with its host replaced by the reachable gateway address."""
        _, _, rest = endpoint_url.partition("://")
        _, _, path = rest.partition("/")
        return f"{self.gateway_url}/{path}"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("KRT_", "KUBECONFIG"))}


def krt(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the ``krt`` CLI with an environment free of the caller's KRT_/KUBECONFIG."""
    return subprocess.run(
        [KRT, *args],
        env=_clean_env(),
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


def start_cluster(state_dir: Path, *, python_replicas: int = PYTHON_REPLICAS) -> ChaosCluster:
    """Start localkube with kruntimes on ``state_dir`` and wait until everything is ready.

    Raises:
        RuntimeError: the runner or the install failed (with their output).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    log = (state_dir / "runner.log").open("ab")
    with log:
        child = subprocess.Popen(
            [sys.executable, str(RUNNER), "--state-dir", str(state_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=state_dir,
            env=_clean_env(),
        )
    deadline = time.monotonic() + 30
    while True:
        if child.poll() is not None:
            raise RuntimeError(f"localkube runner exited: {(state_dir / 'runner.log').read_text()}")
        try:
            ready = json.loads((state_dir / "cluster.json").read_text())
            if ready.get("pid") == child.pid:
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            child.kill()
            raise RuntimeError("localkube runner did not serve within 30 s")
        time.sleep(0.1)
    up = krt("dev", "up", "--detach", "--state-dir", str(state_dir), "--timeout", "90")
    if up.returncode != 0:
        raise RuntimeError(f"krt dev up failed:\n{up.stdout}\n{up.stderr}")
    env = dict(
        line.removeprefix("export ").split("=", 1)
        for line in (state_dir / "env").read_text().splitlines()
        if "=" in line
    )
    cluster = ChaosCluster(
        state_dir=state_dir,
        kubeconfig=Path(env["KUBECONFIG"]),
        gateway_url=env["KRT_GATEWAY_URL"],
        gateway_ca=state_dir / "kruntimes" / "gateway-ca" / "ca.crt",
        runner_pid=child.pid,
    )
    trio.run(_prepare, cluster, python_replicas)
    return cluster


async def _prepare(cluster: ChaosCluster, python_replicas: int) -> None:
    async with await cluster.connect() as kube:
        await kube.patch(RUNTIMES, "python", NS, {"spec": {"replicas": python_replicas}})
        # the control plane is scheduled once; let the bash Runtime go so the python Pods
        # have the machine (the suite uses python only)
        await kube.patch(RUNTIMES, "bash", NS, {"spec": {"replicas": 0}})
        await create_caller(kube)
        with trio.fail_after(60):
            while True:
                if await ready_python_pods(kube) >= python_replicas:
                    break
                await trio.sleep(0.2)


async def create_caller(kube: Kube) -> None:
    """The ServiceAccount :data:`CALLER`, allowed to get Runs in :data:`NS` (idempotent)."""
    objects: list[tuple[ResourceRef, dict[str, Any]]] = [
        (SERVICEACCOUNTS, {"metadata": {"name": CALLER, "namespace": NS}}),
        (
            ROLES,
            {
                "metadata": {"name": CALLER, "namespace": NS},
                "rules": [{"apiGroups": ["kruntimes.io"], "resources": ["runs"], "verbs": ["get"]}],
            },
        ),
        (
            ROLEBINDINGS,
            {
                "metadata": {"name": CALLER, "namespace": NS},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": CALLER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": CALLER, "namespace": NS}],
            },
        ),
    ]
    for ref, obj in objects:
        body = {"apiVersion": ref.api_version, "kind": ref.kind, **obj}
        try:
            await kube.create(ref, body)
        except Conflict:
            pass


async def caller_token(kube: Kube, *, bound_secret: str | None = None) -> str:
    """A TokenRequest token for :data:`CALLER` (1 h), bound to ``bound_secret`` if given.

    A token bound to a Secret stops being valid the moment the Secret is deleted: the
    suite's way to make a token expire mid-load without waiting the API's 600 s minimum.
    """
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_secret is not None:
        secret = await kube.create(
            SECRETS,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": bound_secret, "namespace": NS},
                "data": {},
            },
        )
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": bound_secret,
            "uid": secret["metadata"]["uid"],
        }
    answer = await kube.request(
        "POST",
        SERVICEACCOUNTS,
        namespace=NS,
        name=CALLER,
        subresource="token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(answer["status"]["token"])


def pod_ready(pod: dict[str, Any]) -> bool:
    """Ready and not deleting."""
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def ready_python_pods(kube: Kube) -> int:
    """How many python Runtime Pods are Ready and not deleting."""
    pods, _ = await kube.list(PODS, NS, label_selector=PYTHON_SELECTOR)
    return sum(1 for p in pods if pod_ready(p))


async def python_pods(kube: Kube) -> list[dict[str, Any]]:
    """The python Runtime Pods that are Ready and not deleting, by name."""
    pods, _ = await kube.list(PODS, NS, label_selector=PYTHON_SELECTOR)
    return sorted((p for p in pods if pod_ready(p)), key=lambda p: p["metadata"]["name"])


async def system_pod(kube: Kube, selector: str, name_prefix: str = "") -> dict[str, Any]:
    """The first Ready, non-deleting Pod of a kruntimes-system component."""
    pods, _ = await kube.list(PODS, SYSTEM_NS, label_selector=selector)
    ready = [p for p in pods if pod_ready(p) and p["metadata"]["name"].startswith(name_prefix)]
    if not ready:
        raise LookupError(f"no Ready Pod for {selector}")
    return sorted(ready, key=lambda p: p["metadata"]["name"])[0]


async def controlplane_leader(kube: Kube) -> str:
    """The holder identity of the control plane's Lease ('' when none)."""
    try:
        lease = await kube.get(LEASES, CONTROLPLANE_LEASE, SYSTEM_NS)
    except NotFound:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def scale_controlplane(kube: Kube, replicas: int) -> None:
    """Set the control plane Deployment's replicas."""
    await kube.patch(
        DEPLOYMENTS, CONTROLPLANE_DEPLOYMENT, SYSTEM_NS, {"spec": {"replicas": replicas}}
    )


def container_record(pod_root: Path, container: str) -> dict[str, Any] | None:
    """The node's pid record of ``container``'s current run (pid, pgid, start_ticks, mark)."""
    try:
        raw = json.loads((pod_root / "run" / f"{container}.pid").read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def signal_container(pod_root: Path, container: str, signum: signal.Signals) -> int:
    """Send ``signum`` to the process group of ``container``'s current run; return the pgid.

    Raises:
        LookupError: no pid record (the container is not running).
    """
    record = container_record(pod_root, container)
    if record is None:
        raise LookupError(f"no running {container} in {pod_root.name}")
    pgid = int(record["pgid"])
    os.killpg(pgid, signum)
    return pgid


def _proc_entries() -> Iterator[tuple[int, bytes, str, bytes]]:
    """``(pid, cmdline, cwd, environ)`` of every readable live process but this one."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rfind(")") + 2 :].startswith("Z"):
                continue
            cmdline = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        yield int(entry.name), cmdline, cwd, environ


def _mark(environ: bytes) -> str | None:
    for item in environ.split(b"\0"):
        if item.startswith(MARK_ENV):
            return item[len(MARK_ENV) :].decode(errors="replace")
    return None


def processes_of(state_dir: Path) -> list[str]:
    """Live processes of this cluster: cwd below ``state_dir`` or it in their command line."""
    root = str(state_dir)
    found = []
    for pid, cmdline, cwd, _ in _proc_entries():
        text = cmdline.replace(b"\0", b" ").decode(errors="replace")
        if cwd.startswith(root) or root in text:
            found.append(f"{pid}: {text[:160]}")
    return found


def current_marks(pods_dir: Path) -> set[str]:
    """Marks of the container runs the node currently records as running."""
    marks = set()
    for record_file in pods_dir.glob("*/run/*.pid"):
        try:
            raw = json.loads(record_file.read_text())
        except (OSError, ValueError):
            continue
        mark = raw.get("mark") if isinstance(raw, dict) else None
        if mark and Path(f"/proc/{raw.get('pid')}").exists():
            marks.add(str(mark))
    return marks


def orphan_processes(cluster: ChaosCluster) -> list[str]:
    """Processes of a container run that is no longer current (its container ended).

    A process belongs to this cluster when its cwd or command line is below the state
    directory or its mark names a Pod root of this node.
    """
    root = str(cluster.state_dir)
    pod_dirs = {p.name for p in cluster.pods_dir.iterdir()} if cluster.pods_dir.exists() else set()
    live = current_marks(cluster.pods_dir)
    orphans = []
    for pid, cmdline, cwd, environ in _proc_entries():
        mark = _mark(environ)
        if mark is None:
            continue
        text = cmdline.replace(b"\0", b" ").decode(errors="replace")
        ours = cwd.startswith(root) or root in text or mark.split("/", 1)[0] in pod_dirs
        if ours and mark not in live:
            orphans.append(f"{pid} ({mark}): {text[:120]}")
    return orphans


def stop_cluster(cluster: ChaosCluster) -> list[str]:
    """``krt dev down``; return the processes of the cluster still alive afterwards.

    Raises:
        RuntimeError: ``krt dev down`` failed (with its output).
    """
    down = krt("dev", "down", "--state-dir", str(cluster.state_dir), timeout=60)
    if down.returncode != 0:
        raise RuntimeError(f"krt dev down failed:\n{down.stdout}\n{down.stderr}")
    deadline = time.monotonic() + 5
    left = processes_of(cluster.state_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_of(cluster.state_dir)
    return left
