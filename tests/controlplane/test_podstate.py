"""Pod readiness, heartbeat freshness and endpoint membership (docs/design-notes.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from krt.controlplane.podstate import (
    heartbeat_deadline,
    heartbeat_expires_in,
    pod_is_ready,
    pod_name_of_heartbeat_lease,
    pod_state,
    ready_endpoint_pod_uids,
)
from krt.kube.heartbeat import heartbeat_fresh

from .builders import NOW, lease_dict, pod_dict


def test_heartbeat_judged_by_uid_and_expiry() -> None:
    fresh = lease_dict("p", holder="uid-p", renewed=NOW - timedelta(seconds=39))
    assert pod_state(pod_dict("p"), lease=fresh, now=NOW).heartbeat_fresh
    expired = lease_dict("p", holder="uid-p", renewed=NOW - timedelta(seconds=40))
    assert not pod_state(pod_dict("p"), lease=expired, now=NOW).heartbeat_fresh
    other = lease_dict("p", holder="old-uid", renewed=NOW)
    assert not pod_state(pod_dict("p"), lease=other, now=NOW).heartbeat_fresh
    assert not pod_state(pod_dict("p"), lease=None, now=NOW).heartbeat_fresh


def test_pod_state_reads_fields() -> None:
    lease = lease_dict("p", holder="uid-p", renewed=NOW)
    state = pod_state(pod_dict("p", deleting=True), lease=lease, now=NOW)
    assert state.name == "p"
    assert state.uid == "uid-p"
    assert state.runtime == "python"
    assert state.ready
    assert state.deleting
    assert state.heartbeat_fresh
    assert not state.schedulable
    assert pod_state(pod_dict("p"), lease=lease, now=NOW).schedulable
    assert not pod_state(pod_dict("p"), lease=None, now=NOW).schedulable
    assert not pod_state(pod_dict("p", ready=False), lease=lease, now=NOW).schedulable


def test_pod_is_ready_needs_ready_true() -> None:
    assert not pod_is_ready({"status": {}})
    assert not pod_is_ready({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})


def test_endpoint_membership() -> None:
    slices: list[dict[str, Any]] = [
        {
            "endpoints": [
                {"conditions": {"ready": True}, "targetRef": {"kind": "Pod", "uid": "a"}},
                {"conditions": {}, "targetRef": {"kind": "Pod", "uid": "b"}},
                {"conditions": {"ready": False}, "targetRef": {"kind": "Pod", "uid": "c"}},
                {
                    "conditions": {"ready": True, "terminating": True},
                    "targetRef": {"kind": "Pod", "uid": "d"},
                },
            ]
        },
        {"endpoints": None},
    ]
    assert ready_endpoint_pod_uids(slices) == frozenset({"a", "b"})


def test_heartbeat_expires_in() -> None:
    lease = lease_dict("p", holder="uid-p", renewed=NOW - timedelta(seconds=10))
    assert heartbeat_expires_in(lease, "uid-p", NOW) == pytest.approx(30.0)
    assert heartbeat_expires_in(lease, "other", NOW) is None
    assert heartbeat_expires_in(None, "uid-p", NOW) is None
    stale = lease_dict("p", holder="uid-p", renewed=NOW - timedelta(seconds=41))
    assert heartbeat_expires_in(stale, "uid-p", NOW) is None


def test_pod_name_of_heartbeat_lease() -> None:
    assert pod_name_of_heartbeat_lease("runtimed-runtime-python-abc") == "runtime-python-abc"
    assert pod_name_of_heartbeat_lease("krt-controlplane") is None
    assert pod_name_of_heartbeat_lease("runtimed-") is None


@pytest.mark.parametrize(
    "lease",
    [
        lease_dict("p", holder="uid-p", renewed=NOW - timedelta(seconds=39)),
        lease_dict("p", holder="uid-p", renewed=NOW - timedelta(seconds=40, microseconds=1)),
        lease_dict("p", holder="uid-p", renewed=NOW + timedelta(seconds=5), duration=1),
        lease_dict("p", holder="old-uid", renewed=NOW),
        lease_dict("p", holder="uid-p", renewed=None),
        lease_dict("p", holder="uid-p", renewed=NOW, duration=None),
        lease_dict("p", holder="uid-p", renewed=NOW, duration=0),
        {"spec": {"holderIdentity": "uid-p", "renewTime": "soon", "leaseDurationSeconds": 4}},
        {"spec": {"holderIdentity": "uid-p", "renewTime": "x", "leaseDurationSeconds": True}},
        {"spec": "broken"},
        None,
    ],
)
def test_heartbeat_deadline_agrees_with_freshness_at_every_instant(
    lease: dict[str, Any] | None,
) -> None:
    """Caches judge a Lease by its deadline; that must be heartbeat_fresh at any time."""
    deadline = heartbeat_deadline(lease, "uid-p")
    for offset in (-100.0, -40.0, -39.000001, -1.0, 0.0, 0.5, 1.0, 5.0, 6.0, 100.0):
        now = NOW.timestamp() + offset
        fresh = lease is not None and heartbeat_fresh(lease, "uid-p", now)
        assert (deadline is not None and deadline > now) == fresh, offset
