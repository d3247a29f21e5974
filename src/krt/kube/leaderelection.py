"""Leader election on a ``coordination.k8s.io/v1`` Lease, in trio.

The algorithm is client-go's ``leaderelection`` package, restated for structured
concurrency:

* A candidate reads the Lease. It may take it when nobody holds it, when it holds it
  already, or when the record (``resourceVersion``) has not changed for ``lease_duration``
  seconds *of its own trio clock since it first saw that record*. Expiry is never judged
  from the remote ``renewTime``, so wall-clock skew between machines cannot create two
  leaders. Every write is a conditional PUT (or a create), so of two candidates racing for
  the same record exactly one wins; the other gets 409.
* The leader runs the given callable in a child nursery and renews every ``retry_period``.
  Each renewal attempt must succeed before ``renew_deadline`` seconds after the *sending*
  time of the previous successful renewal; otherwise (or when someone else holds the
  Lease) the callable's cancel scope is cancelled at once. Because
  ``renew_deadline < lease_duration`` and another candidate waits ``lease_duration`` from
  the moment it saw our last write (which was after we sent it), the old leader has stopped
  before a new one starts.
* On cancellation the leader releases the Lease (``holderIdentity`` emptied, shielded, at
  most ``renew_deadline`` seconds) so a successor need not wait for expiry.

All candidates of one Lease must use the same ``lease_duration``; the Lease records it
rounded up to whole seconds (``leaseDurationSeconds``) for kubectl and for other clients.
Wall-clock readings (``acquireTime``, ``renewTime``, MicroTime strings) come from the
injected :class:`~krt.kube.clock.Clock`; every duration is trio time.

The per-Pod runtimed heartbeat Lease helpers (docs/design-notes.md) live in
:mod:`krt.kube.heartbeat` and are re-exported here.
"""

from __future__ import annotations

import copy
import enum
import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from krt.kube.clock import Clock, SystemClock, format_micro_time
from krt.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from krt.kube.heartbeat import (
    heartbeat_fresh,
    heartbeat_lease_name,
    renew_heartbeat,
    run_heartbeat,
)
from krt.kube.interface import KubeClient, Obj
from krt.kube.resources import LEASES

__all__ = [
    "LeaderElector",
    "heartbeat_fresh",
    "heartbeat_lease_name",
    "lead",
    "renew_heartbeat",
    "run_heartbeat",
]

log = logging.getLogger(__name__)

#: Retry waits are ``retry_period * (1 + JITTER * random())`` seconds, as in client-go.
JITTER = 0.2


class _Attempt(enum.Enum):
    HELD = "held"
    """We hold the Lease now."""
    HELD_BY_OTHER = "held-by-other"
    """Someone else holds an unexpired Lease."""
    FAILED = "failed"
    """The attempt failed (conflict, transient error); try again."""


