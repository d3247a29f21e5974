"""The pure routing decision (seed 000: Runtime Gateway routing rules, Ownership Epoch and Fencing)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtimed.dataplane.ownership import PodView, RunView
from runtimed.dataplane.routing import (
    HopExpectation,
    Local,
    NotFound,
    Remote,
    Route,
    Unavailable,
    UnavailableCode,
    decide,
)

FP = UnavailableCode.FAILED_PRECONDITION
UN = UnavailableCode.UNAVAILABLE
UID = "11111111-2222-3333-4444-555555555555"


@dataclass(frozen=True)
class Reg:
    attempt: int
    registration_id: str | None = "reg-1"
    accepts_invokes: bool = True


def run(**changes: object) -> RunView:
    base = RunView(
        uid=UID,
        namespace="ns",
        name="fn",
        attempt=1,
        assigned_pod_uid="pod-a",
        ready=True,
        terminating=False,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def pod(uid: str = "pod-b", **changes: object) -> PodView:
    base = PodView(uid=uid, name=uid, ip="10.0.0.2", port=9090, ready=True, deleting=False)
    return replace(base, **changes)  # type: ignore[arg-type]


def route(**kwargs: object) -> Route:
    args: dict[str, object] = {
        "uid": UID,
        "synced": True,
        "run": run(),
        "self_pod_uid": "pod-a",
        "owner_pod": None,
        "local": Reg(1),
        "hop": None,
    }
    args.update(kwargs)
    return decide(**args)  # type: ignore[arg-type]


def test_local_owner_fills_the_registration_id() -> None:
    assert route() == Local(run(), "reg-1")


def test_unsynced_cache_is_unavailable() -> None:
    assert route(synced=False) == Unavailable(UN, "the ownership cache has not synced yet")


def test_unknown_uid_is_not_found_but_unavailable_for_a_hop() -> None:
    assert isinstance(route(run=None), NotFound)
    hop = HopExpectation(UID, 1, "pod-a")
    answer = route(run=None, hop=hop)
    assert isinstance(answer, Unavailable)
    assert answer.code is UN


def test_uid_mismatch_with_current_object_is_not_found() -> None:
    assert isinstance(route(run=run(uid="other")), NotFound)


@pytest.mark.parametrize(
    "view",
    [run(ready=False), run(terminating=True), run(assigned_pod_uid="")],
    ids=["not-ready", "terminating", "unassigned"],
)
def test_known_but_not_invocable_is_failed_precondition(view: RunView) -> None:
    answer = route(run=view)
    assert isinstance(answer, Unavailable)
    assert answer.code is FP


@pytest.mark.parametrize(
    ("local", "code"),
    [
        (None, FP),
        (Reg(1, accepts_invokes=False), FP),
        (Reg(1, registration_id=None), FP),
        (Reg(0), FP),  # stale local registration: older attempt
        (Reg(2), UN),  # registry ahead of the cache: the cache must catch up first
    ],
)
def test_local_owner_needs_a_ready_registration_of_the_same_attempt(
    local: Reg | None, code: UnavailableCode
) -> None:
    answer = route(local=local)
    assert isinstance(answer, Unavailable)
    assert answer.code is code


def test_remote_owner_gets_one_hop_with_expectations() -> None:
    view = run(assigned_pod_uid="pod-b", attempt=3)
    answer = route(run=view, owner_pod=pod("pod-b"), local=None)
    assert answer == Remote(view, "10.0.0.2", 9090, HopExpectation(UID, 3, "pod-b"))


@pytest.mark.parametrize(
    ("owner", "code"),
    [
        (None, UN),
        (pod("pod-b", ready=False), FP),
        (pod("pod-b", deleting=True), FP),
        (pod("pod-b", ip=""), FP),
    ],
)
def test_remote_owner_not_routable_is_503(owner: PodView | None, code: UnavailableCode) -> None:
    answer = route(run=run(assigned_pod_uid="pod-b"), owner_pod=owner, local=None)
    assert isinstance(answer, Unavailable)
    assert answer.code is code


@pytest.mark.parametrize(
    ("hop", "view", "code"),
    [
        (HopExpectation("other-uid", 1, "pod-a"), run(), FP),  # wrong Run
        (HopExpectation(UID, 1, "pod-z"), run(), FP),  # addressed to another Pod
        (HopExpectation(UID, 2, "pod-a"), run(), UN),  # owner's cache is behind
        (HopExpectation(UID, 1, "pod-a"), run(attempt=2), FP),  # sender is stale
        (HopExpectation(UID, 1, "pod-a"), run(assigned_pod_uid="pod-b"), FP),  # second hop
    ],
)
def test_owner_rejects_hop_mismatch(
    hop: HopExpectation, view: RunView, code: UnavailableCode
) -> None:
    answer = route(run=view, hop=hop, owner_pod=pod("pod-b"))
    assert isinstance(answer, Unavailable), answer
    assert answer.code is code, answer


def test_matching_hop_is_served_locally() -> None:
    assert route(hop=HopExpectation(UID, 1, "pod-a")) == Local(run(), "reg-1")


# -- the property: never two owners, never more than one hop, stale caches answer 503 -------

PODS = ["pod-a", "pod-b", "pod-c"]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[RunView], dict[str, int], dict[str, Reg | None]]:
    """A Run's assignment history, each Pod's (possibly stale) cache version, and registries.

    The registries follow the fencing invariant (seed 000): at most one Pod holds a READY
    registration, and only for an attempt it was assigned; older assignments were fenced
    (unregistered) before the newer attempt was scheduled.
    """
    length = draw(st.integers(1, 5))
    history = []
    for attempt in range(1, length + 1):
        history.append(
            run(
                attempt=attempt,
                assigned_pod_uid=draw(st.sampled_from([*PODS, ""])),
                ready=draw(st.booleans()),
                terminating=draw(st.booleans()) and attempt == length,
            )
        )
    versions = {p: draw(st.integers(-1, length - 1)) for p in PODS}  # -1: not observed yet
    registries: dict[str, Reg | None] = dict.fromkeys(PODS)
    holder = draw(st.sampled_from([*range(length), None]))
    if holder is not None and history[holder].assigned_pod_uid and holder >= length - 2:
        owner = history[holder].assigned_pod_uid
        registries[owner] = Reg(history[holder].attempt, f"reg-{holder + 1}")
    return history, versions, registries


def follow(
    entry: str,
    history: list[RunView],
    versions: dict[str, int],
    registries: dict[str, Reg | None],
    routable: dict[str, bool],
) -> tuple[Route, list[str]]:
    """Route a request arriving at ``entry``; follow a hop once. Returns (final, path)."""

    def at(p: str, hop: HopExpectation | None) -> Route:
        version = versions[p]
        view = history[version] if version >= 0 else None
        owner = None
        if view is not None and view.assigned_pod_uid in PODS:
            owner = pod(view.assigned_pod_uid, ip=f"ip-{view.assigned_pod_uid}")
            owner = replace(owner, ready=routable[view.assigned_pod_uid])
        return decide(
            uid=UID,
            synced=True,
            run=view,
            self_pod_uid=p,
            owner_pod=owner,
            local=registries[p],
            hop=hop,
        )

    first = at(entry, None)
    if not isinstance(first, Remote):
        return first, [entry]
    target = first.host.removeprefix("ip-")
    second = at(target, first.expectation)
    assert not isinstance(second, Remote), "a proxied request was forwarded again"
    return second, [entry, target]


@settings(max_examples=400, deadline=None)
@given(worlds(), st.fixed_dictionaries({p: st.booleans() for p in PODS}))
def test_never_two_owners_and_stale_caches_answer_503(
    world: tuple[list[RunView], dict[str, int], dict[str, Reg | None]],
    routable: dict[str, bool],
) -> None:
    history, versions, registries = world
    executed: set[tuple[str, int]] = set()
    for entry in PODS:
        final, path = follow(entry, history, versions, registries, routable)
        if isinstance(final, Local):
            where = path[-1]
            reg = registries[where]
            assert reg is not None
            assert reg.registration_id == final.registration_id
            # executed only where this Pod's own cache shows it as the owner of that attempt
            assert final.run.assigned_pod_uid == where
            assert final.run.attempt == reg.attempt
            assert final.run.ready
            assert not final.run.terminating
            executed.add((where, reg.attempt))
        else:
            assert isinstance(final, Unavailable | NotFound)
            # an unobserved Run is 404 only where nothing was forwarded
            if isinstance(final, NotFound):
                assert versions[entry] == -1
                assert len(path) == 1
    assert len(executed) <= 1, f"two owners executed: {executed}"
    # a Pod whose cache lags the newest assignment never executes an older attempt there
    newest = history[-1]
    for where, attempt in executed:
        if attempt < newest.attempt:
            assert versions[where] < len(history) - 1
