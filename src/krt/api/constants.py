"""Names of the kruntimes.io/v1alpha1 API: group, version, kinds, finalizer, labels, condition vocabulary.

Every component spells these names through this module so that a rename is one edit and a
typo is an import error. The condition types and reasons are the vocabulary of seed 000
(Run Status API, Lifecycle State Machine) and seed 003 (Task Execution Lifecycle); the failure
reasons the retry engine understands live in :mod:`krt.api.retry` (``FailureReason``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

GROUP: Final = "kruntimes.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

RUN_KIND: Final = "Run"
RUN_LIST_KIND: Final = "RunList"
RUN_PLURAL: Final = "runs"
RUN_SINGULAR: Final = "run"
#: ``kubectl get krun``. "run" is a kubectl verb and "rn" is too easy to mistype; none clash
#: with a built-in resource's short name.
RUN_SHORT_NAMES: Final = ("krun",)

RUNTIME_KIND: Final = "Runtime"
RUNTIME_LIST_KIND: Final = "RuntimeList"
RUNTIME_PLURAL: Final = "runtimes"
RUNTIME_SINGULAR: Final = "runtime"
#: ``kubectl get krt`` (built-ins use none of these).
RUNTIME_SHORT_NAMES: Final = ("krt",)

#: ``kubectl get kruntimes`` lists Runs and Runtimes together.
CATEGORIES: Final = ("kruntimes",)

#: Seed 000, Cleanup and Finalization: added by runtimed before registering a long-lived
#: (function) Run, removed after unregister and capacity release (or by stale recovery once
#: fencing proves no registration can still serve).
REGISTRATION_CLEANUP_FINALIZER: Final = f"{GROUP}/registration-cleanup"

#: Label on Runtime Pods (and the Runtime's Deployment and Service) naming their Runtime.
RUNTIME_LABEL: Final = f"{GROUP}/runtime"
#: Pod condition kept current by runtimed's heartbeat; Runtime Pods carry a readiness gate on it.
RUNTIMED_READY_POD_CONDITION: Final = f"{GROUP}/RuntimedReady"
#: Annotation on Runtime Pods carrying the Pod's capacity as JSON, e.g. ``{"runs": 2}``
#: (informational; the scheduler derives usage from active Runs, never from annotations).
CAPACITY_ANNOTATION: Final = f"{GROUP}/capacity"

#: Default gRPC port of the Runtime Server container when ``Runtime.spec.port`` is unset.
DEFAULT_RUNTIME_SERVER_PORT: Final = 9091


class RunConditionType(StrEnum):
    """Condition types on ``Run.status.conditions`` (a list-map keyed by ``type``).

    Seed 000, Run Status API: ``Ready=True`` means the assigned runtimed registered the function
    and accepts invokes; during scheduling, registration, retry, cancellation and terminal
    phases it is ``False`` with a specific reason.
    """

    SCHEDULED = "Scheduled"
    """True once the scheduler bound the Run to a Runtime Pod; False with why while Pending."""
    RUNNING = "Running"
    """True while the current attempt runs (or registers); False during retry backoff and at the end."""
    READY = "Ready"
    """Function Runs only: True while the registration accepts invokes."""


class RuntimeConditionType(StrEnum):
    """Condition types on ``Runtime.status.conditions``."""

    AVAILABLE = "Available"
    """True when at least one Runtime Pod is ready to take Runs."""
    PROGRESSING = "Progressing"
    """True while the Runtime's Deployment rolls out or scales."""


class ConditionStatus(StrEnum):
    """The three values of a Kubernetes condition's ``status`` field."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Reason(StrEnum):
    """Reasons for conditions and ``Run.status.reason`` that are not failure reasons.

    Failure reasons (ExecutionFailed, PodLost, ...) are :class:`krt.api.retry.FailureReason`;
    both enums share one namespace of strings, checked by a test.
    """

    # Scheduled condition
    ASSIGNED = "Assigned"
    """Scheduled=True: bound to ``status.assignedPod``."""
    RUNTIME_NOT_FOUND = "RuntimeNotFound"
    """Scheduled=False: no Runtime of that name in the Run's namespace."""
    NO_READY_POD = "NoReadyPod"
    """Scheduled=False: the Runtime has no ready Pod with a fresh runtimed heartbeat."""
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    """Scheduled=False: every ready Pod is full for the Run's ``resources.requests``."""
    REQUEUED = "Requeued"
    """Scheduled=False: an earlier assignment was fenced and the Run waits for a new one."""

    # Running condition
    CLAIMED = "Claimed"
    """Running=True: runtimed claimed the Run (``startTime`` set) and runs the attempt."""
    RETRY_BACKOFF = "RetryBackoff"
    """Running=False: the attempt failed and the next one starts after ``status.retryAfter``."""

    # Ready condition (function Runs)
    FUNCTION_REGISTERED = "FunctionRegistered"
    """Ready=True: registered with the local Runtime Server, accepting invokes."""
    NOT_SCHEDULED = "NotScheduled"
    """Ready=False: waiting for a Runtime Pod."""
    REGISTERING = "Registering"
    """Ready=False: source preparation or RegisterFunction in progress."""
    UNAVAILABLE = "Unavailable"
    """Ready=False: registration lost or recovering; invokes get 503."""

    # Terminal reasons (Run.status.reason and the final conditions)
    SUCCEEDED = "Succeeded"
    """The task exited 0 (phase Succeeded)."""
    CANCELLED = "Cancelled"
    """``spec.cancelRequested`` was honoured (phase Cancelled)."""
    DELETED = "Deleted"
    """The Run is being deleted; its registration is being cleaned up."""
    TIMEOUT_EXCEEDED = "TimeoutExceeded"
    """A task exceeded ``spec.timeout`` from ``startTime`` (phase Timeout)."""
    LIFETIME_EXCEEDED = "LifetimeExceeded"
    """A function Run exceeded ``spec.timeout``, its reservation lifetime (phase Timeout)."""
    IDLE_TIMEOUT = "IdleTimeout"
    """A function Run saw no invocation for ``idleTimeoutSeconds`` (phase Timeout)."""
