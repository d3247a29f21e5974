"""The cached Runs, parsed once per version and indexed by Runtime, assigned Pod and Pending.

Issue 6 (control-plane CPU per Run). Every loop of the control plane asks the same questions
on every Run event: the parsed Run, the Runs of a Runtime, the Runs on a Pod UID, the Pending
Runs of a Runtime in arrival order. Answering them by parsing and scanning the informer's
dicts made each event cost O(Runs) (O(n^2) over a burst). :class:`RunIndex` is fed by one
informer handler that runs before every other Run handler: it parses each new version once,
keeps the parse of the one version it replaced last (the handlers of that event look at
``event.old`` too), and moves the Run between index buckets, so each question costs
O(answer).

Malformed Runs (``Run.from_dict`` raises) are logged once per version and left out of every
index, as the loops ignore them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from krt.api.errors import ApiError
from krt.api.phases import Phase
from krt.api.run import Run
from krt.kube.interface import Obj

log = logging.getLogger(__name__)

RunKey = tuple[str, str]
"""``(namespace, name)`` of a Run."""


def runtime_key(namespace: str, runtime: str) -> str:
    """``namespace/runtime``: the key of a Runtime and of its Runs and Pods in the indexes."""
    return f"{namespace}/{runtime}"


@dataclass(frozen=True, slots=True)
class _Version:
    obj: Obj
    run: Run | None


def _is_pending(run: Run) -> bool:
    return run.status.phase is Phase.PENDING and not run.metadata.is_deleting


class RunIndex:
    """Parsed Runs of one informer cache, with incremental indexes.

    Call :meth:`upsert` for every ADDED/MODIFIED object and :meth:`remove` for every DELETED
    key, in the informer's order (:class:`krt.controlplane.caches.Caches` does this from its
    first Run handler). Not thread-safe (one trio task owns it).
    """

    def __init__(self) -> None:
        """Create an empty index."""
        self._current: dict[RunKey, _Version] = {}
        self._replaced: tuple[RunKey, _Version] | None = None
        self._latest: _Version | None = None  # the version the last upsert stored
        self._by_runtime: dict[str, dict[RunKey, None]] = {}
        self._by_pod: dict[str, dict[RunKey, None]] = {}
        self._pending: dict[str, dict[RunKey, None]] = {}
        self._arrival: dict[RunKey, int] = {}
        self._counter = itertools.count()

    def __len__(self) -> int:
        """Number of indexed (well-formed) Runs."""
        return sum(1 for version in self._current.values() if version.run is not None)

    # -- updates ---------------------------------------------------------------------------

    def upsert(self, key: RunKey, obj: Obj) -> Run | None:
        """Record ``obj`` as the current version of ``key`` and return its parse.

        Re-delivery of the object already current (a RESYNC) changes nothing.

        Args:
            key: ``(namespace, name)``.
            obj: the object as cached by the informer (shared, read-only).

        Returns:
            The parsed Run, or ``None`` when it is malformed (logged).
        """
        current = self._current.get(key)
        if current is not None and current.obj is obj:
            return current.run
        run = _parse(key, obj)
        if current is not None:
            self._replaced = (key, current)
            if _same_buckets(current.run, run):  # most changes (status writes) move nothing
                self._latest = self._current[key] = _Version(obj, run)
                return run
            self._unindex(key, current.run)
        if run is not None and key not in self._arrival:
            self._arrival[key] = next(self._counter)
        self._latest = self._current[key] = _Version(obj, run)
        self._index(key, run)
        return run

    def remove(self, key: RunKey) -> None:
        """Forget ``key``.

        Its last version stays readable through :meth:`parsed` until the next change.
        """
        current = self._current.pop(key, None)
        if current is not None:
            self._unindex(key, current.run)
            self._replaced = (key, current)
        self._arrival.pop(key, None)

    def _index(self, key: RunKey, run: Run | None) -> None:
        if run is None:
            return
        runtime = runtime_key(key[0], run.spec.runtime)
        self._by_runtime.setdefault(runtime, {})[key] = None
        if run.status.assigned_pod_uid:
            self._by_pod.setdefault(run.status.assigned_pod_uid, {})[key] = None
        if _is_pending(run):
            self._pending.setdefault(runtime, {})[key] = None

    def _unindex(self, key: RunKey, run: Run | None) -> None:
        if run is None:
            return
        runtime = runtime_key(key[0], run.spec.runtime)
        _discard(self._by_runtime, runtime, key)
        if run.status.assigned_pod_uid:
            _discard(self._by_pod, run.status.assigned_pod_uid, key)
        _discard(self._pending, runtime, key)

    # -- reads -----------------------------------------------------------------------------

    def latest(self, obj: Obj) -> tuple[bool, Run | None]:
        """The kept parse of ``obj`` if it is the version stored or replaced by the last change.

        The handlers of one informer event ask for exactly those two versions (``event.obj``
        and ``event.old``), several times per event: this answers them by identity alone,
        without building the Run's key. A miss says nothing; ask :meth:`parsed`.

        Returns:
            ``(True, run_or_None)`` when ``obj`` (by identity) is one of them, else
            ``(False, None)``.
        """
        latest = self._latest
        if latest is not None and latest.obj is obj:
            return True, latest.run
        replaced = self._replaced
        if replaced is not None and replaced[1].obj is obj:
            return True, replaced[1].run
        return False, None

    def parsed(self, key: RunKey, obj: Obj) -> tuple[bool, Run | None]:
        """The kept parse of ``obj``, if it is the current or the last replaced version.

        Returns:
            ``(True, run_or_None)`` when ``obj`` (by identity) was parsed here, else
            ``(False, None)``.
        """
        version = self._current.get(key)
        if version is not None and version.obj is obj:
            return True, version.run
        if self._replaced is not None and self._replaced[1].obj is obj:
            return True, self._replaced[1].run
        return False, None

    def get(self, key: RunKey) -> Run | None:
        """The current parsed Run of ``key``, or ``None`` (absent or malformed)."""
        version = self._current.get(key)
        return version.run if version is not None else None

    def of_runtime(self, namespace: str, runtime: str) -> list[Run]:
        """The Runs whose ``spec.runtime`` is ``runtime`` in ``namespace``."""
        return self._runs(self._by_runtime.get(runtime_key(namespace, runtime), {}))

    def on_pod(self, pod_uid: str) -> list[Run]:
        """The Runs whose ``status.assignedPodUID`` is ``pod_uid``."""
        return self._runs(self._by_pod.get(pod_uid, {}))

    def pending_of_runtime(self, namespace: str, runtime: str) -> list[Run]:
        """The Pending, not deleting Runs of a Runtime, oldest first.

        Order: ``creationTimestamp`` (whole seconds on a real API server), then the order in
        which this index first saw each Run (the watch delivers creations in order), then
        the name.
        """
        runs = self._runs(self._pending.get(runtime_key(namespace, runtime), {}))
        runs.sort(key=self.age)
        return runs

    def pending(self) -> list[Run]:
        """Every Pending, not deleting Run, oldest first (as :meth:`pending_of_runtime`)."""
        runs = [run for keys in self._pending.values() for run in self._runs(keys)]
        runs.sort(key=self.age)
        return runs

    def age(self, run: Run) -> tuple[bool, datetime | None, int, str]:
        """The sort key of ``run`` in the line of Pending Runs (smaller is older).

        ``(no creationTimestamp, creationTimestamp, arrival, name)``: see
        :meth:`pending_of_runtime`.
        """
        return (
            run.metadata.creation_timestamp is None,
            run.metadata.creation_timestamp,
            self._arrival.get((run.metadata.namespace, run.metadata.name), 0),
            run.metadata.name,
        )

    def arrival(self, key: RunKey) -> int | None:
        """The order in which ``key`` was first seen (smaller is earlier), or ``None``."""
        return self._arrival.get(key)

    def runs(self) -> Iterable[Run]:
        """Every well-formed current Run."""
        return [version.run for version in self._current.values() if version.run is not None]

    def _runs(self, keys: Iterable[RunKey]) -> list[Run]:
        result = []
        for key in keys:
            run = self.get(key)
            if run is not None:
                result.append(run)
        return result


def _same_buckets(old: Run | None, new: Run | None) -> bool:
    """Whether two parsed versions of one Run belong in exactly the same index buckets."""
    if old is None or new is None:
        return False
    return (
        old.spec.runtime == new.spec.runtime
        and old.status.assigned_pod_uid == new.status.assigned_pod_uid
        and _is_pending(old) == _is_pending(new)
    )


def _discard(index: dict[str, dict[RunKey, None]], value: str, key: RunKey) -> None:
    keys = index.get(value)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del index[value]


def _parse(key: RunKey, obj: Obj) -> Run | None:
    try:
        return Run.from_dict(obj)
    except ApiError as exc:
        log.warning("ignoring malformed Run %s/%s: %s", key[0], key[1], exc)
        return None
