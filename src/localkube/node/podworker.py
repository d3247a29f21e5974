"""One Pod on the node: its containers, its status writes, its graceful deletion.

A :class:`PodWorker` lives from the moment the Pod is bound to the node until its processes
are gone. It owns the Pod's address, writes ``status`` through the status subresource with
conditional updates (PUT with ``resourceVersion``, re-read on 409), and never drops
conditions it does not own (other components' readiness gates).

Deletion: when the Pod gets a ``deletionTimestamp`` the worker sends SIGTERM to every
container's process group, waits ``deletionGracePeriodSeconds`` (else the spec's
``terminationGracePeriodSeconds``, default 30), sends SIGKILL, then deletes the Pod object
with ``gracePeriodSeconds=0`` and a uid precondition, as the kubelet does. If the object
disappears without a graceful phase, the processes get the same treatment.

Node restart: see :mod:`localkube.node.recovery`.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import trio

from localkube.controllers.events import EventRecorder
from localkube.controllers.kubeapi import ApiStatusError, Kube, collection_path
from localkube.node.backoff import CrashBackoff
from localkube.node.config import NodeConfig
from localkube.node.container import ContainerRunner
from localkube.node.env import (
    ContainerConfigError,
    container_env,
    referenced_objects,
    service_link_env,
)
from localkube.node.layout import PodPaths
from localkube.node.podstatus import ContainerObservation, pod_status
from localkube.node.recovery import parse_time, restore_init_observations, restore_observations
from localkube.node.volumes import VolumeError, prepare_volumes, write_service_account

log = logging.getLogger(__name__)


@dataclass
class NodeServices:
    """What a Pod worker needs from the node.

    Attributes:
        kube: the API client. config: node configuration.
        services_in: ``services_in(namespace)`` lists that namespace's Services (cache).
        release_ip: called with the Pod's IP when its worker ends.
        events: where Pod Events go (None: no Events).
    """

    kube: Kube
    config: NodeConfig
    services_in: Callable[[str], list[dict[str, Any]]]
    release_ip: Callable[[str], None]
    events: EventRecorder | None = None


class PodWorker:
    """Runs one Pod bound to this node.

    Args:
        node: node services. pod: the Pod as first seen. pod_ip: its allocated address.
    """

    def __init__(self, node: NodeServices, pod: dict[str, Any], pod_ip: str) -> None:
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.namespace = meta["namespace"]
        self.name = meta["name"]
        self.uid = meta["uid"]
        self.ip = pod_ip
        self.paths = PodPaths.for_pod(node.config.state_dir, self.namespace, self.name, self.uid)
        self.path = collection_path("v1", "pods", self.namespace) + f"/{self.name}"
        status = pod.get("status") or {}
        self.start_time = parse_time(status.get("startTime")) or time.time()
        self.observations = restore_observations(pod)
        self.init_observations = restore_init_observations(pod, self.observations)
        self.runners: list[ContainerRunner] = []
        self._dirty = trio.Event()
        self._stop = trio.Event()
        self._stop_grace = 30.0
        self._delete_object = False
        self._token_expiry = 0.0
        self._token_lock = trio.Lock()
        self._shutdown = False
        self._final = False
        self.scope: trio.CancelScope | None = None
        self.done = trio.Event()

    # --- inputs -------------------------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        """A newer version of the Pod object arrived (informer event)."""
        if pod["metadata"].get("uid") != self.uid:
            return
        self.pod = pod
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and not self._stop.is_set():
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
            self._request_stop(float(grace), delete_object=True)
        self.mark_dirty()

    def deleted(self) -> None:
        """The Pod object is gone (deleted without a graceful phase)."""
        grace = float(self.pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))
        self._request_stop(grace, delete_object=False)

    def stop_for_shutdown(self, grace: float) -> None:
        """The node stops: stop the containers, keep the Pod object (resumed at next start)."""
        if not self._stop.is_set():
            self._shutdown = True
        self._request_stop(grace, delete_object=False)

    @property
    def stopping_for_shutdown(self) -> bool:
        """Whether the worker stops because the node stops (the Pod object stays)."""
        return self._shutdown

    def _request_stop(self, grace: float, *, delete_object: bool) -> None:
        if self._stop.is_set():
            return
        self._stop_grace = grace
        self._delete_object = delete_object
        self._stop.set()

    def mark_dirty(self) -> None:
        """Schedule a status write."""
        self._dirty.set()

    # --- status ---------------------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        """The Pod as containers see it: with this node's podIP/hostIP filled in."""
        pod = dict(self.pod)
        status = dict(pod.get("status") or {})
        status.update(
            podIP=self.ip,
            podIPs=[{"ip": self.ip}],
            hostIP=self.node.config.host_ip,
            hostIPs=[{"ip": self.node.config.host_ip}],
        )
        pod["status"] = status
        spec = dict(pod.get("spec") or {})
        spec.setdefault("nodeName", self.node.config.node_name)
        pod["spec"] = spec
        return pod

    async def write_status(self) -> None:
        """Write the computed status if it changed (conditional update, re-read on 409)."""
        for _ in range(10):
            pod = self.pod
            new = pod_status(
                pod,
                self.observations,
                init_observations=self.init_observations,
                pod_ip=self.ip,
                host_ip=self.node.config.host_ip,
                start_time=self.start_time,
                now=time.time(),
                final=self._final,
            )
            if new == (pod.get("status") or {}):
                return
            body = dict(pod)
            body["status"] = new
            try:
                written = await self.node.kube.replace(self.path + "/status", body)
                # An informer event may have delivered a newer Pod (e.g. a readiness-gate
                # condition another component patched) while the write was in flight.
                if _revision(written) >= _revision(self.pod):
                    self.pod = written
                return
            except ApiStatusError as exc:
                if exc.code == 404:
                    return
                if exc.code != 409:
                    raise
            fresh = await self.node.kube.get(self.path)
            if fresh is None or fresh["metadata"].get("uid") != self.uid:
                return
            self.pod = fresh

    async def _status_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            try:
                await self.write_status()
            except Exception as exc:  # noqa: BLE001 - keep the Pod running; retry later
                log.warning("pod %s/%s: status write failed: %s", self.namespace, self.name, exc)
                await trio.sleep(0.5)
                self.mark_dirty()

    # --- configuration ------------------------------------------------------------------

    async def _ensure_token(self) -> None:
        async with self._token_lock:
            await self._refresh_token()

    async def _refresh_token(self) -> None:
        spec = self.pod.get("spec", {})
        if spec.get("automountServiceAccountToken") is False:
            return
        if time.time() < self._token_expiry:
            return
        sa = spec.get("serviceAccountName") or "default"
        lifetime = self.node.config.token_seconds
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [],
                "expirationSeconds": lifetime,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.name,
                    "uid": self.uid,
                },
            },
        }
        path = collection_path("v1", "serviceaccounts", self.namespace) + f"/{sa}/token"
        try:
            answer = await self.node.kube.create(path, body)
        except ApiStatusError as exc:
            raise ContainerConfigError(
                f'cannot get a token for serviceaccount "{sa}" in namespace "{self.namespace}": '
                f"{exc.code} {exc.message}"
            ) from None
        token = str((answer.get("status") or {}).get("token", ""))
        if not token:
            raise ContainerConfigError(
                f'the TokenRequest for serviceaccount "{sa}" returned no token'
            )
        await trio.to_thread.run_sync(
            lambda: write_service_account(
                self.paths, token=token, namespace=self.namespace, ca_pem=self.node.config.ca_pem
            )
        )
        # refresh at 80% of the lifetime, as the kubelet does
        self._token_expiry = time.time() + 0.8 * lifetime

    async def _fetch(self, plural: str, names: set[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(names):
            obj = await self.node.kube.get(
                collection_path("v1", plural, self.namespace) + f"/{name}"
            )
            if obj is not None:
                out[name] = obj
        return out

    async def env_for(self, container: Mapping[str, Any]) -> dict[str, str]:
        """Prepare token and volumes, then return the container's environment.

        Raises:
            ContainerConfigError: missing ServiceAccount/Secret/ConfigMap or bad env entry.
            VolumeError: an unsupported or unresolvable volume.
        """
        await self._ensure_token()
        pod = self.view()
        secret_names, cm_names = referenced_objects(pod)
        secrets = await self._fetch("secrets", secret_names)
        configmaps = await self._fetch("configmaps", cm_names)
        await trio.to_thread.run_sync(
            lambda: prepare_volumes(self.paths, pod, secrets=secrets, configmaps=configmaps)
        )
        base = self.node.config.base_env()
        if pod.get("spec", {}).get("enableServiceLinks", True):
            base.update(service_link_env(self.node.services_in(self.namespace)))
        base.update(
            HOME=str(self.paths.workspace),
            HOSTNAME=self.name,
            KRT_POD_IP=self.ip,
            KRT_POD_ROOT=str(self.paths.root),
            KRT_POD_WORKSPACE=str(self.paths.workspace),
        )
        if pod.get("spec", {}).get("automountServiceAccountToken") is not False:
            base["KRT_SERVICEACCOUNT_DIR"] = str(self.paths.sa_dir)
        return container_env(pod, container, secrets=secrets, configmaps=configmaps, base=base)

    async def _token_refresher(self) -> None:
        while True:
            await trio.sleep(
                max(1.0, self._token_expiry - time.time()) if self._token_expiry else 5.0
            )
            if self._token_expiry and time.time() >= self._token_expiry:
                try:
                    await self._ensure_token()
                except ContainerConfigError as exc:
                    log.warning("pod %s/%s: %s", self.namespace, self.name, exc)

    async def _volume_refresher(self) -> None:
        """Keep the Pod's secret and configMap volumes current while it runs.

        As the kubelet's periodic sync: every ``volume_sync_period`` seconds the objects
        the Pod reads are fetched again, and when one changed (its resourceVersion) the
        volumes are projected again: each file replaced atomically, keys that are gone
        removed (:func:`localkube.node.volumes.prepare_volumes`). A process reading a
        mounted certificate sees the renewed one without a restart. An object that cannot
        be read or projected now is logged, the files stay as they are, and the next look
        tries again.
        """
        period = self.node.config.volume_sync_period
        projected: dict[str, str] | None = None
        reported = ""  # the last failure logged: a lasting one is logged once
        while True:
            await trio.sleep(period)
            pod = self.view()
            if not any("secret" in v or "configMap" in v for v in _volumes(pod)):
                continue
            secret_names, cm_names = referenced_objects(pod)
            try:
                secrets = await self._fetch("secrets", secret_names)
                configmaps = await self._fetch("configmaps", cm_names)
            except (ApiStatusError, httpx.TransportError) as exc:
                log.info("pod %s/%s: volume sync skipped: %s", self.namespace, self.name, exc)
                continue
            versions = {
                f"{kind}/{name}": str(obj.get("metadata", {}).get("resourceVersion", ""))
                for kind, objs in (("secret", secrets), ("configmap", configmaps))
                for name, obj in objs.items()
            }
            if versions == projected:
                continue
            try:
                await trio.to_thread.run_sync(
                    partial(
                        prepare_volumes, self.paths, pod, secrets=secrets, configmaps=configmaps
                    )
                )
            except (VolumeError, OSError) as exc:
                if str(exc) != reported:
                    log.warning(
                        "pod %s/%s: volumes not updated: %s", self.namespace, self.name, exc
                    )
                    reported = str(exc)
                continue
            projected, reported = versions, ""

    def _runner(
        self, container: Mapping[str, Any], obs: ContainerObservation, policy: str, kind: str
    ) -> ContainerRunner:
        cfg = self.node.config
        runner = ContainerRunner(
            container,
            paths=self.paths,
            pod=self.view,
            images=cfg.images,
            restart_policy=policy,
            env_for=self.env_for,
            on_change=self.mark_dirty,
            observation=obs,
            backoff=CrashBackoff(cfg.backoff_initial, cfg.backoff_cap),
            record=self._recorder(container["name"], kind),
            log_limits=cfg.log_limits,
        )
        self.runners.append(runner)
        return runner

    async def _start_containers(self, nursery: trio.Nursery, policy: str) -> None:
        """Run the init containers one after the other (each must exit 0; they restart
        on failure unless the policy is Never), then start the containers."""
        spec = self.pod.get("spec", {})
        if self.observations and all(o.state == "terminated" for o in self.observations):
            return
        init_policy = "Never" if policy == "Never" else "OnFailure"
        for c, obs in zip(
            spec.get("initContainers", []) or [], self.init_observations, strict=True
        ):
            if self._stop.is_set():
                return
            await self._runner(c, obs, init_policy, "initContainers").run()
            if not obs.completed():
                return  # stopped, or failed for good (the Pod is Failed)
        for c, obs in zip(spec.get("containers", []), self.observations, strict=True):
            if self._stop.is_set():
                return
            if obs.state == "terminated":
                continue  # finished for good before a node restart
            if obs.reason == "PodInitializing":
                obs.reason = "ContainerCreating"
            nursery.start_soon(self._runner(c, obs, policy, "containers").run)

    def _recorder(
        self, container: str, kind: str = "containers"
    ) -> Callable[[str, str, str], None]:
        def record(etype: str, reason: str, message: str) -> None:
            if self.node.events is not None:
                self.node.events.record(
                    self.pod, etype, reason, message, field_path=f"spec.{kind}{{{container}}}"
                )

        return record

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the Pod until its processes are stopped (deletion or node shutdown)."""
        try:
            await self._run()
        finally:
            self.node.release_ip(self.ip)
            self.done.set()

    async def _run(self) -> None:
        spec = self.pod.get("spec", {})
        policy = spec.get("restartPolicy", "Always")
        await trio.Path(self.paths.workspace).mkdir(parents=True, exist_ok=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._status_loop)
            nursery.start_soon(self._token_refresher)
            nursery.start_soon(self._volume_refresher)
            self.mark_dirty()
            nursery.start_soon(self._start_containers, nursery, policy)
            await self._stop.wait()
            for r in self.runners:
                r.request_stop(self._stop_grace)
            for r in self.runners:
                await r.finished.wait()
            if not self._shutdown:
                self._final = True  # stopped for good: the phase becomes terminal
                with trio.move_on_after(5):
                    try:
                        await self.write_status()
                    except Exception as exc:  # noqa: BLE001 - deletion goes on regardless
                        log.warning("pod %s/%s: final status: %s", self.namespace, self.name, exc)
            nursery.cancel_scope.cancel()
        if self._delete_object:
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid},
            }
            try:
                await self.node.kube.delete(self.path, body=body)
            except ApiStatusError as exc:
                if exc.code != 409:  # 409: a newer Pod of the same name; not ours
                    raise
        if not self._shutdown:
            await trio.to_thread.run_sync(
                lambda: shutil.rmtree(self.paths.root, ignore_errors=True)
            )


def _revision(obj: dict[str, Any]) -> int:
    """The object's resourceVersion as a number (localkube's revisions are integers)."""
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _volumes(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("volumes") or [])
