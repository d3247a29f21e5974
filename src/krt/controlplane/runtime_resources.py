"""The Runtime controller's desired objects and status, computed from a Runtime (pure).

Issue 5, Runtime controller. For each Runtime the controller keeps, in the Runtime's
namespace and owned by it (garbage-collected with it):

* a Deployment whose Pods run the template's containers plus the injected ``runtimed``
  sidecar (image ``spec.daemonImage`` or :data:`~krt.api.naming.DEFAULT_DAEMON_IMAGE`),
  carry the ``kruntimes.io/runtime`` label and the capacity annotation, have a readiness gate
  on ``kruntimes.io/RuntimedReady``, share the workspace emptyDir, and give runtimed its Pod
  name, namespace, UID and IP (downward API), the Runtime name, the Runtime Server address
  and its own port; the sidecar carries its own restricted securityContext, resources and
  liveness probe (:mod:`krt.controlplane.sidecar_settings`);
* a ClusterIP Service selecting those Pods (only Ready ones receive traffic) on runtimed's
  gRPC port, named by :func:`~krt.api.naming.runtime_service_name`;
* a ServiceAccount, Role and RoleBinding with the least permissions runtimed needs.

The installation's dataplane settings (:class:`RuntimedWiring`, the control plane's
``--gateway-url``, ``--gateway-ca-configmap`` and ``--peer-tls-secret``) reach every runtimed
sidecar as ``RUNTIMED_GATEWAY_URL``, ``RUNTIMED_GATEWAY_CA_FILE`` and
``RUNTIMED_PEER_TLS_DIR``, the last two backed by read-only ``optional: true`` ConfigMap and
Secret volumes from the Runtime's namespace (seed 000, Run Status API ``caBundle`` and
Runtime Gateway "Peer connections use mTLS"). They are part of the Pod template, so changing
one changes the Deployment's desired hash and rolls the Pods.

Each object carries :data:`~krt.api.naming.DESIRED_HASH_ANNOTATION`, a hash of the
desired form; the reconciler replaces an object whose hash differs (or whose replica count
drifted) and recreates a missing one, keeping ``kubectl rollout restart``'s annotation.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from krt.api.constants import (
    API_VERSION,
    CAPACITY_ANNOTATION,
    GROUP,
    RUN_PLURAL,
    RUNTIME_KIND,
    RUNTIME_LABEL,
    RUNTIMED_READY_POD_CONDITION,
)
from krt.api.endpoint import function_endpoint_url
from krt.api.errors import EndpointPathError
from krt.api.limits import DNS_SUBDOMAIN_MAX_CHARS, DNS_SUBDOMAIN_PATTERN
from krt.api.naming import (
    DEFAULT_DAEMON_IMAGE,
    DESIRED_HASH_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    RUNTIMED_CONTAINER_NAME,
    RUNTIMED_GRPC_PORT,
    RUNTIMED_GRPC_PORT_NAME,
    RUNTIMED_HTTP_PORT,
    RUNTIMED_HTTP_PORT_NAME,
    WORKSPACE_MOUNT_PATH,
    WORKSPACE_VOLUME_NAME,
    runtime_deployment_name,
    runtime_object_name,
    runtime_service_account_name,
    runtime_service_name,
)
from krt.api.runtime import Runtime
from krt.controlplane.sidecar_settings import (
    DEFAULT_RUNTIMED_RESOURCES,
    RUNTIMED_LIVENESS_PROBE,
    RUNTIMED_SECURITY_CONTEXT,
    RUNTIMED_TMP_MOUNT_PATH,
    RUNTIMED_TMP_SIZE_LIMIT,
    RUNTIMED_TMP_VOLUME,
    check_resources,
)

#: The permissions runtimed needs in its namespace (least privilege; issue 5):
#: read Runs and write their status and finalizers (seed 000 Cleanup and Finalization),
#: read Pods and EndpointSlices (ownership cache, peer routing), patch its Pod's status
#: (the RuntimedReady condition), keep its heartbeat Lease, and record Events.
#: SelfSubjectAccessReview needs no RBAC: every authenticated user may create it.
RUNTIMED_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [GROUP], "resources": [RUN_PLURAL], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [GROUP], "resources": [f"{RUN_PLURAL}/status"], "verbs": ["update", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["create", "get", "update"],
    },
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
)


#: Volume names and mount paths of the installation's material in runtimed (reserved: a
#: Runtime template may not declare volumes of these names).
GATEWAY_CA_VOLUME: Final = "kruntimes-gateway-ca"
GATEWAY_CA_MOUNT_PATH: Final = "/etc/kruntimes/gateway-ca"
#: The key of the gateway CA ConfigMap runtimed reads (``status.endpoint.caBundle``).
GATEWAY_CA_KEY: Final = "ca.crt"
PEER_TLS_VOLUME: Final = "kruntimes-peer-tls"
PEER_TLS_MOUNT_PATH: Final = "/etc/kruntimes/peer-tls"

_SUBDOMAIN: Final = re.compile(DNS_SUBDOMAIN_PATTERN)


@dataclass(frozen=True, slots=True)
class RuntimedWiring:
    """What the installation tells every runtimed sidecar (seed 000, Runtime Gateway).

    Every field is optional; an unset one adds nothing to the Pod template, so runtimed
    keeps its own default (the in-cluster gateway URL, no ``caBundle``, no peer TLS).

    Attributes:
        gateway_url: absolute http(s) base URL of the shared gateway, without query or
            fragment, published in ``status.endpoint.url`` (``RUNTIMED_GATEWAY_URL``).
        gateway_ca_configmap: name of a ConfigMap in each Runtime's namespace whose key
            ``ca.crt`` holds the gateway CA (PEM), published as ``status.endpoint.caBundle``
            (mounted at :data:`GATEWAY_CA_MOUNT_PATH`, ``RUNTIMED_GATEWAY_CA_FILE``).
        peer_tls_secret: name of a Secret in each Runtime's namespace with ``tls.crt``,
            ``tls.key`` and ``ca.crt`` for peer mTLS (mounted at
            :data:`PEER_TLS_MOUNT_PATH`, ``RUNTIMED_PEER_TLS_DIR``).
        resources: the sidecar container's ``resources`` (``{"requests": {...},
            "limits": {...}}``, Kubernetes quantities); default
            :data:`~krt.controlplane.sidecar_settings.DEFAULT_RUNTIMED_RESOURCES`, ``{}``
            for none.

    Raises:
        ValueError: ``gateway_url`` is not an absolute http(s) URL, a name is not a DNS
            subdomain of at most 253 characters, or ``resources`` is not a resources
            object of quantities (the message names the setting).
    """

    gateway_url: str | None = None
    gateway_ca_configmap: str | None = None
    peer_tls_secret: str | None = None
    resources: Mapping[str, Mapping[str, str]] = dataclasses.field(
        default_factory=lambda: check_resources(DEFAULT_RUNTIMED_RESOURCES)
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", check_resources(self.resources))
        if self.gateway_url is not None:
            try:
                function_endpoint_url(
                    self.gateway_url, "ns", "runtime", "00000000-0000-0000-0000-000000000000"
                )
            except EndpointPathError as exc:
                raise ValueError(f"gateway URL: {exc}") from None
        for setting, value in (
            ("gateway CA ConfigMap", self.gateway_ca_configmap),
            ("peer TLS Secret", self.peer_tls_secret),
        ):
            if value is not None and (
                len(value) > DNS_SUBDOMAIN_MAX_CHARS or not _SUBDOMAIN.match(value)
            ):
                raise ValueError(
                    f"{setting} name {value!r} is not a DNS subdomain (lower-case "
                    f"alphanumerics, '-' and '.', at most {DNS_SUBDOMAIN_MAX_CHARS} characters)"
                )


#: How often the kubelet probes runtimed's ``/healthz`` for readiness (seconds).
RUNTIMED_READINESS_PERIOD_SECONDS = 2


def desired_hash(obj: Mapping[str, Any]) -> str:
    """A stable hash of an object's desired form (16 hex digits), ignoring the hash itself."""
    clean = copy.deepcopy(dict(obj))
    annotations = clean.get("metadata", {}).get("annotations", {})
    annotations.pop(DESIRED_HASH_ANNOTATION, None)
    encoded = json.dumps(clean, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def _stamp(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("annotations", {})[DESIRED_HASH_ANNOTATION] = desired_hash(obj)
    return obj


def owner_reference(runtime: Runtime) -> dict[str, Any]:
    """The controller owner reference to ``runtime`` (children are garbage-collected with it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "name": runtime.metadata.name,
        "uid": runtime.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def runtime_labels(runtime: Runtime) -> dict[str, str]:
    """Labels on every object of a Runtime (the Runtime label selects its Pods)."""
    return {RUNTIME_LABEL: runtime.metadata.name, MANAGED_BY_LABEL: MANAGED_BY_VALUE}


def runtime_selector(runtime: Runtime) -> dict[str, str]:
    """The label selector of a Runtime's Pods (Deployment and Service)."""
    return {RUNTIME_LABEL: runtime.metadata.name}


def _metadata(runtime: Runtime, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": runtime.metadata.namespace,
        "labels": runtime_labels(runtime),
        "ownerReferences": [owner_reference(runtime)],
    }


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def runtimed_container(runtime: Runtime, wiring: RuntimedWiring | None = None) -> dict[str, Any]:
    """The injected runtimed sidecar container.

    Environment: ``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID``, ``POD_IP`` (downward API),
    ``RUNTIME_NAME``, ``RUNTIME_SERVER_ADDRESS`` (``$(POD_IP):<spec.port>``: the Runtime
    Server listens on the Pod's address, which is also loopback-reachable on Kubernetes),
    ``RUNTIMED_PORT`` (gRPC), ``RUNTIMED_HTTP_PORT`` (``/healthz``, ``/metrics``) and
    ``WORKSPACE_DIR``. Ports ``grpc`` (the Service's target) and ``metrics`` are declared.
    Hardened on its own (:mod:`krt.controlplane.sidecar_settings`): the restricted
    ``securityContext`` with a read-only root filesystem and an emptyDir at ``/tmp``, the
    installation's ``resources``, and a liveness probe on ``/healthz``. With ``wiring``: ``RUNTIMED_GATEWAY_URL``, and ``RUNTIMED_GATEWAY_CA_FILE`` /
    ``RUNTIMED_PEER_TLS_DIR`` with their read-only mounts (see :func:`wiring_volumes`).
    """
    wiring = wiring or RuntimedWiring()
    env: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    resources: dict[str, Any] = (
        {"resources": copy.deepcopy(dict(wiring.resources))} if wiring.resources else {}
    )
    if wiring.gateway_url is not None:
        env.append({"name": "RUNTIMED_GATEWAY_URL", "value": wiring.gateway_url})
    if wiring.gateway_ca_configmap is not None:
        env.append(
            {
                "name": "RUNTIMED_GATEWAY_CA_FILE",
                "value": f"{GATEWAY_CA_MOUNT_PATH}/{GATEWAY_CA_KEY}",
            }
        )
        mounts.append(
            {"name": GATEWAY_CA_VOLUME, "mountPath": GATEWAY_CA_MOUNT_PATH, "readOnly": True}
        )
    if wiring.peer_tls_secret is not None:
        env.append({"name": "RUNTIMED_PEER_TLS_DIR", "value": PEER_TLS_MOUNT_PATH})
        mounts.append({"name": PEER_TLS_VOLUME, "mountPath": PEER_TLS_MOUNT_PATH, "readOnly": True})
    return {
        "name": RUNTIMED_CONTAINER_NAME,
        "image": runtime.spec.daemon_image or DEFAULT_DAEMON_IMAGE,
        "ports": [
            {
                "name": RUNTIMED_GRPC_PORT_NAME,
                "containerPort": RUNTIMED_GRPC_PORT,
                "protocol": "TCP",
            },
            {
                "name": RUNTIMED_HTTP_PORT_NAME,
                "containerPort": RUNTIMED_HTTP_PORT,
                "protocol": "TCP",
            },
        ],
        "env": [
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
            _field_env("POD_UID", "metadata.uid"),
            _field_env("POD_IP", "status.podIP"),
            {"name": "RUNTIME_NAME", "value": runtime.metadata.name},
            {"name": "RUNTIME_SERVER_ADDRESS", "value": f"$(POD_IP):{runtime.spec.port}"},
            {"name": "RUNTIMED_PORT", "value": str(RUNTIMED_GRPC_PORT)},
            {"name": "RUNTIMED_HTTP_PORT", "value": str(RUNTIMED_HTTP_PORT)},
            {"name": "WORKSPACE_DIR", "value": WORKSPACE_MOUNT_PATH},
            *env,
        ],
        # A runtimed that stops answering (paused, wedged) leaves the Service's endpoints, so
        # the gateway sends invokes to a live runtimed, which answers 503 for the stuck
        # owner's Runs instead of every function timing out. Readiness never fences a Run
        # (seed 000: readiness alone is not ownership loss).
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": RUNTIMED_HTTP_PORT_NAME},
            "periodSeconds": RUNTIMED_READINESS_PERIOD_SECONDS,
            "timeoutSeconds": 1,
            "failureThreshold": 2,
            "successThreshold": 1,
        },
        # /healthz answers while runtimed's loops run, whatever the Runtime Server's health:
        # a down server is RuntimedReady=False, never a restart of runtimed
        "livenessProbe": copy.deepcopy(dict(RUNTIMED_LIVENESS_PROBE)),
        "securityContext": copy.deepcopy(dict(RUNTIMED_SECURITY_CONTEXT)),
        **resources,
        "volumeMounts": [
            {"name": WORKSPACE_VOLUME_NAME, "mountPath": WORKSPACE_MOUNT_PATH},
            {"name": RUNTIMED_TMP_VOLUME, "mountPath": RUNTIMED_TMP_MOUNT_PATH},
            *mounts,
        ],
    }


def wiring_volumes(wiring: RuntimedWiring | None) -> list[dict[str, Any]]:
    """The Pod volumes behind runtimed's gateway CA and peer TLS mounts.

    Both are ``optional: true``: a Pod whose namespace lacks the ConfigMap or Secret still
    starts (runtimed then warns and runs without ``caBundle`` / peer TLS) instead of hanging
    in ``ContainerCreating``. Only the ``ca.crt`` key of the ConfigMap is projected. The
    Secret's files are read-only (0444) rather than 0440: a Runtime template need not set
    ``fsGroup``, and only the runtimed container mounts the volume (the Runtime Server
    container, which runs function code, does not).
    """
    wiring = wiring or RuntimedWiring()
    volumes: list[dict[str, Any]] = []
    if wiring.gateway_ca_configmap is not None:
        volumes.append(
            {
                "name": GATEWAY_CA_VOLUME,
                "configMap": {
                    "name": wiring.gateway_ca_configmap,
                    "items": [{"key": GATEWAY_CA_KEY, "path": GATEWAY_CA_KEY}],
                    "optional": True,
                },
            }
        )
    if wiring.peer_tls_secret is not None:
        volumes.append(
            {
                "name": PEER_TLS_VOLUME,
                "secret": {
                    "secretName": wiring.peer_tls_secret,
                    "defaultMode": 0o444,
                    "optional": True,
                },
            }
        )
    return volumes


#: Volume names a Runtime template may not use (kruntimes declares them in every Pod).
RESERVED_VOLUMES: Final = frozenset({GATEWAY_CA_VOLUME, PEER_TLS_VOLUME, RUNTIMED_TMP_VOLUME})


def pod_template(runtime: Runtime, wiring: RuntimedWiring | None = None) -> dict[str, Any]:
    """The Deployment's Pod template: ``spec.template`` with kruntimes' additions.

    Args:
        runtime: the Runtime.
        wiring: the installation's gateway and peer TLS settings for runtimed (``None``:
            none).

    Raises:
        ValueError: the template's metadata, labels or annotations are of the wrong type,
            it has no containers, already has a container or init container named
            ``runtimed`` (the name of the injected sidecar), or declares a volume named
            ``kruntimes-gateway-ca``, ``kruntimes-peer-tls`` or ``kruntimes-runtimed-tmp``
            (reserved).
    """
    template = copy.deepcopy(dict(runtime.spec.template))
    meta = template.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ValueError("spec.template.metadata must be an object")
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not isinstance(values, dict) or not all(
            isinstance(value, str) for value in values.values()
        ):
            # the CRD refuses these; a Runtime stored before it did must not stall the loop
            raise ValueError(f"spec.template.metadata.{field} must be a map of strings")
    meta["labels"] = {**(meta.get("labels") or {}), **runtime_selector(runtime)}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        CAPACITY_ANNOTATION: json.dumps(
            runtime.spec.effective_capacity, sort_keys=True, separators=(",", ":")
        ),
    }
    spec = template.setdefault("spec", {})
    containers = list(spec.get("containers") or [])
    if not containers:
        raise ValueError("spec.template.spec.containers: at least one container is required")
    for field in ("containers", "initContainers"):
        if any(c.get("name") == RUNTIMED_CONTAINER_NAME for c in spec.get(field) or []):
            # the CRD refuses these; a Runtime stored before it did must not stall the loop
            raise ValueError(
                f'spec.template.spec.{field}: the name "{RUNTIMED_CONTAINER_NAME}" is reserved '
                "for the injected runtimed sidecar"
            )
    for container in containers:
        mounts = list(container.get("volumeMounts") or [])
        if not any(m.get("name") == WORKSPACE_VOLUME_NAME for m in mounts):
            mounts.append({"name": WORKSPACE_VOLUME_NAME, "mountPath": WORKSPACE_MOUNT_PATH})
        container["volumeMounts"] = mounts
    reserved = sorted({str(v.get("name")) for v in spec.get("volumes") or []} & RESERVED_VOLUMES)
    if reserved:
        raise ValueError(
            f'spec.template.spec.volumes: the name "{reserved[0]}" is reserved for the '
            "runtimed sidecar's installation material"
        )
    spec["containers"] = [*containers, runtimed_container(runtime, wiring)]
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != WORKSPACE_VOLUME_NAME]
    spec["volumes"] = [
        *volumes,
        {"name": WORKSPACE_VOLUME_NAME, "emptyDir": {}},
        {"name": RUNTIMED_TMP_VOLUME, "emptyDir": {"sizeLimit": RUNTIMED_TMP_SIZE_LIMIT}},
        *wiring_volumes(wiring),
    ]
    gates = [
        g
        for g in spec.get("readinessGates") or []
        if g.get("conditionType") != RUNTIMED_READY_POD_CONDITION
    ]
    spec["readinessGates"] = [*gates, {"conditionType": RUNTIMED_READY_POD_CONDITION}]
    spec["serviceAccountName"] = runtime_service_account_name(runtime.metadata.name)
    return template


