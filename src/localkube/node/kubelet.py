"""The node: registers Node ``localkube``, binds Pods to it, and runs them as processes.

Like the kubelet (plus the scheduler's binding step, since there is one node), it watches
Pods through the API: a Pod without ``spec.nodeName`` is bound to this node (``binding``
subresource, or an update of ``spec.nodeName`` where the server has no binding
subresource); a Pod bound here gets a :class:`~localkube.node.podworker.PodWorker` with
its own 127.0.x.y address. Heartbeat: the Node's Lease in ``kube-node-lease`` is renewed
every 10 s and the Node's ``Ready`` condition refreshed every 30 s.

Shutdown (cancellation, ``krt dev down``): every Pod's containers get SIGTERM, then SIGKILL
after ``NodeConfig.shutdown_grace`` seconds; Pod objects stay (the next start resumes them,
see :mod:`localkube.node.podworker`). Workers run shielded so that this graceful stop
happens even though the whole tree is being cancelled; it is bounded by the grace period.
At start the node kills process groups a crashed previous node left behind (pid files).
"""

from __future__ import annotations

import logging
import os
import platform
import time
from datetime import UTC, datetime
from typing import Any

import trio

from localkube.controllers.events import EventRecorder
from localkube.controllers.informer import Informer, KeyedQueue, ObjectKey
from localkube.controllers.kubeapi import ApiStatusError, Kube, collection_path
from localkube.node.config import NodeConfig
from localkube.node.ipam import AddressesExhaustedError, allocate_pod_ip, listening_addresses
from localkube.node.layout import pods_dir
from localkube.node.podstatus import rfc3339
from localkube.node.podworker import NodeServices, PodWorker
from localkube.node.process import kill_leftover_groups

log = logging.getLogger(__name__)

#: Seconds between Node Lease renewals (the Node status is refreshed every third one).
HEARTBEAT_SECONDS = 10.0
LEASE_DURATION_SECONDS = 40


