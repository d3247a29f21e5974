"""The pure routing decision of runtimed's invoke proxy (seed 000, Runtime Gateway and Fencing).

Given what this runtimed has observed (the ownership cache's :class:`RunView` and the owner's
:class:`PodView`, its own registry entry, and the hop expectation a peer sent), decide what
happens to one InvokeFunction call. No I/O: the trio adapter is :mod:`runtimed.dataplane.proxy`.

Seed 000 rules, and how each is decided here:

* unknown UID (or not a function Run of this Runtime): :class:`NotFound` (HTTP 404);
* known but not Ready, recovering or terminating: :class:`Unavailable` (HTTP 503), saying
  why (the Ready condition's reason and message);
* known but ended (a terminal phase, no deletion in progress): :class:`Unavailable` with
  ``retry=False`` (HTTP 503 without ``Retry-After``): it will never be Ready again, so a
  client must not be told to retry (a deleting Run stays "terminating");
* local owner: :class:`Local`, only when this Pod is the assigned Pod *and* the local
  registration is accepting invokes for exactly the attempt the cache shows;
* remote owner: :class:`Remote`, one hop carrying the expected Run UID, attempt and
  assigned Pod UID;
* a hop arriving here (``hop`` set) is served locally or refused, never forwarded again;
  the owner refuses any mismatch between the hop's expectations and its own observations
  (Fencing: "Peer routing requests carry the expected Run UID, registration attempt, and
  assigned Pod UID and are rejected on mismatch");
* a cache that has not yet observed the newest assignment (a peer expects a higher attempt,
  or the local registry is ahead of the cache) answers UNAVAILABLE (503) and lets the watch
  catch up; it never guesses another owner.

Two 503 codes are used, per docs/gateway.md: FAILED_PRECONDITION "the Run exists but cannot
be invoked now" (not ready, terminating, stale owner, hop mismatch) and UNAVAILABLE "this
runtimed cannot tell yet" (cache not synced or behind, owner Pod not observed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from runtimed.dataplane.ownership import PodView, RunView

__all__ = [
    "HopExpectation",
    "LocalRegistration",
    "Local",
    "NotFound",
    "Remote",
    "Route",
    "Unavailable",
    "UnavailableCode",
    "decide",
]


class LocalRegistration(Protocol):
    """The local registry entry of a Run (``runtimed.functions.registry.RegistryEntry``)."""

    @property
    def attempt(self) -> int:
        """The registration attempt the registration ID belongs to."""
        ...

    @property
    def registration_id(self) -> str | None:
        """The Runtime Server's opaque registration ID."""
        ...

    @property
    def accepts_invokes(self) -> bool:
        """True only while READY with a registration ID."""
        ...


@dataclass(frozen=True, slots=True)
class HopExpectation:
    """What the forwarding runtimed expects of the owner (carried as gRPC metadata).

    Attributes:
        run_uid: the Run UID.
        attempt: the registration attempt (``status.attempt``) the sender observed.
        pod_uid: the assigned Pod UID the sender observed (the owner's own Pod UID).
    """

    run_uid: str
    attempt: int
    pod_uid: str


class UnavailableCode(StrEnum):
    """The gRPC code of a 503 answer (docs/gateway.md)."""

    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class NotFound:
    """No such function Run for this Runtime (gRPC NOT_FOUND, HTTP 404)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The Run exists (or may) but cannot be invoked now (HTTP 503).

    Attributes:
        code: the gRPC code.
        reason: the message.
        retry: False when the Run will never accept invokes again (it ended): the gateway
            then sends no ``Retry-After`` (runtimed's ``x-kruntime-retry-after: never``).
    """

    code: UnavailableCode
    reason: str
    retry: bool = True


@dataclass(frozen=True, slots=True)
class Local:
    """Invoke the local Runtime Server with this registration ID."""

    run: RunView
    registration_id: str


@dataclass(frozen=True, slots=True)
class Remote:
    """Forward once to the owner's runtimed at ``host:port`` with ``expectation``."""

    run: RunView
    host: str
    port: int
    expectation: HopExpectation


Route = NotFound | Unavailable | Local | Remote