def desired_deployment(runtime: Runtime, wiring: RuntimedWiring | None = None) -> dict[str, Any]:
    """The Runtime's Deployment (``apps/v1``), hash-stamped.

    The hash covers the Pod template, ``wiring`` included: a changed setting rolls the Pods.

    Raises:
        ValueError: see :func:`pod_template`.
    """
    return _stamp(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(runtime, runtime_deployment_name(runtime.metadata.name)),
            "spec": {
                "replicas": runtime.spec.replicas,
                "selector": {"matchLabels": runtime_selector(runtime)},
                "template": pod_template(runtime, wiring),
            },
        }
    )


def desired_service(runtime: Runtime) -> dict[str, Any]:
    """The Runtime's ClusterIP Service on runtimed's gRPC port, hash-stamped."""
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(runtime, runtime_service_name(runtime.metadata.name)),
            "spec": {
                "type": "ClusterIP",
                "selector": runtime_selector(runtime),
                "ports": [
                    {
                        "name": RUNTIMED_GRPC_PORT_NAME,
                        "port": RUNTIMED_GRPC_PORT,
                        "targetPort": RUNTIMED_GRPC_PORT_NAME,
                        "protocol": "TCP",
                    }
                ],
            },
        }
    )


def desired_service_account(runtime: Runtime) -> dict[str, Any]:
    """The ServiceAccount runtimed runs as, hash-stamped."""
    return _stamp(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _metadata(runtime, runtime_service_account_name(runtime.metadata.name)),
        }
    )


