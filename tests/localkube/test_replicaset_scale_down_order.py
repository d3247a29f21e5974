"""The ReplicaSet scale-down order: Kubernetes 1.32's ``ActivePodsWithRanks.Less``.

One test per rule: each pair of Pods is told apart by the rule under test, and the rules
after it would order the pair the other way, so the test fails if its rule is removed.
"""

from __future__ import annotations

from typing import Any

import pytest

from krt.kube.deletion_cost import POD_DELETION_COST_ANNOTATION, pod_deletion_cost
from localkube.controllers.common import now_rfc3339
from localkube.controllers.replicaset import (
    compare_for_deletion,
    deletion_order,
    plan_replicaset,
)

NOW = 1_800_000_000.0


def pod(
    name: str,
    *,
    node: str | None = "localkube",
    phase: str = "Running",
    ready_for: float | None = 3600.0,
    created_ago: float = 7200.0,
    restarts: tuple[int, ...] = (0,),
    cost: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A ReplicaSet Pod; ``ready_for`` seconds Ready (``None``: not Ready)."""
    conditions = [
        {
            "type": "Ready",
            "status": "True" if ready_for is not None else "False",
            "lastTransitionTime": now_rfc3339(NOW - (ready_for or 5.0)),
        }
    ]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": uid or f"uid-{name}",
        "labels": {"app": "a"},
        "ownerReferences": [
            {"kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
        ],
        "creationTimestamp": now_rfc3339(NOW - created_ago),
    }
    if cost is not None:
        meta["annotations"] = {POD_DELETION_COST_ANNOTATION: cost}
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [
                {"name": f"c{i}", "restartCount": n} for i, n in enumerate(restarts)
            ],
        },
    }


def first(*pods: dict[str, Any], now: float = NOW) -> list[str]:
    """Names in deletion order."""
    return [p["metadata"]["name"] for p in deletion_order(list(pods), now=now)]


def test_rule1_unassigned_pod_goes_before_assigned() -> None:
    # rule 2 alone would delete the Pending one first
    unassigned = pod("unassigned", node=None)
    pending = pod("pending", phase="Pending", ready_for=None)
    assert first(pending, unassigned) == ["unassigned", "pending"]


def test_rule2_pending_then_unknown_then_running() -> None:
    # rule 3 alone would delete the not-ready Running one first
    running = pod("running", ready_for=None)
    unknown = pod("unknown", phase="Unknown")
    pending = pod("pending", phase="Pending")
    assert first(running, unknown, pending) == ["pending", "unknown", "running"]


def test_rule3_not_ready_before_ready() -> None:
    # rule 4 alone would delete the cheaper (ready) one first
    not_ready = pod("not-ready", ready_for=None, cost="100")
    ready = pod("ready")
    assert first(ready, not_ready) == ["not-ready", "ready"]


def test_rule4_lower_deletion_cost_first() -> None:
    # rule 6 alone would delete the one Ready for less time (busy) first
    busy = pod("busy", ready_for=5.0, cost="2")
    idle = pod("idle", ready_for=3600.0)
    assert first(busy, idle) == ["idle", "busy"]
    negative = pod("negative", ready_for=3600.0, cost="-1")
    assert first(idle, negative) == ["negative", "idle"]


@pytest.mark.parametrize(
    ("value", "cost"),
    [
        (None, 0),
        ("0", 0),
        ("7", 7),
        ("-3", -3),
        ("2147483647", 2**31 - 1),
        ("-2147483648", -(2**31)),
        ("2147483648", 0),  # out of int32
        ("+5", 0),  # no plus sign
        ("007", 0),  # no leading zeros
        ("-0", 0),
        ("", 0),
        ("1.5", 0),
        ("ten", 0),
        ("\u0663", 0),  # a non-ASCII digit
    ],
)
def test_deletion_cost_parsing(value: str | None, cost: int) -> None:
    assert pod_deletion_cost(pod("p", cost=value)) == cost


def test_rule6_ready_for_less_time_first() -> None:
    # rule 7 alone would delete the one with restarts, rule 8 the newer one
    recent = pod("recent", ready_for=10.0, created_ago=9000.0)
    long_ready = pod("long-ready", ready_for=5000.0, created_ago=6000.0, restarts=(4,))
    assert first(long_ready, recent) == ["recent", "long-ready"]


def test_rule6_compares_ready_times_in_logarithmic_buckets_then_uid() -> None:
    # 100 s and 120 s are both in bucket int(log2(1e11..1.2e11 ns)) = 36: UID decides
    a = pod("ready-120s", ready_for=120.0, uid="a")
    b = pod("ready-100s", ready_for=100.0, uid="b")
    assert first(b, a) == ["ready-120s", "ready-100s"]
    # 10 s and 120 s are in different buckets: the more recently Ready goes first
    c = pod("ready-10s", ready_for=10.0, uid="c")
    assert first(a, c) == ["ready-10s", "ready-120s"]


def test_rule6_reference_time_is_the_argument() -> None:
    older = pod("older", ready_for=60.0, uid="a")
    newer = pod("newer", ready_for=10.0, uid="b")
    assert first(older, newer) == ["newer", "older"]
    # a day later both ages fall in one bucket, and the UID decides
    assert first(newer, older, now=NOW + 86400.0) == ["older", "newer"]


def test_rule6_only_when_both_ready() -> None:
    # both not Ready: their (different) transition times do not count; rule 8 decides
    a = pod("a", ready_for=None, created_ago=100.0)
    b = pod("b", ready_for=None, created_ago=10_000.0)
    b["status"]["conditions"][0]["lastTransitionTime"] = now_rfc3339(NOW - 1.0)
    assert first(b, a) == ["a", "b"]


def test_rule7_more_restarts_of_one_container_first() -> None:
    # the maximum counts, not the sum; rule 8 alone would delete the newer Pod first
    one_crashy = pod("one-crashy", restarts=(0, 3), created_ago=9000.0)
    spread = pod("spread", restarts=(2, 2), created_ago=10.0)
    assert first(spread, one_crashy) == ["one-crashy", "spread"]


def test_rule8_newer_first_in_logarithmic_buckets() -> None:
    old = pod("old", created_ago=10_000.0)
    new = pod("new", created_ago=10.0)
    assert first(old, new) == ["new", "old"]
    # 100 s and 120 s old: one bucket, so the UID decides
    a = pod("created-120s", created_ago=120.0, uid="a")
    b = pod("created-100s", created_ago=100.0, uid="b")
    assert first(b, a) == ["created-120s", "created-100s"]


def test_missing_times_come_first() -> None:
    no_created = pod("no-created")
    del no_created["metadata"]["creationTimestamp"]
    assert first(pod("created"), no_created) == ["no-created", "created"]
    ready_unknown = pod("ready-unknown", ready_for=3600.0)
    del ready_unknown["status"]["conditions"][0]["lastTransitionTime"]
    assert first(pod("ready"), ready_unknown) == ["ready-unknown", "ready"]


def test_identical_pods_compare_equal() -> None:
    assert compare_for_deletion(pod("a", uid="x"), pod("b", uid="x"), now=NOW) == 0


def test_plan_deletes_the_cheapest_pod() -> None:
    """The repro: the older Pod holds Runs (cost 2), the newer one is idle; 2 -> 1."""
    rs = {
        "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid", "generation": 2},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}}},
    }
    busy = pod("busy", ready_for=16.0, created_ago=20.0, cost="2")
    idle = pod("idle", ready_for=8.0, created_ago=9.0, cost="0")
    plan = plan_replicaset(rs, [busy, idle], pending_creates=0, now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["idle"]
    # without costs, a Pod Ready for less time goes first even if it is the older one
    flapped = pod("flapped", ready_for=1.0, created_ago=20.0)
    steady = pod("steady", ready_for=8.0, created_ago=9.0)
    plan = plan_replicaset(rs, [steady, flapped], pending_creates=0, now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["flapped"]
