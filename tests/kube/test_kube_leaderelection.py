"""Leader election: timing on autojump_clock with an in-memory Lease store, then localkube.

The safety property under test: two candidates' leading intervals never overlap, whatever
the API does (partitions, slow answers, crashes), and a healthy successor takes over within
``lease_duration`` plus a retry after the leader stops renewing.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import trio
import trio.testing
from conftest import eventually
from kube_fakes import FakeKube, ObjectStore

from krt.kube import errors
from krt.kube.client import Kube
from krt.kube.clock import TrioLinkedClock, parse_time
from krt.kube.leaderelection import LeaderElector, lead
from krt.kube.resources import LEASES

Interval = tuple[str, float, float]


def recorder(intervals: list[Interval], name: str) -> Callable[[], Awaitable[None]]:
    async def leading() -> None:
        start = trio.current_time()
        try:
            await trio.sleep_forever()
        finally:
            intervals.append((name, start, trio.current_time()))

    return leading


def assert_no_overlap(intervals: list[Interval]) -> None:
    ordered = sorted(intervals, key=lambda i: i[1])
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert after[1] >= before[2], f"{before} overlaps {after}"


def elector(client: Any, identity: str, **timing: float) -> LeaderElector:
    timing = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0, **timing}
    return LeaderElector(
        client,
        namespace="ns",
        name="lock",
        identity=identity,
        clock=TrioLinkedClock(datetime(2026, 1, 1, tzinfo=UTC)),
        **timing,  # type: ignore[arg-type]
    )


async def test_single_candidate_leads_and_renews(autojump_clock: trio.testing.MockClock) -> None:
    store = ObjectStore()
    a = elector(FakeKube(store, "a"), "a")
    intervals: list[Interval] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(a.run, recorder(intervals, "a")))
        await trio.sleep(0.001)
        assert a.is_leader
        lease = store.objects[("leases.coordination.k8s.io", "ns", "lock")]
        spec = lease["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 15
        assert spec["renewTime"] == "2026-01-01T00:00:00.000000Z"
        await trio.sleep(7)
        spec = store.objects[("leases.coordination.k8s.io", "ns", "lock")]["spec"]
        assert parse_time(spec["renewTime"]) == datetime(2026, 1, 1, 0, 0, 6, tzinfo=UTC)
        assert spec["acquireTime"] == "2026-01-01T00:00:00.000000Z"
        nursery.cancel_scope.cancel()
    assert intervals == [("a", 0.0, 7.001)]
    # cancelled: the lease was released so a successor need not wait for expiry
    assert (
        store.objects[("leases.coordination.k8s.io", "ns", "lock")]["spec"]["holderIdentity"] == ""
    )


async def test_partitioned_leader_stops_before_successor_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ObjectStore()
    client_a, client_b = FakeKube(store, "a"), FakeKube(store, "b")
    a, b = elector(client_a, "a"), elector(client_b, "b")
    intervals: list[Interval] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(a.run, recorder(intervals, "a")))
        await trio.sleep(0.5)
        await nursery.start(functools.partial(b.run, recorder(intervals, "b")))
        await trio.sleep(20)
        assert a.is_leader
        assert not b.is_leader
        client_a.partitioned = True
        partition_at = trio.current_time()
        await trio.sleep(40)
        assert b.is_leader
        assert not a.is_leader
        nursery.cancel_scope.cancel()
    assert_no_overlap(intervals)
    a_end = next(i[2] for i in intervals if i[0] == "a")
    b_start = next(i[1] for i in intervals if i[0] == "b")
    # a stops within renew_deadline of its last successful renewal (<= 2.4 s before the cut)
    assert a_end - partition_at <= 10.0
    # b sees a's last write within one retry (<= 2.4 s), waits lease_duration from then,
    # and takes over at its next retry (<= 2.4 s more)
    assert b_start - partition_at <= 2.4 + 15.0 + 2.4 + 0.01
    assert b_start - partition_at >= 15.0 - 2.4
    assert b.terms == 1


async def test_slow_renewal_cancels_leading_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ObjectStore()
    client = FakeKube(store, "a")
    a = elector(client, "a")
    intervals: list[Interval] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(a.run, recorder(intervals, "a")))
        await trio.sleep(3)  # renewed at t=2 (sent at t=2)
        client.latency = 1000.0  # every request now hangs
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    name, start, end = intervals[0]
    assert (name, start) == ("a", 0.0)
    assert end == pytest.approx(2.0 + 10.0)  # last renew sent at 2 s + renew_deadline


async def test_an_acquire_answered_after_the_renew_deadline_does_not_start_leading(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stalled API server (25 s) must not make a candidate lead on a write sent longer
    than renew_deadline ago, only to stop at once: the attempt is cut at the deadline and
    a fresh one, once the server answers again, starts a term that lasts."""
    store = ObjectStore()
    client = FakeKube(store, "a", latency=25.0)
    a = elector(client, "a")
    intervals: list[Interval] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(a.run, recorder(intervals, "a")))
        await trio.sleep(12)
        assert not a.is_leader  # the first attempt was cut at 10 s
        client.latency = 0.0
        await trio.sleep(20)
        assert a.is_leader
        nursery.cancel_scope.cancel()
    assert len(intervals) == 1  # one term, not a flap of a term that ends at once
    assert a.terms == 1
    assert intervals[0][1] <= 10.0 + 2.0 * 1.2 + 25.0  # the next attempt answers promptly