_FP = UnavailableCode.FAILED_PRECONDITION
_UN = UnavailableCode.UNAVAILABLE


def _check_hop(run: RunView, hop: HopExpectation, self_pod_uid: str) -> Unavailable | None:
    """The owner's check of a peer's expectations (None: they match this Pod's view)."""
    if hop.run_uid != run.uid:
        return Unavailable(_FP, f"hop expects Run UID {hop.run_uid}, the request names {run.uid}")
    if hop.pod_uid != self_pod_uid:
        return Unavailable(_FP, f"hop expects owner Pod {hop.pod_uid}, this is Pod {self_pod_uid}")
    if hop.attempt > run.attempt:
        return Unavailable(
            _UN,
            f"hop expects attempt {hop.attempt}; this cache has only seen attempt {run.attempt}",
        )
    if hop.attempt < run.attempt:
        return Unavailable(
            _FP, f"hop expects attempt {hop.attempt}, the current attempt is {run.attempt}"
        )
    if run.assigned_pod_uid != self_pod_uid:
        return Unavailable(
            _FP, f"hop expects this Pod to own the Run; it is assigned to {run.assigned_pod_uid!r}"
        )
    return None


def decide(
    *,
    uid: str,
    synced: bool,
    run: RunView | None,
    self_pod_uid: str,
    owner_pod: PodView | None,
    local: LocalRegistration | None,
    hop: HopExpectation | None,
) -> Route:
    """Decide the route of one InvokeFunction call (see the module docstring).

    Args:
        uid: the Run UID of the request (``registration.run_uid``).
        synced: whether the ownership cache has synced.
        run: the cache's view of Run ``uid``, or ``None``.
        self_pod_uid: this runtimed's Pod UID.
        owner_pod: the cache's view of ``run.assigned_pod_uid``'s Pod, or ``None``.
        local: this Pod's registry entry for ``uid``, or ``None``.
        hop: the expectations of a forwarding peer, or ``None`` for a gateway call.

    Returns:
        The route.
    """
    if not synced:
        return Unavailable(_UN, "the ownership cache has not synced yet")
    if run is None or run.uid != uid:
        if hop is not None:
            return Unavailable(_UN, f"this cache has not observed Run {uid} yet")
        return NotFound(f"no function Run with UID {uid} in this Runtime")
    if hop is not None and (refused := _check_hop(run, hop, self_pod_uid)) is not None:
        return refused
    if run.terminating:
        return Unavailable(_FP, "the Run is terminating")
    if run.ended:
        return Unavailable(
            _FP,
            f"the Run has ended ({run.ended}); it will not become Ready again "
            "(create it again to invoke it)",
            retry=False,
        )
    if not run.ready or not run.assigned_pod_uid:
        return Unavailable(
            _FP, f"the Run is not Ready ({run.not_ready or 'registering or recovering'})"
        )
    if run.assigned_pod_uid == self_pod_uid:
        if local is None or not local.accepts_invokes or not local.registration_id:
            return Unavailable(_FP, "the Run is not registered and ready on its owner Pod")
        if local.attempt < run.attempt:
            return Unavailable(
                _FP,
                f"local registration is for attempt {local.attempt}; current is {run.attempt}",
            )
        if local.attempt > run.attempt:
            return Unavailable(
                _UN,
                f"local registration is for attempt {local.attempt}; "
                f"this cache has only seen attempt {run.attempt}",
            )
        return Local(run, local.registration_id)
    if hop is not None:  # unreachable after _check_hop; kept as the explicit loop guard
        return Unavailable(_FP, "a proxied request is never forwarded again")
    if owner_pod is None:
        return Unavailable(_UN, f"owner Pod {run.assigned_pod_uid} has not been observed yet")
    if not owner_pod.routable:
        state = "deleting" if owner_pod.deleting else "not ready"
        return Unavailable(_FP, f"owner Pod {owner_pod.name or owner_pod.uid} is {state}")
    return Remote(
        run,
        owner_pod.ip,
        owner_pod.port,
        HopExpectation(run.uid, run.attempt, run.assigned_pod_uid),
    )
