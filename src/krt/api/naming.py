"""Names of the objects the Runtime controller creates, in one place.

Shared by the control plane (which creates the objects), the gateway and runtimed (which
dial them) and the CLI. The gateway finds a Runtime's Service by convention (seed 000,
Runtime Gateway: "calls the Kubernetes Service for that Runtime on its dedicated gRPC
port"), so it imports these helpers instead of spelling the names. (runtimed's heartbeat
Lease name lives with the heartbeat in :mod:`krt.kube.heartbeat`.) Pure: no I/O and no
imports beyond the standard library and :mod:`krt.api`.

Every per-Runtime object (Deployment, Service, ServiceAccount, Role, RoleBinding) is named
``runtime-<runtime>``, matching the Pod names in seed 001 (``runtime-python-7f587b4668-njcks``).
A Runtime name longer than 55 characters would make that name exceed a DNS-1035 label (63
characters, the Service limit), so such names are cut and suffixed with a stable hash.
"""

from __future__ import annotations

import hashlib
from typing import Final

from krt.api.constants import GROUP

#: Prefix of every object the controller creates for a Runtime.
OBJECT_PREFIX: Final = "runtime-"
#: Longest Kubernetes Service name (DNS-1035 label).
MAX_SERVICE_NAME_CHARS: Final = 63

#: runtimed's gRPC port inside a Runtime Pod (the port the gateway and peer runtimed dial).
RUNTIMED_GRPC_PORT: Final = 9090
#: Name of that container port and of the Runtime Service's port: the gateway looks it up.
RUNTIMED_GRPC_PORT_NAME: Final = "grpc"
#: runtimed's HTTP port (``/healthz``, ``/metrics``; runtimed's ``RUNTIMED_HTTP_PORT``).
RUNTIMED_HTTP_PORT: Final = 8081
#: Name of that container port (Prometheus scrape configs select it by name).
RUNTIMED_HTTP_PORT_NAME: Final = "metrics"
#: Container name of the injected sidecar.
RUNTIMED_CONTAINER_NAME: Final = "runtimed"
#: Image of the injected sidecar when ``Runtime.spec.daemonImage`` is unset.
DEFAULT_DAEMON_IMAGE: Final = "kruntimes/runtimed"
#: The emptyDir volume shared by runtimed and the Runtime Server (prepared source lives here).
#: localkube treats a volume of this name as the Pod's shared workspace directory (every
#: container's cwd; its host path is in ``$KRT_POD_WORKSPACE``).
WORKSPACE_VOLUME_NAME: Final = "workspace"
#: Where the workspace is mounted in both containers (``$WORKSPACE_DIR`` in runtimed). Not
#: ``/workspace``: localkube maps that path onto the workspace directory itself.
WORKSPACE_MOUNT_PATH: Final = "/kruntimes/workspace"
#: Label carrying the name of the controller that manages an object.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
#: Value of :data:`MANAGED_BY_LABEL` on objects the Runtime controller creates.
MANAGED_BY_VALUE: Final = "krt-controlplane"
#: Annotation holding the hash of the desired state an object was last written from.
DESIRED_HASH_ANNOTATION: Final = f"{GROUP}/desired-hash"
#: Name of the control plane's leader-election Lease.
LEADER_LEASE_NAME: Final = "krt-controlplane"


def runtime_object_name(runtime: str) -> str:
    """Name of the Deployment, Service, ServiceAccount, Role and RoleBinding of a Runtime.

    Args:
        runtime: the Runtime's name (a DNS-1123 label, at most 63 characters).

    Returns:
        ``runtime-<runtime>``, or for long names ``runtime-<first chars>-<8 hex of sha256>``,
        always at most 63 characters and the same for the same input.

    Raises:
        ValueError: ``runtime`` is empty.
    """
    if not runtime:
        raise ValueError("runtime name must not be empty")
    name = f"{OBJECT_PREFIX}{runtime}"
    if len(name) <= MAX_SERVICE_NAME_CHARS:
        return name
    digest = hashlib.sha256(runtime.encode()).hexdigest()[:8]
    keep = MAX_SERVICE_NAME_CHARS - len(OBJECT_PREFIX) - len(digest) - 1
    return f"{OBJECT_PREFIX}{runtime[:keep].rstrip('-')}-{digest}"


def runtime_service_name(runtime: str) -> str:
    """Name of the ClusterIP Service selecting a Runtime's ready Pods (the gateway's target)."""
    return runtime_object_name(runtime)


def runtime_service_host(
    runtime: str, namespace: str, *, cluster_domain: str = "cluster.local"
) -> str:
    """DNS name of a Runtime's Service: ``runtime-<runtime>.<namespace>.svc.<cluster_domain>``.

    Args:
        runtime: the Runtime's name.
        namespace: the Runtime's (and its Runs') namespace.
        cluster_domain: the cluster DNS domain.
    """
    return f"{runtime_service_name(runtime)}.{namespace}.svc.{cluster_domain}"


def runtime_deployment_name(runtime: str) -> str:
    """Name of the Deployment running a Runtime's Pods."""
    return runtime_object_name(runtime)


def runtime_service_account_name(runtime: str) -> str:
    """Name of the ServiceAccount (and Role and RoleBinding) runtimed runs as."""
    return runtime_object_name(runtime)
