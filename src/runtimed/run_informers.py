"""The Run informers of runtimed: this Pod's Runs, and the function Runs of the namespace.

One namespace-wide Run watch made every runtimed receive and parse every write of every Run
in the namespace, although the task lifecycle only acts on the Runs assigned to its own Pod
(issue 6: four events per task Run in every runtimed, half of them another Pod's Runs). The
Run CRD declares ``status.assignedPodUID`` and ``spec.mode.function.handler`` as selectable
fields (CRD field selectors: GA in Kubernetes 1.32, beta and on by default in 1.31;
localkube serves them), so runtimed runs two server-filtered watches:

* **assigned**: ``status.assignedPodUID=<this Pod's UID>``, the task lifecycle's cache. A
  Run that leaves it (reassigned, or its assignment cleared by recovery) arrives as
  DELETED; the task lifecycle treats a Run that is gone and one that is no longer ours
  alike (seed 003: let go of it, Cancel and Forget its execution, never write it), so the
  synthetic DELETED is exactly what it needs;
* **functions**: ``spec.mode.function.handler!=`` (every function Run of the namespace, the
  mode is immutable so a Run never leaves it except by deletion), the function lifecycle's
  cache and the invoke dataplane's ownership cache (seed 000: every runtimed caches the
  function Runs of its Runtime, whichever Pod serves them).

A cluster whose API server rejects the selector (a CRD without the selectable fields, or a
Kubernetes without CRD field selectors) gets the single unfiltered watch both consumers used
before, and a warning: the handlers filter on the client side in either case.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import trio

from krt.kube.backoff import Backoff
from krt.kube.client import Obj
from krt.kube.errors import BadRequest, KubeError
from krt.kube.informer import Informer
from krt.kube.interface import KubeClient
from krt.kube.resources import RUNS
from runtimed.run_fields import assigned_pod_uid

__all__ = [
    "ASSIGNED_POD_INDEX",
    "FUNCTION_RUNS_SELECTOR",
    "RunInformers",
    "assigned_pod_uids",
    "assigned_runs_selector",
    "field_selectors_supported",
    "run_informers",
]

log = logging.getLogger(__name__)

#: Informer index of Runs by ``status.assignedPodUID``.
ASSIGNED_POD_INDEX: Final = "assignedPodUID"
#: The ``fieldSelector`` of the function Runs (the CRD requires a non-empty handler).
FUNCTION_RUNS_SELECTOR: Final = "spec.mode.function.handler!="


def assigned_runs_selector(pod_uid: str) -> str:
    """The ``fieldSelector`` of the Runs assigned to the Pod with UID ``pod_uid``."""
    return f"status.assignedPodUID={pod_uid}"


def assigned_pod_uids(obj: Obj) -> Iterable[str]:
    """Index function: the Run's ``status.assignedPodUID`` (nothing when unassigned)."""
    uid = assigned_pod_uid(obj)
    return [uid] if uid else []


async def field_selectors_supported(
    kube: KubeClient, namespace: str, pod_uid: str, *, backoff: Backoff | None = None
) -> bool:
    """Whether the API server filters Runs by both selectable fields.

    One LIST of this Pod's function Runs (both selectors at once, so the answer is small).
    Transient and permission errors are retried (as the informers would); only a 400 (the
    field is not selectable: a CRD without ``selectableFields``, or a Kubernetes without CRD
    field selectors) says no.

    Args:
        kube: the client.
        namespace: the Pod's namespace.
        pod_uid: this Pod's UID.
        backoff: delays between attempts (default 0.2 s doubling to 5 s, jittered).

    Returns:
        True when the filtered watches can be used.
    """
    backoff = backoff or Backoff(base=0.2, maximum=5.0)
    selector = f"{assigned_runs_selector(pod_uid)},{FUNCTION_RUNS_SELECTOR}"
    while True:
        try:
            await kube.list(RUNS, namespace, field_selector=selector)
            return True
        except BadRequest as exc:
            log.warning(
                "the API server does not filter Runs by field (%s): watching every Run of "
                "namespace %s (the Run CRD needs its selectableFields; Kubernetes 1.31+)",
                exc,
                namespace,
            )
            return False
        except KubeError as exc:
            log.info("Run field selector probe failed, retrying: %s", exc)
            await trio.sleep(backoff.next_delay())


@dataclass(frozen=True, slots=True)
class RunInformers:
    """runtimed's Run caches (see the module docstring).

    Attributes:
        assigned: the Runs assigned to this Pod (the task lifecycle's cache); the same
            object as :attr:`functions` when the API server cannot filter.
        functions: the function Runs of the namespace (function lifecycle, ownership cache).
    """

    assigned: Informer
    functions: Informer

    @property
    def split(self) -> bool:
        """Two filtered watches (not one namespace-wide watch)."""
        return self.assigned is not self.functions

    def all(self) -> list[Informer]:
        """The distinct informers, each to be run once."""
        return [self.functions, self.assigned] if self.split else [self.functions]


def run_informers(kube: KubeClient, *, namespace: str, pod_uid: str, split: bool) -> RunInformers:
    """Build the Run informers of one runtimed (not started), each indexed by assigned Pod.

    Args:
        kube: the client.
        namespace: the Pod's namespace.
        pod_uid: this Pod's UID.
        split: two filtered watches (see :func:`field_selectors_supported`), else one
            namespace-wide watch serving both.
    """
    if not split:
        shared = Informer(kube, RUNS, namespace=namespace)
        shared.add_index(ASSIGNED_POD_INDEX, assigned_pod_uids)
        return RunInformers(assigned=shared, functions=shared)
    assigned = Informer(
        kube, RUNS, namespace=namespace, field_selector=assigned_runs_selector(pod_uid)
    )
    functions = Informer(kube, RUNS, namespace=namespace, field_selector=FUNCTION_RUNS_SELECTOR)
    for informer in (assigned, functions):
        informer.add_index(ASSIGNED_POD_INDEX, assigned_pod_uids)
    return RunInformers(assigned=assigned, functions=functions)
