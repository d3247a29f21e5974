"""localkube's controller manager: Deployment, ReplicaSet, Endpoints/EndpointSlice, ClusterIP
and ClusterRole aggregation controllers (the API server itself runs garbage collection and
namespace defaults).

Talks to the API server only through the Kubernetes API (list + watch, conditional
updates, status subresource), like kube-controller-manager. Never imported by production
code. Entry point: :func:`serve_controllers`.
"""

from __future__ import annotations

import trio

from localkube.controllers.clusterip import ClusterIPController
from localkube.controllers.clusterrole_aggregation import ClusterRoleAggregationController
from localkube.controllers.deployment import DeploymentController
from localkube.controllers.endpoints import EndpointsController
from localkube.controllers.events import EventRecorder
from localkube.controllers.informer import Informer
from localkube.controllers.kubeapi import Kube, collection_path
from localkube.controllers.replicaset import ReplicaSetController


async def serve_controllers(
    kube: Kube,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the controllers until cancelled.

    Start-up: every informer finishes its first list before any controller reconciles (so
    a ReplicaSet never counts Pods from a half-filled cache); ``task_status.started()``
    follows.

    Args:
        kube: API client with cluster-admin rights.

    Raises:
        ApiStatusError, httpx.TransportError: if a first list fails.
    """
    events = EventRecorder(kube, "localkube")
    informers = {
        "deployments": Informer(
            kube, collection_path("apps/v1", "deployments"), name="deployments"
        ),
        "replicasets": Informer(
            kube, collection_path("apps/v1", "replicasets"), name="replicasets"
        ),
        "pods": Informer(kube, collection_path("v1", "pods"), name="pods"),
        "services": Informer(kube, collection_path("v1", "services"), name="services"),
        "endpoints": Informer(kube, collection_path("v1", "endpoints"), name="endpoints"),
        "slices": Informer(
            kube, collection_path("discovery.k8s.io/v1", "endpointslices"), name="endpointslices"
        ),
        "clusterroles": Informer(
            kube,
            collection_path("rbac.authorization.k8s.io/v1", "clusterroles"),
            name="clusterroles",
        ),
    }
    controllers: list[
        ClusterIPController
        | DeploymentController
        | ReplicaSetController
        | EndpointsController
        | ClusterRoleAggregationController
    ] = [
        ClusterIPController(kube, informers["services"]),
        DeploymentController(kube, informers["deployments"], informers["replicasets"], events),
        ReplicaSetController(kube, informers["replicasets"], informers["pods"], events),
        EndpointsController(
            kube,
            services=informers["services"],
            pods=informers["pods"],
            endpoints=informers["endpoints"],
            slices=informers["slices"],
        ),
        ClusterRoleAggregationController(kube, informers["clusterroles"]),
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(events.run)
        for informer in informers.values():
            await nursery.start(informer.run)
        for controller in controllers:
            await nursery.start(controller.run)
        task_status.started()
