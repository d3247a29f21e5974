"""The watch-backed ownership cache: filled from informer events only (seed 000)."""

from __future__ import annotations

from dp_objects import function_run, runtime_pod

from krt.kube.informer import EventType, InformerEvent
from runtimed.dataplane.ownership import OwnershipCache, pod_view, run_view

UID = "11111111-2222-3333-4444-555555555555"


def test_run_view_of_a_ready_function_run() -> None:
    view = run_view(function_run(UID, attempt=2), runtime="python")
    assert view is not None
    assert (view.uid, view.name, view.attempt, view.assigned_pod_uid) == (UID, "fn", 2, "pod-a")
    assert view.ready
    assert not view.terminating


def test_only_function_runs_of_this_runtime_are_kept() -> None:
    task = function_run(UID)
    task["spec"]["mode"] = {"task": {}}
    assert run_view(task, runtime="python") is None
    assert run_view(function_run(UID, runtime="bash"), runtime="python") is None


def test_readiness_needs_phase_and_condition() -> None:
    assert not run_view(function_run(UID, ready="False"), runtime="python").ready  # type: ignore[union-attr]
    assert not run_view(function_run(UID, phase="Running"), runtime="python").ready  # type: ignore[union-attr]


def test_terminating_states() -> None:
    deleting = function_run(UID, deletionTimestamp="2026-01-01T00:00:00Z")
    cancelling = function_run(UID)
    cancelling["spec"]["cancelRequested"] = True
    deleted_after_end = function_run(UID, phase="Failed", deletionTimestamp="x")
    for obj in (deleting, cancelling, deleted_after_end):
        view = run_view(obj, runtime="python")
        assert view is not None
        assert view.terminating


def test_a_terminal_run_has_ended_and_is_not_terminating() -> None:
    """F5: a Failed/Timeout/Cancelled Run is not "terminating": it has ended for good."""
    failed = function_run(UID, phase="Failed", ready="False")
    failed["status"]["reason"] = "RegistrationLost"
    cancelled = function_run(UID, phase="Cancelled", ready="False")
    cancelled["spec"]["cancelRequested"] = True
    cancelled["status"]["reason"] = "Cancelled"
    idle = function_run(UID, phase="Timeout", ready="False")
    idle["status"]["reason"] = "IdleTimeout"
    for obj, ended in (
        (failed, "Failed: RegistrationLost"),
        (cancelled, "Cancelled: Cancelled"),
        (idle, "Timeout: IdleTimeout"),
        (function_run(UID, phase="Succeeded"), "Succeeded"),
    ):
        view = run_view(obj, runtime="python")
        assert view is not None
        assert (view.ended, view.terminating, view.ready) == (ended, False, False)
    assert run_view(function_run(UID), runtime="python").ended == ""  # type: ignore[union-attr]


def test_not_ready_says_why_from_the_ready_condition() -> None:
    obj = function_run(UID, ready="False")
    obj["status"]["conditions"][0].update(reason="Unavailable", message="server down")
    view = run_view(obj, runtime="python")
    assert view is not None
    assert view.not_ready == "Unavailable: server down"
    running = function_run(UID, phase="Running", ready="False")
    running["status"]["conditions"] = []
    assert run_view(running, runtime="python").not_ready == "phase Running"  # type: ignore[union-attr]
    assert run_view(function_run(UID), runtime="python").not_ready == ""  # type: ignore[union-attr]


def test_spec_timeout_is_kept_for_the_lifetime_message() -> None:
    obj = function_run(UID)
    obj["spec"]["timeout"] = "5s"
    obj["status"]["startTime"] = "2026-01-01T00:00:00Z"
    view = run_view(obj, runtime="python")
    assert view is not None
    assert view.timeout == "5s"
    assert view.expires_at is not None


def test_pod_view_reads_address_port_and_readiness() -> None:
    view = pod_view(runtime_pod("p1", ip="127.0.0.9", port=7000, ready=False))
    assert view is not None
    assert (view.ip, view.port, view.ready, view.routable) == ("127.0.0.9", 7000, False, False)
    deleting = pod_view(runtime_pod("p1", ip="1.2.3.4", deletionTimestamp="x"))
    assert deleting is not None
    assert deleting.deleting
    assert not deleting.routable


def test_events_add_update_and_remove() -> None:
    cache = OwnershipCache(runtime="python")
    cache.on_run_event(InformerEvent(EventType.ADDED, function_run(UID)))
    assert cache.run(UID) is not None
    assert cache.run(UID).attempt == 1
    cache.on_run_event(
        InformerEvent(EventType.MODIFIED, function_run(UID, attempt=2, pod_uid="pod-b"))
    )
    assert cache.run(UID).assigned_pod_uid == "pod-b"  # type: ignore[union-attr]
    cache.on_run_event(InformerEvent(EventType.DELETED, function_run(UID)))
    assert cache.run(UID) is None
    cache.on_pod_event(InformerEvent(EventType.ADDED, runtime_pod("p1", ip="1.1.1.1")))
    assert cache.pod("p1") is not None
    cache.on_pod_event(InformerEvent(EventType.DELETED, runtime_pod("p1", ip="1.1.1.1")))
    assert cache.pod("p1") is None


def test_run_that_stops_matching_is_dropped() -> None:
    cache = OwnershipCache(runtime="python")
    cache.on_run_event(InformerEvent(EventType.ADDED, function_run(UID)))
    cache.on_run_event(InformerEvent(EventType.MODIFIED, function_run(UID, runtime="bash")))
    assert cache.run(UID) is None


def test_not_synced_until_marked() -> None:
    cache = OwnershipCache(runtime="python")
    assert not cache.synced
    cache.load_runs([function_run(UID)])
    assert len(cache) == 1
    assert not cache.synced
    cache.mark_synced()
    assert cache.synced


def test_lifetime_end_is_start_plus_timeout() -> None:
    obj = function_run(UID)
    obj["spec"]["timeout"] = "1m30s"
    obj["status"]["startTime"] = "2026-01-01T00:00:00Z"
    view = run_view(obj, runtime="python")
    assert view is not None
    assert view.expires_at == 1767225600.0 + 90
    assert run_view(function_run(UID), runtime="python").expires_at is None  # type: ignore[union-attr]
