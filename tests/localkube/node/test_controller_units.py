"""Pure parts of the controllers, the proxy and the name map."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localkube.controllers.clusterip import needs_cluster_ip, with_cluster_ip
from localkube.controllers.common import selector_matches
from localkube.controllers.deployment import (
    HASH_LABEL,
    REVISION,
    new_replicaset,
    plan_rollout,
    resolve_fraction,
    template_hash,
)
from localkube.controllers.endpoints import desired_slices, desired_subsets, resolve_ports
from localkube.controllers.replicaset import owned_pods, plan_replicaset, pod_from_template
from localkube.names import hosts_lines, resolve, write_hosts
from localkube.proxy import Target, desired_listeners, ready_backends

NOW = 1_800_000_000.0


def pod(
    name: str,
    *,
    ready: bool = True,
    ip: str = "127.0.1.1",
    owner: str = "rs-uid",
    labels: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    p: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": labels if labels is not None else {"app": "a"},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": True}
            ],
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "nodeName": "localkube",
            "containers": [{"name": "c", "ports": [{"name": "tcp", "containerPort": 7000}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }
    p["metadata"].update(extra)
    return p


RS = {
    "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid", "generation": 4},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "a"}},
        "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c"}]}},
    },
}


def test_selector_semantics() -> None:
    sel = {
        "matchLabels": {"app": "a"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["x"]},
            {"key": "off", "operator": "DoesNotExist"},
        ],
    }
    assert selector_matches(sel, {"app": "a", "tier": "x"})
    assert not selector_matches(sel, {"app": "a", "tier": "y"})
    assert not selector_matches(sel, {"app": "a", "tier": "x", "off": "1"})
    assert not selector_matches({}, {"app": "a"})  # an empty selector selects nothing


def test_replicaset_counts_only_its_own_matching_pods() -> None:
    pods = [pod("a"), pod("b", owner="other"), pod("c", labels={"app": "z"})]
    assert [p["metadata"]["name"] for p in owned_pods(RS, pods)] == ["a"]


def test_replicaset_plan_scale_up_down_and_status() -> None:
    plan = plan_replicaset(RS, [pod("a")], pending_creates=0, now=NOW)
    assert (plan.create, plan.delete) == (2, [])
    assert plan.status == {
        "replicas": 1,
        "fullyLabeledReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "observedGeneration": 4,
    }
    # creations in flight are not repeated
    assert plan_replicaset(RS, [pod("a")], pending_creates=2, now=NOW).create == 0
    pods = [pod("ready1"), pod("notready", ready=False), pod("ready2"), pod("ready3")]
    plan = plan_replicaset(RS, pods, pending_creates=0, now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["notready"]  # cheapest first
    assert plan.status["readyReplicas"] == 3


def test_min_ready_seconds_delays_availability() -> None:
    rs = {**RS, "spec": {**RS["spec"], "minReadySeconds": 30}}
    fresh = pod("a")
    fresh["status"]["conditions"][0]["lastTransitionTime"] = "2027-01-15T08:00:00Z"
    plan = plan_replicaset(rs, [fresh], pending_creates=0, now=1_800_000_010.0)
    assert plan.status["readyReplicas"] == 1
    assert plan.status["availableReplicas"] == 0


def test_pod_from_template() -> None:
    p = pod_from_template(RS)
    assert p["metadata"]["name"].startswith("rs-")
    assert len(p["metadata"]["name"]) == len("rs-") + 5
    assert p["metadata"]["labels"] == {"app": "a"}
    assert p["metadata"]["ownerReferences"][0] == {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "rs",
        "uid": "rs-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def deploy(replicas: int = 4, **strategy: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "namespace": "ns", "uid": "d-uid", "generation": 2},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
            **({"strategy": strategy} if strategy else {}),
        },
    }


def rs(
    name: str, spec: int, available: int, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "uid": name},
        "spec": {"replicas": spec},
        "status": {"replicas": spec, "readyReplicas": available, "availableReplicas": available},
    }


def test_template_hash_is_stable_and_changes_with_the_template() -> None:
    t = deploy()["spec"]["template"]
    h = template_hash(t)
    assert h == template_hash(dict(t))
    assert h != template_hash(t, 1)
    changed = {**t, "spec": {"containers": [{"name": "c", "image": "j"}]}}
    assert h != template_hash(changed)
    assert set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    new = new_replicaset(deploy(), h, 3, 0)
    assert new["metadata"]["name"] == f"d-{h}"
    assert new["spec"]["selector"]["matchLabels"][HASH_LABEL] == h
    assert new["spec"]["template"]["metadata"]["labels"][HASH_LABEL] == h
    assert new["metadata"]["annotations"][REVISION] == "3"


def test_fractions() -> None:
    assert resolve_fraction(None, 4, round_up=True, default="25%") == 1
    assert resolve_fraction("30%", 4, round_up=True, default="25%") == 2
    assert resolve_fraction("30%", 4, round_up=False, default="25%") == 1
    assert resolve_fraction(2, 4, round_up=False, default="25%") == 2
    with pytest.raises(ValueError, match="percentage"):
        resolve_fraction("lots", 4, round_up=True, default="25%")


def test_rolling_update_respects_surge_and_unavailability() -> None:
    # 4 replicas, maxSurge 1, maxUnavailable 1 (25% of 4)
    d = deploy()
    plan = plan_rollout(d, rs("new", 0, 0), [rs("old", 4, 4)], now=NOW)
    assert plan.scale == {"new": 1, "old": 3}  # surge one, drop one old
    plan = plan_rollout(d, rs("new", 1, 0), [rs("old", 3, 3)], now=NOW)
    assert plan.scale == {"new": 2}  # 5 Pods at most; old stays: only 3 of 4 available
    plan = plan_rollout(d, rs("new", 2, 0), [rs("old", 3, 3)], now=NOW)
    assert plan.scale == {}  # at both limits: wait for new Pods to become available
    plan = plan_rollout(d, rs("new", 2, 2), [rs("old", 3, 3)], now=NOW)
    assert plan.scale == {"old": 1}  # 5 available, 3 needed: two old Pods may go
    plan = plan_rollout(d, rs("new", 4, 4), [rs("old", 0, 0)], now=NOW)
    assert plan.scale == {}
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conds["Available"]["status"] == "True"
    assert plan.status["updatedReplicas"] == 4
    assert plan.status["observedGeneration"] == 2


def test_rolling_update_removes_unavailable_old_pods_first() -> None:
    plan = plan_rollout(deploy(), rs("new", 1, 0), [rs("old", 3, 1)], now=NOW)
    assert plan.scale["old"] == 1  # its two unavailable Pods go regardless of the budget


def test_recreate_waits_for_old_pods_to_go() -> None:
    d = deploy(type="Recreate")
    plan = plan_rollout(d, rs("new", 0, 0), [rs("old", 4, 4)], now=NOW)
    assert plan.scale == {"old": 0}
    gone = rs("old", 0, 0)
    plan = plan_rollout(d, rs("new", 0, 0), [gone], now=NOW)
    assert plan.scale == {"new": 4}


def test_scaling_without_template_change() -> None:
    plan = plan_rollout(deploy(replicas=2), rs("new", 4, 4), [], now=NOW)
    assert plan.scale == {"new": 2}
    plan = plan_rollout(deploy(replicas=6), rs("new", 4, 4), [], now=NOW)
    assert plan.scale == {"new": 6}


SVC = {
    "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid"},
    "spec": {
        "selector": {"app": "a"},
        "clusterIP": "127.0.200.5",
        "ports": [{"name": "p", "port": 80, "targetPort": "tcp"}],
    },
}


def test_endpoints_follow_readiness_and_named_ports() -> None:
    pods = [
        pod("r", ip="127.0.1.2"),
        pod("n", ready=False, ip="127.0.1.3"),
        pod("other", labels={"app": "b"}, ip="127.0.1.4"),
    ]
    deleting = pod("d", ip="127.0.1.5", deletionTimestamp="2026-01-01T00:00:00Z")
    no_ip = pod("pending", ip="")
    (subset,) = desired_subsets(SVC, [*pods, deleting, no_ip])
    assert [a["ip"] for a in subset["addresses"]] == ["127.0.1.2"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["127.0.1.3", "127.0.1.5"]
    assert subset["ports"] == [{"name": "p", "port": 7000, "protocol": "TCP"}]
    (s,) = desired_slices(SVC, [*pods, deleting]).values()
    conds = {e["addresses"][0]: e["conditions"] for e in s["endpoints"]}
    assert conds["127.0.1.2"] == {"ready": True, "serving": True, "terminating": False}
    assert conds["127.0.1.3"]["ready"] is False
    assert conds["127.0.1.5"] == {"ready": False, "serving": True, "terminating": True}
    assert s["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
    assert s["metadata"]["ownerReferences"][0]["uid"] == "svc-uid"
    unnamed = pod("x")
    unnamed["spec"]["containers"][0]["ports"] = []
    assert resolve_ports(SVC, unnamed) is None


def test_proxy_targets_and_backends() -> None:
    listeners = desired_listeners(
        [
            SVC,
            {
                "metadata": {"name": "h", "namespace": "ns"},
                "spec": {"clusterIP": "None", "ports": [{"port": 1}]},
            },
        ]
    )
    assert listeners == {("127.0.200.5", 80): Target(("ns", "web"), "p", 80)}
    (s,) = desired_slices(
        SVC, [pod("r", ip="127.0.1.2"), pod("n", ready=False, ip="127.0.1.3")]
    ).values()
    assert ready_backends(Target(("ns", "web"), "p", 80), [s]) == [("127.0.1.2", 7000)]
    assert ready_backends(Target(("ns", "other"), "p", 80), [s]) == []


def test_cluster_ip_assignment() -> None:
    bare = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    assert needs_cluster_ip(bare)
    assert not needs_cluster_ip({"spec": {"clusterIP": "None"}})
    assert not needs_cluster_ip({"spec": {"type": "ExternalName"}})
    body = with_cluster_ip(bare, "127.0.200.9")
    assert body["spec"]["clusterIPs"] == ["127.0.200.9"]
    assert body["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert "clusterIP" not in bare["spec"]  # the input is not modified


def test_hosts_map(tmp_path: Path) -> None:
    text = hosts_lines([SVC])
    assert "127.0.200.5 web.ns.svc web.ns.svc.cluster.local\n" in text
    path = tmp_path / "hosts"
    write_hosts(path, [SVC])
    assert resolve("web.ns.svc.cluster.local.", path) == "127.0.200.5"
    assert resolve("WEB.ns.svc", path) == "127.0.200.5"
    assert resolve("nope.ns.svc", path) is None
    assert resolve("web.ns.svc", tmp_path / "missing") is None


def test_table_columns_for_workload_kinds() -> None:
    from localkube.controllers.columns import EXTRA_COLUMNS, extra_cells

    rs_obj = {
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "kruntimes/gateway"}]}},
        },
        "status": {"replicas": 3, "readyReplicas": 2},
    }
    assert extra_cells("apps/replicasets", rs_obj) == [3, 3, 2, "c", "kruntimes/gateway", "app=a"]
    svc = {
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "127.0.200.5",
            "selector": {"app": "a"},
            "ports": [{"port": 80, "protocol": "TCP"}],
        }
    }
    assert extra_cells("/services", svc) == [
        "ClusterIP",
        "127.0.200.5",
        "<none>",
        "80/TCP",
        "app=a",
    ]
    (s,) = desired_slices(SVC, [pod("r", ip="127.0.1.2")]).values()
    assert extra_cells("discovery.k8s.io/endpointslices", s) == ["IPv4", "7000", "127.0.1.2"]
    p = pod("r", ip="127.0.1.2")
    assert extra_cells("/pods", p) == ["127.0.1.2", "localkube", "<none>", "<none>"]
    for key, columns in EXTRA_COLUMNS.items():
        sample: dict[str, Any] = {"spec": {}, "status": {}, "metadata": {}}
        assert len(extra_cells(key, sample)) == len(columns), key


async def test_keyed_queue_serialises_per_key_and_survives_failures(autojump_clock: Any) -> None:
    import trio

    from localkube.controllers.informer import KeyedQueue

    calls: list[str] = []
    running: set[str] = set()
    overlap: list[str] = []

    async def handler(key: str) -> None:
        if key in running:
            overlap.append(key)
        running.add(key)
        calls.append(key)
        await trio.sleep(1)
        running.discard(key)
        if key == "bad" and calls.count("bad") < 3:
            raise RuntimeError("boom")

    queue: KeyedQueue[str] = KeyedQueue(handler, name="test")
    queue.add("a")  # before the queue runs: kept until it starts
    async with trio.open_nursery() as nursery:
        await nursery.start(queue.run)
        await trio.sleep(0.5)
        assert running == {"a"}
        queue.add("a")  # dirtied again while running: handled once more afterwards
        queue.add("bad")
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    assert overlap == []
    assert calls.count("a") == 2
    assert calls.count("bad") == 3  # retried after each failure, then done


async def test_keyed_queue_skips_a_malformed_object_until_it_changes(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # a stored object of the wrong shape (F1: template annotations 5) must not crash-loop
    import trio

    from localkube.controllers.informer import KeyedQueue

    rs = {
        "metadata": {"name": "r", "namespace": "default", "uid": "u"},
        "spec": {"template": {"metadata": {"annotations": 5}}},
    }
    calls: list[str] = []

    async def handler(key: str) -> None:
        calls.append(key)
        await trio.lowlevel.checkpoint()
        pod_from_template(rs)  # TypeError: 'int' object is not iterable

    queue: KeyedQueue[str] = KeyedQueue(handler, name="replicaset")
    async with trio.open_nursery() as nursery:
        await nursery.start(queue.run)
        queue.add("r")
        await trio.sleep(60)
        assert calls == ["r"], "not retried on its own"
        queue.add("r")  # the next event: tried again, the same failure not logged again
        await trio.sleep(60)
        assert calls == ["r", "r"]
        rs["spec"]["template"]["metadata"]["annotations"] = {"a": "b"}  # fixed
        queue.add("r")
        await trio.sleep(1)
        rs["spec"]["template"]["metadata"]["annotations"] = 6  # broken again: logged again
        queue.add("r")
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert calls == ["r"] * 4
    failures = [r for r in caplog.records if "reconcile failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info and r.exc_info[0] is TypeError for r in failures)


async def test_keyed_queue_does_not_retry_a_write_the_server_refuses(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import trio

    from localkube.controllers.informer import KeyedQueue
    from localkube.controllers.kubeapi import ApiStatusError

    codes = {"invalid": 422, "conflict": 409, "unavailable": 503}
    calls: list[str] = []

    async def handler(key: str) -> None:
        calls.append(key)
        await trio.lowlevel.checkpoint()
        raise ApiStatusError(codes[key], "X", "refused")

    queue: KeyedQueue[str] = KeyedQueue(handler, name="t")
    async with trio.open_nursery() as nursery:
        await nursery.start(queue.run)
        for key in codes:
            queue.add(key)
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    assert calls.count("invalid") == 1  # 422: waits for the object's next event
    assert calls.count("conflict") > 3
    assert calls.count("unavailable") > 3
    skipped = [
        r.getMessage() for r in caplog.records if "skipped until it changes" in r.getMessage()
    ]
    assert skipped == ["t invalid: 422 X: refused; skipped until it changes"]