def node_object(config: NodeConfig, now: float) -> dict[str, Any]:
    """Return the Node object (with status) this node registers."""
    ts = rfc3339(now)
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "localkube node is posting ready status",
        "lastHeartbeatTime": ts,
        "lastTransitionTime": ts,
    }
    pressure = [
        {
            "type": t,
            "status": "False",
            "reason": f"KubeletHas{r}",
            "message": "",
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
        }
        for t, r in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    capacity = {"cpu": str(os.cpu_count() or 1), "memory": "8Gi", "pods": "1000"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": config.node_name,
            "labels": {
                "kubernetes.io/hostname": config.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": platform.machine(),
                "node-role.kubernetes.io/control-plane": "",
            },
        },
        "spec": {"podCIDR": "127.0.0.0/17", "podCIDRs": ["127.0.0.0/17"]},
        "status": {
            "conditions": pressure + [ready],
            "addresses": [
                {"type": "InternalIP", "address": config.host_ip},
                {"type": "Hostname", "address": config.node_name},
            ],
            "capacity": capacity,
            "allocatable": capacity,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "architecture": platform.machine(),
                "operatingSystem": "linux",
                "osImage": platform.platform(),
                "kernelVersion": platform.release(),
                "kubeletVersion": "v1.32.0-localkube",
                "kubeProxyVersion": "v1.32.0-localkube",
                "containerRuntimeVersion": "localkube://processes",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


async def register_node(kube: Kube, config: NodeConfig) -> None:
    """Create the Node object if needed and write its status (Ready).

    Raises:
        ApiStatusError: if the API server rejects the Node.
    """
    path = collection_path("v1", "nodes")
    desired = node_object(config, time.time())
    current = await kube.get(f"{path}/{config.node_name}")
    if current is None:
        try:
            current = await kube.create(path, desired)
        except ApiStatusError as exc:
            if exc.code != 409:
                raise
            current = await kube.get(f"{path}/{config.node_name}")
            assert current is not None
    body = dict(current)
    body["status"] = desired["status"]
    await kube.replace(f"{path}/{config.node_name}/status", body)


def _microtime(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def renew_lease(kube: Kube, config: NodeConfig) -> None:
    """Create or renew the Node's Lease in ``kube-node-lease`` (the kubelet heartbeat).

    Raises:
        ApiStatusError: if the Lease cannot be written (409: retried next beat).
    """
    path = collection_path("coordination.k8s.io/v1", "leases", "kube-node-lease")
    now = _microtime(time.time())
    current = await kube.get(f"{path}/{config.node_name}")
    if current is None:
        await kube.create(
            path,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": config.node_name},
                "spec": {
                    "holderIdentity": config.node_name,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "renewTime": now,
                },
            },
        )
        return
    body = dict(current)
    body["spec"] = {
        **(current.get("spec") or {}),
        "holderIdentity": config.node_name,
        "renewTime": now,
    }
    await kube.replace(f"{path}/{config.node_name}", body)


class Kubelet:
    """The Pod runner of one node. Use :func:`serve_node`."""

    def __init__(self, kube: Kube, config: NodeConfig) -> None:
        self.kube = kube
        self.config = config
        self.pods = Informer(kube, collection_path("v1", "pods"), name="node/pods")
        self.services = Informer(kube, collection_path("v1", "services"), name="node/services")
        self.binder: KeyedQueue[ObjectKey] = KeyedQueue(self._bind, name="node/bind")
        self.workers: dict[str, PodWorker] = {}
        self.finished: set[str] = set()
        self.used_ips: set[str] = set()
        #: Pods (uid -> key) bound here that wait for a free address.
        self.waiting_for_ip: dict[str, ObjectKey] = {}
        self._stopping = False
        self._nursery: trio.Nursery | None = None
        self.events = EventRecorder(kube, config.node_name)
        self.services_for_pods = NodeServices(
            kube=kube,
            config=config,
            services_in=self._services_in,
            release_ip=self._release_ip,
            events=self.events,
        )

    def _services_in(self, namespace: str) -> list[dict[str, Any]]:
        return [s for (ns, _), s in self.services.cache.items() if ns == namespace]

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        uid = meta.get("uid", "")
        spec = pod.get("spec", {})
        worker = self.workers.get(uid)
        if etype == "DELETED":
            self.waiting_for_ip.pop(uid, None)
            if worker is not None:
                worker.deleted()
            self._retry_waiting()  # its address may be free now
            return
        if worker is not None:
            worker.update(pod)
            return
        if uid in self.finished:
            return
        node_name = spec.get("nodeName", "")
        if not node_name:
            if not meta.get("deletionTimestamp"):
                self.binder.add((meta.get("namespace", ""), meta.get("name", "")))
            return
        if node_name != self.config.node_name:
            return
        self._start_worker(pod)

    def _start_worker(self, pod: dict[str, Any]) -> None:
        assert self._nursery is not None
        if self._stopping:
            return
        meta = pod["metadata"]
        old_ip = (pod.get("status") or {}).get("podIP", "")
        if old_ip and old_ip not in self.used_ips:
            ip = old_ip
        else:
            taken = set(self.used_ips)
            taken.update((p.get("status") or {}).get("podIP", "") for p in self.pods.cache.values())
            taken.update(listening_addresses())  # another dev cluster's Pods and Services
            try:
                ip = allocate_pod_ip(taken)
            except AddressesExhaustedError as exc:
                self._wait_for_ip(pod, str(exc))
                return
        self.waiting_for_ip.pop(meta["uid"], None)
        self.used_ips.add(ip)
        worker = PodWorker(self.services_for_pods, pod, ip)
        self.workers[pod["metadata"]["uid"]] = worker
        self._nursery.start_soon(self._run_worker, worker)
        worker.update(pod)

    def _wait_for_ip(self, pod: dict[str, Any], reason: str) -> None:
        """No free address: the Pod stays Pending (like a CNI out of addresses) until a
        Pod's address is released; a waiting Pod being deleted is deleted at once (it
        has no processes)."""
        assert self._nursery is not None
        meta = pod["metadata"]
        if meta["uid"] not in self.waiting_for_ip:
            log.warning(
                "pod %s/%s waits for an address: %s", meta["namespace"], meta["name"], reason
            )
            self.events.record(
                pod,
                "Warning",
                "FailedCreatePodSandBox",
                f"Failed to create pod sandbox: no Pod address available ({reason})",
            )
        self.waiting_for_ip[meta["uid"]] = (meta["namespace"], meta["name"])
        if meta.get("deletionTimestamp"):
            self._nursery.start_soon(self._delete_unstarted, pod)

    async def _delete_unstarted(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        path = collection_path("v1", "pods", meta["namespace"]) + f"/{meta['name']}"
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            await self.kube.delete(path, body=body)
        except ApiStatusError as exc:
            if exc.code not in (404, 409):
                log.warning("pod %s/%s: delete failed: %s", meta["namespace"], meta["name"], exc)

    def _release_ip(self, ip: str) -> None:
        """A worker ended: free its address and give it to a Pod waiting for one."""
        self.used_ips.discard(ip)
        self._retry_waiting()

    def _retry_waiting(self) -> None:
        """Start Pods waiting for an address, oldest first, while addresses are free."""
        if self._stopping:
            return
        for uid, key in list(self.waiting_for_ip.items()):
            pod = self.pods.cache.get(key)
            if pod is None or pod["metadata"].get("uid") != uid:
                self.waiting_for_ip.pop(uid, None)
                continue
            self._start_worker(pod)
            if uid not in self.workers:
                return  # still none free

    async def _run_worker(self, worker: PodWorker) -> None:
        # shielded: at node shutdown the worker stops its containers gracefully and is
        # cancelled explicitly by run() once the grace period is over
        with trio.CancelScope(shield=True) as scope:
            worker.scope = scope
            try:
                await worker.run()
            except Exception:
                log.exception("pod %s/%s: worker failed", worker.namespace, worker.name)
            finally:
                self.workers.pop(worker.uid, None)
                if not worker.stopping_for_shutdown:
                    self.finished.add(worker.uid)

    async def _bind(self, key: ObjectKey) -> None:
        pod = self.pods.cache.get(key)
        if pod is None or pod.get("spec", {}).get("nodeName"):
            return
        ns, name = key
        path = collection_path("v1", "pods", ns) + f"/{name}"
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": pod["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.config.node_name},
        }
        try:
            await self.kube.create(path + "/binding", binding)
        except ApiStatusError as exc:
            if exc.code not in (404, 405):
                raise
            # no binding subresource on this server: set spec.nodeName (conditional update)
            body = dict(pod)
            body["spec"] = dict(pod["spec"], nodeName=self.config.node_name)
            await self.kube.replace(path, body)
        self.events.record(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {self.config.node_name}",
            component="default-scheduler",
        )

    async def _heartbeat(self) -> None:
        beat = 0
        while True:
            try:
                await renew_lease(self.kube, self.config)
                if beat and beat % 3 == 0:
                    await register_node(self.kube, self.config)
            except Exception as exc:  # noqa: BLE001 - the next beat retries
                log.warning("node heartbeat failed: %s", exc)
            beat += 1
            await trio.sleep(HEARTBEAT_SECONDS)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, start informers, start Pods; never returns unless cancelled."""
        await trio.to_thread.run_sync(kill_leftover_groups, pods_dir(self.config.state_dir))
        await register_node(self.kube, self.config)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await nursery.start(self.events.run)
                await nursery.start(self.services.run)
                self.pods.add_handler(self._on_pod)
                await nursery.start(self.binder.run)
                await nursery.start(self.pods.run)
                nursery.start_soon(self._heartbeat)
                task_status.started()
                await trio.sleep_forever()
            finally:
                await self._shutdown()

    async def _shutdown(self) -> None:
        self._stopping = True
        with trio.CancelScope(shield=True):
            workers = list(self.workers.values())
            for w in workers:
                w.stop_for_shutdown(self.config.shutdown_grace)
            with trio.move_on_after(self.config.shutdown_grace + 2.0):
                for w in workers:
                    await w.done.wait()
            for w in workers:
                if w.scope is not None:
                    w.scope.cancel()


async def serve_node(
    kube: Kube,
    config: NodeConfig,
    *,
    task_status: trio.TaskStatus[Kubelet] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the node until cancelled.

    Args:
        kube: API client (an identity allowed to manage Nodes, Pods and their status).
        config: node configuration.
        task_status: started with the :class:`Kubelet` once the Pod list is synced.

    Raises:
        ApiStatusError: if the Node cannot be registered.
    """
    kubelet = Kubelet(kube, config)

    async def _run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await kubelet.run(task_status=task_status)

    async with trio.open_nursery() as nursery:
        await nursery.start(_run)
        task_status.started(kubelet)
