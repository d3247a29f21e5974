"""The parsed, indexed Run cache and the incremental capacity ledger (issue 6: CPU per Run).

The index and the ledger replace scans of every cached Run on every event; these tests pin
that they answer exactly what the scans answered: the same parsed Runs, the same Runs per
Runtime, per Pod and Pending (oldest first), and the same per-Pod usage as
:func:`~krt.controlplane.capacity.usage_by_pod` computed from scratch.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
import trio

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.phases import Phase
from krt.api.run import Run
from krt.api.times import format_time
from krt.controlplane.capacity import CapacityLedger, usage_by_pod
from krt.controlplane.run_index import RunIndex
from krt.kube.clock import TrioLinkedClock
from krt.kube.resources import RUNS, RUNTIMES

from .builders import NOW, run_dict, runtime_dict
from .fakekube import FakeKube
from .test_loops import NS, add_pod, plane, set_status, until


def _obj(name: str, **kwargs: Any) -> dict[str, Any]:
    return run_dict(name, **kwargs)


def test_index_parses_each_version_once_and_keeps_the_replaced_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parses: list[str] = []
    original = Run.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Run], data: Mapping[str, Any]) -> Run:
        parses.append(data["metadata"]["resourceVersion"])
        return original(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(Run, "from_dict", classmethod(counting))
    index = RunIndex()
    first = _obj("a", rv="1")
    run = index.upsert((NS, "a"), first)
    assert run is not None
    assert index.upsert((NS, "a"), first) is run  # a RESYNC of the same object
    second = _obj("a", rv="2", phase=Phase.SCHEDULED, pod="p")
    index.upsert((NS, "a"), second)
    assert parses == ["1", "2"]
    assert index.parsed((NS, "a"), first) == (True, run)  # the event's old version
    found, current = index.parsed((NS, "a"), second)
    assert found
    assert current is not None
    assert current.status.phase is Phase.SCHEDULED
    assert index.parsed((NS, "a"), _obj("a", rv="2")) == (False, None)  # equal, not the same


def test_latest_answers_by_identity_for_the_last_change_only() -> None:
    index = RunIndex()
    first = _obj("a", rv="1")
    other = _obj("b", rv="5")
    run_a = index.upsert((NS, "a"), first)
    assert index.latest(first) == (True, run_a)
    run_b = index.upsert((NS, "b"), other)
    assert index.latest(other) == (True, run_b)
    assert index.latest(first) == (False, None)  # no longer the last change: ask parsed()
    assert index.parsed((NS, "a"), first) == (True, run_a)
    second = _obj("a", rv="2", phase=Phase.SCHEDULED, pod="p")
    run_a2 = index.upsert((NS, "a"), second)
    assert index.latest(second) == (True, run_a2)
    assert index.latest(first) == (True, run_a)  # the version that change replaced
    assert index.latest(_obj("a", rv="2", phase=Phase.SCHEDULED, pod="p")) == (False, None)
    index.remove((NS, "a"))
    assert index.latest(second) == (True, run_a2)  # a DELETED event's handlers see it too


def test_index_buckets_follow_every_change() -> None:
    index = RunIndex()
    index.upsert((NS, "a"), _obj("a", runtime="py"))
    index.upsert((NS, "b"), _obj("b", runtime="py", phase=Phase.RUNNING, pod="p1"))
    index.upsert((NS, "c"), _obj("c", runtime="sh", phase=Phase.SCHEDULED, pod="p1"))
    assert [r.metadata.name for r in index.of_runtime(NS, "py")] == ["a", "b"]
    assert [r.metadata.name for r in index.on_pod("uid-p1")] == ["b", "c"]
    assert [r.metadata.name for r in index.pending_of_runtime(NS, "py")] == ["a"]
    # a bind moves the Run out of Pending and onto the Pod
    index.upsert((NS, "a"), _obj("a", runtime="py", phase=Phase.SCHEDULED, pod="p2", rv="2"))
    assert index.pending_of_runtime(NS, "py") == []
    assert [r.metadata.name for r in index.on_pod("uid-p2")] == ["a"]
    # a requeue clears the assignment and makes it Pending again
    index.upsert((NS, "a"), _obj("a", runtime="py", rv="3"))
    assert index.on_pod("uid-p2") == []
    assert [r.metadata.name for r in index.pending_of_runtime(NS, "py")] == ["a"]
    # a deleting Pending Run is not schedulable
    index.upsert((NS, "a"), _obj("a", runtime="py", rv="4", deleting=True))
    assert index.pending_of_runtime(NS, "py") == []
    index.remove((NS, "b"))
    assert [r.metadata.name for r in index.of_runtime(NS, "py")] == ["a"]
    assert [r.metadata.name for r in index.on_pod("uid-p1")] == ["c"]
    assert index.get((NS, "b")) is None


def test_pending_order_is_creation_time_then_arrival_not_name() -> None:
    index = RunIndex()
    late = _obj("a-late")
    late["metadata"]["creationTimestamp"] = format_time(NOW + timedelta(seconds=1))
    for name in ("z-first", "m-second"):
        obj = _obj(name)
        obj["metadata"]["creationTimestamp"] = format_time(NOW)
        index.upsert((NS, name), obj)
    index.upsert((NS, "a-late"), late)
    earliest = _obj("b-earliest")
    earliest["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(seconds=1))
    index.upsert((NS, "b-earliest"), earliest)
    expected = ["b-earliest", "z-first", "m-second", "a-late"]
    assert [r.metadata.name for r in index.pending_of_runtime(NS, "python")] == expected
    assert [r.metadata.name for r in index.pending()] == expected


def test_malformed_run_is_logged_once_per_version_and_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = RunIndex()
    bad = _obj("bad")
    bad["spec"]["runtime"] = 7
    with caplog.at_level(logging.WARNING):
        assert index.upsert((NS, "bad"), bad) is None
        assert index.upsert((NS, "bad"), bad) is None
    assert len([r for r in caplog.records if "malformed Run" in r.message]) == 1
    assert "spec.runtime" in caplog.records[0].message
    assert index.parsed((NS, "bad"), bad) == (True, None)
    assert index.of_runtime(NS, "7") == []
    assert len(index) == 0


def _normal(usage: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    return {
        pod: {name: quantity for name, quantity in resources.items() if quantity}
        for pod, resources in usage.items()
        if any(resources.values())
    }


@pytest.mark.parametrize("seed", range(5))
def test_ledger_matches_sums_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    ledger = CapacityLedger()
    model: dict[str, tuple[str, str, dict[str, int]]] = {}
    for _ in range(400):
        uid = f"run-{rng.randrange(12)}"
        if rng.random() < 0.3:
            ledger.uncount(uid)
            model.pop(uid, None)
        else:
            group = rng.choice(["ns/a", "ns/b"])
            pod = f"{group}-pod-{rng.randrange(3)}"
            requests = {"runs": rng.randrange(1, 3), "gpu": rng.randrange(0, 2)}
            ledger.count(uid, group, pod, requests)
            model[uid] = (group, pod, requests)
        for group in ("ns/a", "ns/b"):
            expected: dict[str, dict[str, int]] = {}
            for counted_group, pod, requests in model.values():
                if counted_group == group:
                    totals = expected.setdefault(pod, {})
                    for name, quantity in requests.items():
                        totals[name] = totals.get(name, 0) + quantity
            assert _normal(ledger.usage(group)) == _normal(expected)
    assert len(ledger) == len(model)


async def test_scheduler_ledger_and_index_match_the_store_through_random_changes(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Random creates, binds, status changes, requeues and deletions (with and without the
    cleanup finalizer): after each, the index equals a parse of the store, and the ledger
    equals :func:`usage_by_pod` of the cached Runs and assumptions.

    (Capacity itself can be exceeded here by design: deleting a finished Run that still
    holds the cleanup finalizer makes it hold capacity again; see test_scheduler_order.)
    """
    rng = random.Random(7)
    clock = TrioLinkedClock(epoch=NOW)
    fake = FakeKube(clock)
    await fake.create(RUNTIMES, runtime_dict(runs=3))
    await add_pod(fake, "p-a")
    await add_pod(fake, "p-b")
    async with plane(fake, clock, resync_seconds=3600) as running:
        caches, scheduler = running.caches, running.scheduler
        for step in range(150):
            names = sorted(name for (kind, _, name) in fake.objects if kind == "runs")
            choice = rng.random()
            if choice < 0.3 or not names:
                run = run_dict(f"r{step}", requests={"runs": rng.randrange(1, 3)})
                run["metadata"] = {"name": f"r{step}", "namespace": NS}
                if rng.random() < 0.3:
                    run["metadata"]["finalizers"] = [REGISTRATION_CLEANUP_FINALIZER]
                await fake.create(RUNS, run)
            else:
                name = rng.choice(names)
                stored = fake.peek(RUNS, NS, name) or {}
                phase = (stored.get("status") or {}).get("phase", "Pending")
                if choice < 0.5 and phase in ("Scheduled", "Running"):
                    await set_status(fake, RUNS, name, {"phase": rng.choice(["Running", "Ready"])})
                elif choice < 0.65 and phase != "Pending":
                    done = {"phase": "Succeeded", "completionTime": format_time(clock.now())}
                    await set_status(fake, RUNS, name, done)
                elif choice < 0.75 and phase in ("Scheduled", "Running"):
                    requeue = {"phase": "Pending", "assignedPod": None, "assignedPodUID": None}
                    await set_status(fake, RUNS, name, requeue)
                elif choice < 0.9:
                    await fake.delete(RUNS, name, NS)
                else:
                    await fake.patch(RUNS, name, NS, {"metadata": {"finalizers": None}})
            await trio.sleep(0.01)
            stored_runs = {
                name: Run.from_dict(obj)
                for (kind, _, name), obj in fake.objects.items()
                if kind == "runs"
            }
            indexed = {run.metadata.name: run for run in caches.run_index.runs()}
            assert indexed == stored_runs
            assert {r.metadata.name for r in caches.runs_of_runtime(NS, "python")} == set(
                stored_runs
            )
            for pod_uid in {r.status.assigned_pod_uid for r in stored_runs.values()} - {None}:
                assert {r.metadata.name for r in caches.runs_on_pod(str(pod_uid))} == {
                    name for name, r in stored_runs.items() if r.status.assigned_pod_uid == pod_uid
                }
            usage = scheduler.ledger.usage(f"{NS}/python")
            expected = usage_by_pod(indexed.values(), scheduler.assumed)
            assert _normal(usage) == _normal(expected)


async def test_a_changed_runtime_is_parsed_again(autojump_clock: trio.abc.Clock) -> None:
    """Runtimes are parsed once per version: raising capacity binds the waiting Run at once."""
    clock = TrioLinkedClock(epoch=NOW)
    fake = FakeKube(clock)
    await fake.create(RUNTIMES, runtime_dict(runs=1))
    await add_pod(fake, "p-a")
    async with plane(fake, clock, resync_seconds=3600) as running:
        for name in ("r1", "r2"):
            run = run_dict(name)
            run["metadata"] = {"name": name, "namespace": NS}
            await fake.create(RUNS, run)
        await trio.sleep(1)
        assert running.scheduler.bound == 1
        before = running.caches.get_runtime(NS, "python")
        assert before is running.caches.get_runtime(NS, "python")  # kept while unchanged
        raised = trio.current_time()
        await fake.patch(RUNTIMES, "python", NS, {"spec": {"capacity": {"resources": {"runs": 2}}}})
        await until(lambda: running.scheduler.bound == 2)
        assert trio.current_time() - raised < 0.1
        after = running.caches.get_runtime(NS, "python")
        assert after is not None
        assert after.spec.effective_capacity == {"runs": 2}