class LeaderElector:
    """One candidate for one Lease; see the module docstring.

    Args:
        kube: the client.
        namespace, name: the Lease.
        identity: this candidate's unique id (e.g. Pod name + random suffix).
        lease_duration: seconds a non-leader waits on an unchanged record before taking
            over.
        renew_deadline: seconds the leader keeps trying to renew before giving up (and
            stopping its work); must be below ``lease_duration``.
        retry_period: seconds between attempts (renewals and acquisitions).
        clock: wall clock for ``acquireTime``/``renewTime`` (default the system clock).

    Raises:
        ValueError: empty identity/name, non-positive durations, ``renew_deadline >=
            lease_duration`` or ``retry_period * 1.2 >= renew_deadline``.
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not name or not namespace:
            raise ValueError("the Lease needs a namespace and a name")
        if min(lease_duration, renew_deadline, retry_period) <= 0:
            raise ValueError(
                "lease_duration, renew_deadline and retry_period must be > 0 seconds, got "
                f"{lease_duration}, {renew_deadline}, {retry_period}"
            )
        if renew_deadline >= lease_duration:
            raise ValueError(
                f"renew_deadline ({renew_deadline} s) must be below lease_duration "
                f"({lease_duration} s)"
            )
        if retry_period * (1 + JITTER) >= renew_deadline:
            raise ValueError(
                f"retry_period ({retry_period} s) times {1 + JITTER} must be below "
                f"renew_deadline ({renew_deadline} s)"
            )
        self._kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock: Clock = clock or SystemClock()
        self._lease: Obj | None = None
        self._observed_version = ""
        self._observed_at = 0.0
        self._last_renew = -math.inf
        #: Whether this candidate currently runs the leader's work.
        self.is_leader = False
        #: How many times this candidate became leader.
        self.terms = 0

    # -- one attempt ---------------------------------------------------------------------

    def _spec(self, holder: str, previous: dict[str, Any], now: str) -> dict[str, Any]:
        spec = dict(previous)
        taking_over = previous.get("holderIdentity") != holder
        spec["holderIdentity"] = holder
        spec["leaseDurationSeconds"] = max(1, math.ceil(self.lease_duration))
        spec["renewTime"] = now
        if taking_over or "acquireTime" not in spec:
            spec["acquireTime"] = now
        if taking_over and previous:
            spec["leaseTransitions"] = int(previous.get("leaseTransitions") or 0) + 1
        spec.setdefault("leaseTransitions", 0)
        return spec

    async def _try_acquire_or_renew(self) -> _Attempt:
        now = format_micro_time(self._clock.now())
        lease = self._lease if self.is_leader else None
        if lease is None:
            try:
                lease = await self._kube.get(LEASES, self.name, self.namespace)
            except NotFound:
                body = {
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(self.identity, {}, now),
                }
                try:
                    self._lease = await self._kube.create(LEASES, body)
                except AlreadyExists:
                    return _Attempt.FAILED
                return _Attempt.HELD
            version = str(lease["metadata"].get("resourceVersion", ""))
            if version != self._observed_version:
                self._observed_version = version
                self._observed_at = trio.current_time()
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            expired = trio.current_time() >= self._observed_at + self.lease_duration
            if holder and holder != self.identity and not expired:
                self._lease = lease
                return _Attempt.HELD_BY_OTHER
        updated = copy.deepcopy(lease)
        updated["spec"] = self._spec(self.identity, lease.get("spec") or {}, now)
        try:
            self._lease = await self._kube.replace(LEASES, updated)
        except Conflict:
            self._lease = None
            return _Attempt.FAILED
        except NotFound:
            self._lease = None
            return _Attempt.FAILED
        return _Attempt.HELD

    async def _attempt(self) -> _Attempt:
        try:
            return await self._try_acquire_or_renew()
        except KubeError as exc:
            log.info(
                "lease %s/%s: attempt by %s failed: %s",
                self.namespace,
                self.name,
                self.identity,
                exc,
            )
            self._lease = None
            return _Attempt.FAILED

    async def _sleep_retry(self) -> None:
        await trio.sleep(self.retry_period * (1 + JITTER * random.random()))

    # -- phases --------------------------------------------------------------------------

    async def _acquire(self) -> None:
        """Return once we hold the Lease (``_last_renew`` = sending time of that write).

        Each attempt is bounded by ``renew_deadline`` (as each renewal is): an attempt
        answered later would start leading on a write whose renew deadline has already
        passed, only to stop at once (and, with a rival, on a Lease it may have lost).
        An attempt cut short counts as failed; the next one reads the Lease afresh.
        """
        while True:
            sent = trio.current_time()
            outcome = _Attempt.FAILED
            with trio.move_on_after(self.renew_deadline):
                outcome = await self._attempt()
            if outcome is _Attempt.HELD:
                self._last_renew = sent
                return
            if trio.current_time() - sent >= self.renew_deadline:
                self._lease = None
                log.info(
                    "lease %s/%s: attempt by %s got no answer within %s s",
                    self.namespace,
                    self.name,
                    self.identity,
                    self.renew_deadline,
                )
            await self._sleep_retry()

    async def _keep_renewing(self) -> None:
        """Renew until a renewal misses ``renew_deadline`` or someone else holds the Lease."""
        while True:
            renewed = False
            with trio.move_on_at(self._last_renew + self.renew_deadline):
                await trio.sleep(self.retry_period)
                while True:
                    sent = trio.current_time()
                    outcome = await self._attempt()
                    if outcome is _Attempt.HELD:
                        self._last_renew = sent
                        renewed = True
                        break
                    if outcome is _Attempt.HELD_BY_OTHER:
                        log.warning(
                            "lease %s/%s: taken over; %s stops leading",
                            self.namespace,
                            self.name,
                            self.identity,
                        )
                        return
                    await self._sleep_retry()
            if not renewed:
                log.warning(
                    "lease %s/%s: %s could not renew within %s s; stops leading",
                    self.namespace,
                    self.name,
                    self.identity,
                    self.renew_deadline,
                )
                return

    async def _release(self) -> None:
        """Give the Lease up (holder cleared, 1 s duration) if we still hold it.

        Our last renewal may have been applied by the API server while its answer was lost
        (the term was cancelled mid-request): the write then conflicts, so the Lease is read
        afresh and, if we still hold it, released at its current resourceVersion.
        """
        lease = self._lease
        for fresh_read in (False, True):
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            released = copy.deepcopy(lease)
            spec = released.setdefault("spec", {})
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = format_micro_time(self._clock.now())
            try:
                self._lease = await self._kube.replace(LEASES, released)
                return
            except Conflict:
                if fresh_read:
                    break
                try:
                    lease = await self._kube.get(LEASES, self.name, self.namespace)
                except KubeError as exc:
                    self._log_release_failure(exc)
                    return
            except KubeError as exc:
                self._log_release_failure(exc)
                return
        log.info(
            "lease %s/%s: release by %s lost a race with another write",
            self.namespace,
            self.name,
            self.identity,
        )

    def _log_release_failure(self, exc: KubeError) -> None:
        log.info(
            "lease %s/%s: release by %s failed: %s", self.namespace, self.name, self.identity, exc
        )

    async def run(
        self,
        leading: Callable[[], Awaitable[object]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Campaign forever; run ``leading()`` during each term, cancelled when the term ends.

        Args:
            leading: the leader's work, ``async () -> ...``; started afresh each term.
            task_status: ``started()`` at once (campaigning has begun; leadership may come
                later or never).

        Returns:
            When ``leading()`` returns by itself (the Lease is released first).

        Raises:
            Whatever ``leading()`` raises (the Lease is released first).
        """
        task_status.started()
        try:
            while True:
                await self._acquire()
                finished = await self._term(leading)
                if finished:
                    return
        finally:
            self.is_leader = False
            with trio.move_on_after(self.renew_deadline) as cleanup:
                cleanup.shield = True
                await self._release()

    async def _term(self, leading: Callable[[], Awaitable[object]]) -> bool:
        finished = False
        self.is_leader = True
        self.terms += 1
        log.info("lease %s/%s: %s is the leader", self.namespace, self.name, self.identity)
        try:
            async with trio.open_nursery() as nursery:

                async def work() -> None:
                    nonlocal finished
                    await leading()
                    finished = True
                    nursery.cancel_scope.cancel()

                nursery.start_soon(work)
                await self._keep_renewing()
                nursery.cancel_scope.cancel()
        finally:
            self.is_leader = False
        return finished


async def lead(
    kube: KubeClient,
    leading: Callable[[], Awaitable[object]],
    *,
    namespace: str,
    name: str,
    identity: str,
    lease_duration: float = 15.0,
    renew_deadline: float = 10.0,
    retry_period: float = 2.0,
    clock: Clock | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``leading()`` only while holding the Lease ``namespace/name``; see the module doc.

    Equivalent to ``LeaderElector(...).run(leading, task_status=task_status)``; use the
    class to observe ``is_leader``.

    Raises:
        ValueError: invalid timing (see :class:`LeaderElector`).
    """
    elector = LeaderElector(
        kube,
        namespace=namespace,
        name=name,
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        clock=clock,
    )
    await elector.run(leading, task_status=task_status)
