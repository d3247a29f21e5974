"""Fakes of the function lifecycle's interfaces for virtual-time tests.

* :class:`FakeRuns`: the Run cache, the conditional status writer and the finalizer writer
  over one dict, with resourceVersions, 409 on stale writes, Kubernetes deletion semantics
  (``deletionTimestamp`` while finalizers remain; gone when the last one goes) and immediate
  watch delivery to handlers. It records every write in order (``log``).
* :class:`FakeFunctionServer`: :class:`runtimed.functions.client.FunctionServer` in memory
  with the seed 002 rules (idempotent register, higher attempt supersedes, stale IDs are
  FAILED_PRECONDITION, unregistering an absent registration succeeds), a wall clock for
  ``last_activity_unix_nano``, ``invoke(seconds)`` that holds an invocation in flight in
  trio time, ``lose_all()`` (a Runtime Server restart), ``down`` and ``unimplemented``.

Anything not modelled raises, so a test never passes by silently skipping behaviour.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
import trio.lowlevel

from krt.api.constants import REGISTRATION_CLEANUP_FINALIZER
from krt.kube.clock import Clock
from krt.kube.errors import Conflict, NotFound
from krt.kube.informer import EventType, InformerEvent
from runtimed.functions.client import FunctionRpcError, FunctionView, RegisterSpec, RegState
from runtimed.server_channel import ServerUnavailable


class FakeRuns:
    """Runs by ``namespace/name`` (RunCache + StatusWriter + FinalizerWriter)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.handlers: list[Callable[[InformerEvent], None]] = []
        self._rv = itertools.count(100)
        #: ("status", status) / ("finalizers", list) in write order.
        self.log: list[tuple[str, Any]] = []

    # RunCache
    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self.objects.get(f"{namespace}/{name}")
        return copy.deepcopy(obj) if obj is not None else None

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        for obj in self.objects.values():
            if obj["metadata"]["uid"] == uid:
                return copy.deepcopy(obj)
        return None

    def _check(self, obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        current = self.objects.get(key)
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            raise NotFound(404, "NotFound", f"{key} not found")
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", f"{key} changed")
        return key, current

    # StatusWriter
    async def write_status(self, obj: dict[str, Any], status: Any) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        key, current = self._check(obj)
        new = copy.deepcopy(current)
        new["status"] = copy.deepcopy(dict(status))
        self.log.append(("status", copy.deepcopy(new["status"])))
        self._store(key, new)
        return copy.deepcopy(self.objects[key])

    # FinalizerWriter
    async def _set_finalizers(self, obj: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        key, current = self._check(obj)
        new = copy.deepcopy(current)
        new["metadata"]["finalizers"] = finalizers
        self.log.append(("finalizers", list(finalizers)))
        if not finalizers and new["metadata"].get("deletionTimestamp"):
            del self.objects[key]
            self._deliver(EventType.DELETED, new, current)
            return new
        self._store(key, new)
        return copy.deepcopy(self.objects[key])

    async def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if REGISTRATION_CLEANUP_FINALIZER in finalizers:
            return obj
        return await self._set_finalizers(obj, [*finalizers, REGISTRATION_CLEANUP_FINALIZER])

    async def remove(self, obj: dict[str, Any]) -> dict[str, Any]:
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if REGISTRATION_CLEANUP_FINALIZER not in finalizers:
            return obj
        rest = [f for f in finalizers if f != REGISTRATION_CLEANUP_FINALIZER]
        return await self._set_finalizers(obj, rest)

    # test controls
    def _store(self, key: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        old = self.objects.get(key)
        self.objects[key] = obj
        self._deliver(EventType.ADDED if old is None else EventType.MODIFIED, obj, old)

    def _deliver(self, kind: EventType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        event = InformerEvent(kind, copy.deepcopy(obj), copy.deepcopy(old) if old else None)
        for handler in self.handlers:
            handler(event)

    def create(self, obj: dict[str, Any]) -> None:
        self._store(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", copy.deepcopy(obj))

    def update_spec(self, key: str, **spec: Any) -> None:
        obj = copy.deepcopy(self.objects[key])
        obj["spec"].update(spec)
        self._store(key, obj)

    def set_status(self, key: str, **status: Any) -> None:
        obj = copy.deepcopy(self.objects[key])
        obj.setdefault("status", {}).update(status)
        self._store(key, obj)

    def delete(self, key: str) -> None:
        obj = copy.deepcopy(self.objects[key])
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = "2026-11-29T09:00:00Z"
            self._store(key, obj)
        else:
            del self.objects[key]
            self._deliver(EventType.DELETED, obj, obj)

    def status(self, key: str) -> dict[str, Any]:
        return self.objects[key].get("status") or {}

    def status_writes(self) -> list[dict[str, Any]]:
        return [entry for kind, entry in self.log if kind == "status"]


@dataclass
class FakeRegistration:
    run_uid: str
    attempt: int
    digest: str
    registration_id: str
    working_dir: str
    handler: str
    state: RegState = RegState.READY
    in_flight: int = 0
    last_activity_unix_nano: int = 0
    fatal_error: str = ""


class FakeFunctionServer:
    """FunctionRuntime in memory (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.registrations: dict[str, FakeRegistration] = {}
        self.stale: set[str] = set()
        self._ids = itertools.count(1)
        self.down = False
        self.unimplemented = False
        #: handler -> fatal error RegisterFunction reports (e.g. an import error).
        self.bad_handlers: dict[str, str] = {}
        #: every call in order: (method, run_uid, detail)
        self.calls: list[tuple[str, str, Any]] = []
        self.cancelled_invocations = 0
        #: raised by every FunctionStatus call while set (a server's unexpected answer).
        self.status_error: FunctionRpcError | None = None

    def _now_ns(self) -> int:
        return int(self._clock.now().timestamp() * 1_000_000_000)

    async def _enter(self, method: str, run_uid: str, detail: Any = None) -> None:
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ServerUnavailable(f"{method}: server down")
        if self.unimplemented:
            raise FunctionRpcError(method, "UNIMPLEMENTED", "method not found")
        self.calls.append((method, run_uid, detail))

    async def register(self, spec: RegisterSpec) -> str:
        await self._enter("RegisterFunction", spec.run_uid, (spec.attempt, spec.digest))
        current = self.registrations.get(spec.run_uid)
        if current is not None:
            if spec.attempt < current.attempt:
                raise FunctionRpcError("RegisterFunction", "FAILED_PRECONDITION", "older attempt")
            if spec.attempt == current.attempt:
                if spec.digest != current.digest:
                    raise FunctionRpcError("RegisterFunction", "ALREADY_EXISTS", "other digest")
                if current.state is RegState.FAILED:
                    raise FunctionRpcError(
                        "RegisterFunction",
                        "FAILED_PRECONDITION",
                        f"registration failed: {current.fatal_error}",
                    )
                return current.registration_id
            self.stale.add(current.registration_id)
        reg = FakeRegistration(
            run_uid=spec.run_uid,
            attempt=spec.attempt,
            digest=spec.digest,
            registration_id=f"reg_{next(self._ids)}",
            working_dir=spec.working_dir,
            handler=spec.handler,
            last_activity_unix_nano=self._now_ns(),
        )
        self.registrations[spec.run_uid] = reg
        if spec.handler in self.bad_handlers:
            reg.state = RegState.FAILED
            reg.fatal_error = self.bad_handlers[spec.handler]
            raise FunctionRpcError(
                "RegisterFunction",
                "FAILED_PRECONDITION",
                f"registration {reg.registration_id} failed: {reg.fatal_error}",
            )
        return reg.registration_id

    def _resolve(self, run_uid: str, registration_id: str) -> FakeRegistration | None:
        reg = self.registrations.get(run_uid)
        if reg is None:
            return None
        if reg.registration_id != registration_id:
            raise FunctionRpcError("x", "FAILED_PRECONDITION", f"{registration_id} is stale")
        return reg

    async def status(self, run_uid: str, registration_id: str) -> FunctionView:
        await self._enter("FunctionStatus", run_uid)
        if self.status_error is not None:
            raise self.status_error
        try:
            reg = self._resolve(run_uid, registration_id)
        except FunctionRpcError as exc:
            return FunctionView(RegState.STALE, fatal_error=exc.detail)
        if reg is None:
            return FunctionView(RegState.NOT_FOUND)
        return FunctionView(reg.state, reg.in_flight, reg.last_activity_unix_nano, reg.fatal_error)

    async def unregister(
        self,
        run_uid: str,
        registration_id: str,
        *,
        cancel_in_flight: bool,
        drain_timeout_millis: int,
    ) -> None:
        await self._enter(
            "UnregisterFunction", run_uid, (registration_id, cancel_in_flight, drain_timeout_millis)
        )
        reg = self._resolve(run_uid, registration_id)
        if reg is None:
            return
        reg.state = RegState.DRAINING
        if reg.in_flight and not cancel_in_flight:
            with trio.move_on_after(drain_timeout_millis / 1000):
                while reg.in_flight:  # noqa: ASYNC110 - virtual time
                    await trio.sleep(0.01)
        if reg.in_flight:
            self.cancelled_invocations += 1
            reg.in_flight = 0
        self.registrations.pop(run_uid, None)

    async def invoke(self, run_uid: str, seconds: float) -> None:
        """Hold one invocation in flight for ``seconds`` of trio time."""
        reg = self.registrations[run_uid]
        assert reg.state is RegState.READY
        assert not reg.in_flight
        reg.in_flight = 1
        reg.last_activity_unix_nano = self._now_ns()
        try:
            await trio.sleep(seconds)
        finally:
            if self.registrations.get(run_uid) is reg:
                reg.in_flight = 0
                reg.last_activity_unix_nano = self._now_ns()

    def fail(self, run_uid: str, error: str) -> None:
        reg = self.registrations[run_uid]
        reg.state = RegState.FAILED
        reg.fatal_error = error

    def lose_all(self) -> None:
        self.registrations.clear()

    def methods(self, run_uid: str | None = None) -> list[str]:
        return [m for m, uid, _ in self.calls if run_uid is None or uid == run_uid]
