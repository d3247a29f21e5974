"""Capacity accounting from Runs, never annotations (issue 5; seed 000 capacity)."""

from __future__ import annotations

import pytest

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.api.phases import Phase, is_active
from krt.controlplane.capacity import AssumedBinds, capacity_holder, pod_usage, usage_by_pod

from .builders import make_run


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
def test_holder_by_phase(phase: Phase) -> None:
    run = make_run(phase=phase, pod="p-a", attempt=1)
    expected = "uid-p-a" if phase in (Phase.SCHEDULED, Phase.RUNNING, Phase.READY) else None
    assert capacity_holder(run) == expected
    assert (capacity_holder(run) is not None) == is_active(phase)


def test_ready_function_run_holds_capacity() -> None:
    assert capacity_holder(make_run(function=True, phase=Phase.READY, pod="p-a")) == "uid-p-a"


@pytest.mark.parametrize("phase", [Phase.SUCCEEDED, Phase.CANCELLED, Phase.PENDING])
def test_deleting_with_finalizer_holds_until_released(phase: Phase) -> None:
    held = make_run(
        phase=phase, pod="p-a", deleting=True, finalizers=(REGISTRATION_CLEANUP_FINALIZER,)
    )
    assert capacity_holder(held) == "uid-p-a"
    released = make_run(phase=phase, pod="p-a", deleting=True)
    assert capacity_holder(released) is None


def test_deleting_active_run_holds() -> None:
    assert capacity_holder(make_run(phase=Phase.RUNNING, pod="p-a", deleting=True)) == "uid-p-a"


def test_unassigned_holds_nothing() -> None:
    assert capacity_holder(make_run(phase=Phase.PENDING)) is None


def test_usage_sums_requests_by_pod_uid() -> None:
    runs = [
        make_run("a", phase=Phase.RUNNING, pod="p-a", requests={"runs": 2, "gpu": 1}),
        make_run("b", phase=Phase.READY, pod="p-a"),
        make_run("c", phase=Phase.SCHEDULED, pod="p-b"),
        make_run("d", phase=Phase.SUCCEEDED, pod="p-b"),
        make_run("e", phase=Phase.PENDING),
    ]
    assert usage_by_pod(runs) == {"uid-p-a": {"runs": 3, "gpu": 1}, "uid-p-b": {"runs": 1}}
    assert pod_usage(runs, "uid-p-c") == {}


def test_name_reuse_counts_by_uid() -> None:
    runs = [make_run("a", phase=Phase.RUNNING, pod="p-a", pod_uid="old")]
    assert pod_usage(runs, "new") == {}
    assert pod_usage(runs, "old") == {"runs": 1}


def test_assumption_counts_until_informer_moves_on() -> None:
    pending = make_run("a", rv="5")
    assumed = AssumedBinds()
    assumed.assume(pending, "uid-p-a")
    assert usage_by_pod([pending], assumed) == {"uid-p-a": {"runs": 1}}
    assumed.observe(pending.metadata.uid, "5")  # same stale version: still assumed
    assert len(assumed) == 1
    bound = make_run("a", rv="6", phase=Phase.SCHEDULED, pod="p-a")
    assumed.observe(bound.metadata.uid, "6")
    assert len(assumed) == 0
    assert usage_by_pod([bound], assumed) == {"uid-p-a": {"runs": 1}}  # no double count


def test_assumption_not_double_counted_with_cache() -> None:
    bound = make_run("a", rv="6", phase=Phase.SCHEDULED, pod="p-a")
    assumed = AssumedBinds()
    assumed.assume(bound, "uid-p-a")
    assert usage_by_pod([bound], assumed) == {"uid-p-a": {"runs": 1}}


def test_assumption_dropped_on_delete_and_forget() -> None:
    run = make_run("a", rv="5")
    assumed = AssumedBinds()
    assumed.assume(run, "uid-p-a")
    assumed.observe(run.metadata.uid, None)
    assert assumed.get(run.metadata.uid) is None
    assumption = assumed.assume(run, "uid-p-a")
    assumed.forget(run.metadata.uid, assumption)
    assert len(assumed) == 0


def test_failed_stale_bind_keeps_the_newer_bind_assumed() -> None:
    """A bind from rv 5 fails after a bind from rv 6 was sent: the rv 6 bind still counts."""
    stale = make_run("a", rv="5")
    assumed = AssumedBinds()
    first = assumed.assume(stale, "uid-p-a")
    newer = make_run("a", rv="6")  # someone else wrote the Pending Run; the informer moved on
    assumed.observe(newer.metadata.uid, "6")
    assert assumed.get(newer.metadata.uid) is None
    second = assumed.assume(newer, "uid-p-b")
    assumed.forget(stale.metadata.uid, first)  # the rv 5 bind answers 409
    assert assumed.get(newer.metadata.uid) is second
    assert usage_by_pod([newer], assumed) == {"uid-p-b": {"runs": 1}}
    assumed.forget(newer.metadata.uid, second)
    assert len(assumed) == 0