def desired_role(runtime: Runtime) -> dict[str, Any]:
    """The Role granting :data:`RUNTIMED_RULES` in the Runtime's namespace, hash-stamped."""
    return _stamp(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(runtime, runtime_object_name(runtime.metadata.name)),
            "rules": copy.deepcopy(list(RUNTIMED_RULES)),
        }
    )


def desired_role_binding(runtime: Runtime) -> dict[str, Any]:
    """The RoleBinding of the Role to the ServiceAccount, hash-stamped."""
    name = runtime_object_name(runtime.metadata.name)
    return _stamp(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(runtime, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": runtime_service_account_name(runtime.metadata.name),
                    "namespace": runtime.metadata.namespace,
                }
            ],
        }
    )


def desired_objects(runtime: Runtime, wiring: RuntimedWiring | None = None) -> list[dict[str, Any]]:
    """All desired children in creation order (identity first, then Service, Deployment).

    Args:
        runtime: the Runtime.
        wiring: the installation's settings for runtimed (see :class:`RuntimedWiring`).

    Raises:
        ValueError: see :func:`pod_template`.
    """
    return [
        desired_service_account(runtime),
        desired_role(runtime),
        desired_role_binding(runtime),
        desired_service(runtime),
        desired_deployment(runtime, wiring),
    ]


