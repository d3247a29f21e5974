"""runtimed heartbeat Leases: the pure freshness rule and renewal against localkube."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing
from kube_fakes import FakeKube, ObjectStore

from krt.kube.client import Kube
from krt.kube.clock import FakeClock, TrioLinkedClock
from krt.kube.errors import NotFound
from krt.kube.heartbeat import (
    heartbeat_fresh,
    heartbeat_lease_name,
    renew_heartbeat,
    run_heartbeat,
)
from krt.kube.resources import LEASES, PODS

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def lease(
    holder: Any = "uid-1", renew: Any = "2026-03-01T12:00:00.000000Z", duration: Any = 40
) -> dict[str, Any]:
    return {
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration}
    }


def test_fresh_until_renew_time_plus_duration() -> None:
    now = T0.timestamp()
    assert heartbeat_fresh(lease(), "uid-1", now)
    assert heartbeat_fresh(lease(), "uid-1", now + 39.999)
    assert not heartbeat_fresh(lease(), "uid-1", now + 40)
    assert not heartbeat_fresh(lease(), "uid-1", now + 41)


def test_holder_must_be_the_current_pod_uid() -> None:
    assert not heartbeat_fresh(lease(holder="uid-old"), "uid-1", T0.timestamp())
    assert not heartbeat_fresh(lease(), "", T0.timestamp())


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"spec": None},
        lease(renew=None),
        lease(renew="yesterday"),
        lease(duration=None),
        lease(duration=0),
        lease(duration="40"),
        lease(duration=True),
    ],
)
def test_malformed_lease_is_not_fresh(bad: dict[str, Any]) -> None:
    assert not heartbeat_fresh(bad, "uid-1", T0.timestamp() - 1000)


def test_lease_name() -> None:
    assert heartbeat_lease_name("rt-abc") == "runtimed-rt-abc"
    with pytest.raises(ValueError, match="253"):
        heartbeat_lease_name("p" * 250)
    with pytest.raises(ValueError, match="empty"):
        heartbeat_lease_name("")


async def test_renew_creates_then_renews_with_one_request(kube: Kube) -> None:
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": "rt-1", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
        },
    )
    uid = pod["metadata"]["uid"]
    clock = FakeClock(T0)
    first = await renew_heartbeat(
        kube, namespace="default", pod_name="rt-1", pod_uid=uid, clock=clock
    )
    assert first["metadata"]["name"] == "runtimed-rt-1"
    assert first["metadata"]["ownerReferences"][0]["uid"] == uid
    assert first["spec"]["holderIdentity"] == uid
    assert first["spec"]["leaseDurationSeconds"] == 40
    assert first["spec"]["renewTime"] == "2026-03-01T12:00:00.000000Z"
    clock.advance(10.5)
    before = kube.requests
    second = await renew_heartbeat(
        kube, namespace="default", pod_name="rt-1", pod_uid=uid, clock=clock, previous=first
    )
    assert kube.requests == before + 1
    assert second["spec"]["renewTime"] == "2026-03-01T12:00:10.500000Z"
    assert second["spec"]["acquireTime"] == first["spec"]["acquireTime"]
    assert heartbeat_fresh(second, uid, (T0 + timedelta(seconds=50)).timestamp())
    assert not heartbeat_fresh(second, uid, (T0 + timedelta(seconds=50.5)).timestamp())

    # a stale ``previous`` conflicts; the helper re-reads once and succeeds
    clock.advance(10)
    third = await renew_heartbeat(
        kube, namespace="default", pod_name="rt-1", pod_uid=uid, clock=clock, previous=first
    )
    assert third["spec"]["renewTime"] == "2026-03-01T12:00:20.500000Z"


async def test_recreated_pod_takes_over_its_lease() -> None:
    # in-memory store: no garbage collector deletes the Lease of the gone Pod first
    kube: Any = FakeKube(ObjectStore())
    clock = FakeClock(T0)
    old = await renew_heartbeat(
        kube, namespace="default", pod_name="rt-1", pod_uid="uid-old", clock=clock
    )
    new = await renew_heartbeat(
        kube, namespace="default", pod_name="rt-1", pod_uid="uid-new", clock=clock
    )
    assert new["spec"]["holderIdentity"] == "uid-new"
    assert new["spec"]["leaseTransitions"] == 1
    assert new["metadata"]["ownerReferences"][0]["uid"] == "uid-new"
    assert old["metadata"]["uid"] == new["metadata"]["uid"]
    stored = await kube.get(LEASES, "runtimed-rt-1", "default")
    assert not heartbeat_fresh(stored, "uid-old", T0.timestamp())
    assert heartbeat_fresh(stored, "uid-new", T0.timestamp())


async def test_lease_is_garbage_collected_with_its_pod(kube: Kube) -> None:
    pod = await kube.create(
        PODS,
        {
            "metadata": {"name": "rt-2", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
        },
    )
    await renew_heartbeat(
        kube,
        namespace="default",
        pod_name="rt-2",
        pod_uid=pod["metadata"]["uid"],
        clock=FakeClock(T0),
    )
    await kube.delete(PODS, "rt-2", "default", grace_period_seconds=0)
    with trio.fail_after(5):
        while True:
            try:
                await kube.get(LEASES, "runtimed-rt-2", "default")
            except NotFound:
                break
            await trio.sleep(0.02)


async def test_run_heartbeat_renews_every_period(autojump_clock: trio.testing.MockClock) -> None:
    store = ObjectStore()
    client = FakeKube(store, "runtimed")
    clock = TrioLinkedClock(T0)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(
                run_heartbeat,
                client,
                namespace="ns",
                pod_name="p",
                pod_uid="u",
                clock=clock,  # type: ignore[arg-type]
            )
        )
        await trio.sleep(35)
        client.partitioned = True
        await trio.sleep(20)
        client.partitioned = False
        await trio.sleep(15)
        nursery.cancel_scope.cancel()
    times = [t for t, _, _ in store.writes]
    assert times[:4] == [0.0, 10.0, 20.0, 30.0]
    # during the outage retries back off (0.5 s doubling, capped at the period) and the first
    # renewal after it lands within one period
    after = [t for t in times if t > 55.0]
    assert after
    assert after[0] <= 55.0 + 10.0
    renew = store.objects[("leases.coordination.k8s.io", "ns", "runtimed-p")]["spec"]["renewTime"]
    assert renew.startswith("2026-03-01T12:01:")


async def test_run_heartbeat_validates_period() -> None:
    with pytest.raises(ValueError, match="period"):
        await run_heartbeat(
            object(),
            namespace="n",
            pod_name="p",
            pod_uid="u",
            clock=FakeClock(),
            period=40,  # type: ignore[arg-type]
        )