async def test_release_after_a_renewal_whose_answer_was_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The term was cancelled while a renewal was in flight: the API server applied it but
    the answer never came, so the leader's copy of the Lease is one version behind. The
    release must still clear the holder (read afresh after the conflict), or a successor
    waits the whole lease duration."""
    store = ObjectStore()
    a = elector(FakeKube(store, "a"), "a")
    key = ("leases.coordination.k8s.io", "ns", "lock")
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(a.run, recorder([], "a")))
        await trio.sleep(3)
        assert a.is_leader
        # the lost renewal: applied at the server, a newer resourceVersion, holder still a
        store.objects[key]["metadata"]["resourceVersion"] = str(next(store._versions))
        nursery.cancel_scope.cancel()
    assert store.objects[key]["spec"]["holderIdentity"] == ""


async def test_leading_returning_releases_and_hands_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ObjectStore()
    a, b = elector(FakeKube(store, "a"), "a"), elector(FakeKube(store, "b"), "b")
    intervals: list[Interval] = []

    async def short_job() -> None:
        start = trio.current_time()
        await trio.sleep(5)
        intervals.append(("a", start, trio.current_time()))

    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(a.run, short_job))
        await trio.sleep(0.1)
        await nursery.start(functools.partial(b.run, recorder(intervals, "b")))
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert_no_overlap(intervals)
    b_start = next(i[1] for i in intervals if i[0] == "b")
    # released: b needs one retry period (jittered), not a whole lease_duration
    assert 5.0 <= b_start <= 5.0 + 2.4 + 0.01


async def test_leading_exception_propagates_and_releases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ObjectStore()
    a = elector(FakeKube(store, "a"), "a")

    async def broken() -> None:
        await trio.sleep(1)
        raise RuntimeError("leader bug")

    with pytest.RaisesGroup(
        pytest.RaisesExc(RuntimeError, match="leader bug"), flatten_subgroups=True
    ):
        await a.run(broken)
    assert (
        store.objects[("leases.coordination.k8s.io", "ns", "lock")]["spec"]["holderIdentity"] == ""
    )


async def test_random_faults_never_produce_two_leaders(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rng = random.Random(1234)
    store = ObjectStore()
    clients = [FakeKube(store, f"c{i}", latency=0.01) for i in range(3)]
    electors = [elector(c, c.name) for c in clients]
    intervals: list[Interval] = []

    async def chaos() -> None:
        while True:
            await trio.sleep(rng.uniform(1, 20))
            victim = rng.choice(clients)
            victim.partitioned = not victim.partitioned
            victim.latency = rng.choice([0.01, 0.01, 3.0, 12.0])

    with trio.move_on_after(2000):
        async with trio.open_nursery() as nursery:
            for e in electors:
                await nursery.start(functools.partial(e.run, recorder(intervals, e.identity)))
            nursery.start_soon(chaos)
    assert_no_overlap(intervals)
    assert len(intervals) >= 5  # leadership really moved around


def test_timing_is_validated() -> None:
    client: Any = object()
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderElector(
            client, namespace="n", name="l", identity="a", lease_duration=5, renew_deadline=5
        )
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElector(
            client,
            namespace="n",
            name="l",
            identity="a",
            lease_duration=15,
            renew_deadline=2,
            retry_period=2,
        )
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(client, namespace="n", name="l", identity="")
    with pytest.raises(ValueError, match="> 0"):
        LeaderElector(client, namespace="n", name="l", identity="a", retry_period=0)


class PartitionableKube:
    """A real Kube whose calls fail while ``partitioned`` (a leader cut off from the API)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.partitioned = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._kube, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.partitioned:
                raise errors.ConnectionFailed("partitioned (simulated)")
            return await method(*args, **kwargs)

        return call


async def test_two_leaders_never_overlap_on_localkube(kube: Kube) -> None:
    # Real time against a real API server: the shielded release at cancellation is bounded
    # by renew_deadline, so it gets headroom for a loaded CI machine (0.4 s was too tight).
    timing = {"lease_duration": 1.8, "renew_deadline": 1.2, "retry_period": 0.3}
    a_kube = PartitionableKube(kube)
    intervals: list[Interval] = []
    a = LeaderElector(a_kube, namespace="default", name="lock", identity="a", **timing)  # type: ignore[arg-type]
    b = LeaderElector(kube, namespace="default", name="lock", identity="b", **timing)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(a.run, recorder(intervals, "a")))
        await eventually(lambda: a.is_leader)
        await nursery.start(functools.partial(b.run, recorder(intervals, "b")))
        await trio.sleep(1.5)
        assert a.is_leader  # b waits while a renews
        assert not b.is_leader
        a_kube.partitioned = True
        await eventually(lambda: b.is_leader)
        assert not a.is_leader
        a_kube.partitioned = False
        await trio.sleep(0.9)  # a campaigns again but must not take over from a live b
        assert not a.is_leader
        assert b.is_leader
        nursery.cancel_scope.cancel()
    assert_no_overlap(intervals)
    assert [i[0] for i in sorted(intervals, key=lambda i: i[1])] == ["a", "b"]
    lease = await kube.get(LEASES, "lock", "default")
    assert lease["spec"]["holderIdentity"] == ""  # b released it when cancelled
    assert lease["spec"]["leaseTransitions"] >= 1


async def test_lead_function_runs_the_elector(autojump_clock: trio.testing.MockClock) -> None:
    store = ObjectStore()
    intervals: list[Interval] = []
    with trio.move_on_after(5):
        await lead(
            FakeKube(store, "a"),  # type: ignore[arg-type]
            recorder(intervals, "a"),
            namespace="ns",
            name="lock",
            identity="a",
        )
    assert intervals == [("a", 0.0, 5.0)]