def needs_update(actual: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when ``actual`` drifted from ``desired``: another hash, or another replica count.

    Args:
        actual: the object as read from the API.
        desired: a hash-stamped desired object.
    """
    want = desired["metadata"]["annotations"][DESIRED_HASH_ANNOTATION]
    have = (actual.get("metadata", {}).get("annotations") or {}).get(DESIRED_HASH_ANNOTATION)
    if have != want:
        return True
    if desired.get("kind") == "Deployment":
        return bool(actual.get("spec", {}).get("replicas") != desired["spec"]["replicas"])
    return False


#: The Pod template annotation ``kubectl rollout restart`` sets (an RFC 3339 time).
RESTARTED_AT_ANNOTATION: Final = "kubectl.kubernetes.io/restartedAt"


def merge_for_update(actual: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The object to PUT: ``desired`` with ``actual``'s identity and server-owned fields.

    Keeps ``resourceVersion`` (a conditional update), ``uid``, and fields the API server or
    other controllers own (a Service's ``clusterIP``/``clusterIPs``, labels and annotations
    added by others). A Deployment keeps its Pod template's
    ``kubectl.kubernetes.io/restartedAt`` (``kubectl rollout restart``) unless the
    Runtime's own template sets it: a repair must not undo a restart by rolling the Pods
    back (T2 F15). The annotation is not part of the desired hash, so a restart alone never
    triggers a repair.
    """
    result = copy.deepcopy(dict(desired))
    meta = result["metadata"]
    actual_meta = actual.get("metadata", {})
    for key in ("resourceVersion", "uid"):
        if key in actual_meta:
            meta[key] = actual_meta[key]
    meta["labels"] = {**(actual_meta.get("labels") or {}), **meta.get("labels", {})}
    meta["annotations"] = {
        **(actual_meta.get("annotations") or {}),
        **meta.get("annotations", {}),
    }
    if desired.get("kind") == "Service":
        actual_spec = actual.get("spec", {})
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key in actual_spec:
                result["spec"][key] = actual_spec[key]
    elif desired.get("kind") == "Deployment":
        _keep_restarted_at(actual, result)
    return result


def _keep_restarted_at(actual: Mapping[str, Any], result: dict[str, Any]) -> None:
    live = (((actual.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    restarted_at = live.get(RESTARTED_AT_ANNOTATION)
    if not isinstance(restarted_at, str):
        return
    template_meta = result["spec"]["template"].setdefault("metadata", {})
    annotations = template_meta.setdefault("annotations", {})
    annotations.setdefault(RESTARTED_AT_ANNOTATION, restarted_at)
