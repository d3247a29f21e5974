"""Run and Runtime types: wire round trips, parse errors naming fields, and agreement between
the dataclasses and the CRD schema (a field added to one and not the other fails here)."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from krtapi_samples import UID, full_status, function_run, repo_run, runtime, task_run, with_changes

from krt.api import schema
from krt.api.errors import DurationError, InvalidObjectError, ResourceError
from krt.api.phases import Phase
from krt.api.run import (
    Endpoint,
    EndpointProtocol,
    FunctionMode,
    Run,
    RunSpec,
    RunStatus,
    TaskMode,
)
from krt.api.runtime import Runtime


@pytest.mark.parametrize(
    "obj",
    [
        task_run(),
        function_run(),
        repo_run(),
        with_changes(function_run(), status=full_status()),
        with_changes(task_run(), metadata__finalizers=["kruntimes.io/registration-cleanup"]),
    ],
    ids=["task", "function", "repo", "status", "finalizers"],
)
def test_run_round_trip(obj: dict[str, Any]) -> None:
    assert Run.from_dict(obj).to_dict() == obj


def test_run_parsed_values() -> None:
    run = Run.from_dict(with_changes(function_run(), status=full_status()))
    assert run.key == "kruntimes-demo/diagnose-service"
    assert isinstance(run.spec.mode, FunctionMode)
    assert run.spec.is_function
    assert run.spec.mode.handler == "main.invoke"
    assert run.spec.mode.idle_timeout_seconds == 600
    assert run.status.phase is Phase.READY
    assert run.status.attempt == 1
    assert run.status.start_time == datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    assert run.status.endpoint is not None
    assert run.status.endpoint.protocol is EndpointProtocol.HTTPS
    assert run.status.endpoint.ca_bundle == base64.b64decode(full_status()["endpoint"]["caBundle"])
    assert run.status.conditions[1].reason == "FunctionRegistered"


def test_task_defaults() -> None:
    run = Run.from_dict({"metadata": {"name": "r"}, "spec": {"runtime": "bash"}})
    assert run.spec.mode == TaskMode()
    assert not run.spec.is_function
    assert run.spec.timeout_seconds is None
    assert run.spec.effective_requests == {"runs": 1}
    assert run.spec.effective_retry_policy.max_attempts == 1
    assert run.spec.source is None
    assert run.status == RunStatus()
    assert run.status.phase is Phase.PENDING
    spec = Run.from_dict(task_run()).spec
    assert spec.timeout_seconds == 5400.0
    assert spec.effective_requests == {"runs": 1, "example.com/gpu": 1}
    assert spec.source is not None
    assert spec.source.effective_inline_path == "main.py"


def test_timeout_seconds_rejects_zero() -> None:
    spec = RunSpec(runtime="x", timeout="0s")
    with pytest.raises(DurationError) as caught:
        _ = spec.timeout_seconds
    assert caught.value.field == "spec.timeout"


def test_metadata_round_trip_keeps_unknown_fields_and_edits() -> None:
    obj = with_changes(
        task_run(),
        metadata__resourceVersion="42",
        metadata__generation=2,
        metadata__creationTimestamp="2026-11-29T08:00:00Z",
        metadata__ownerReferences=[{"kind": "X"}],
        metadata__labels={"a": "b"},
    )
    run = Run.from_dict(obj)
    assert run.metadata.resource_version == "42"
    assert run.metadata.generation == 2
    assert not run.metadata.is_deleting
    assert run.to_dict() == obj
    moment = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    deleted = dataclasses.replace(run.metadata, deletion_timestamp=moment, finalizers=())
    assert deleted.is_deleting
    assert deleted.to_dict()["deletionTimestamp"] == "2026-11-29T09:00:00.000000Z"
    assert deleted.to_dict()["ownerReferences"] == [{"kind": "X"}]


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (with_changes(task_run(), spec__mode__function={"handler": "m.f"}), "spec.mode"),
        (with_changes(task_run(), spec__mode={}), "spec.mode"),
        (with_changes(task_run(), spec__runtime=None), "spec.runtime"),
        (with_changes(task_run(), spec__runtime=5), "spec.runtime"),
        (with_changes(task_run(), spec__env="A=1"), "spec.env"),
        (with_changes(task_run(), spec__env=[{"value": "1"}]), "spec.env[0].name"),
        (with_changes(task_run(), spec__mode__task__args="x"), "spec.mode.task.args"),
        (with_changes(task_run(), spec__cancelRequested="yes"), "spec.cancelRequested"),
        (with_changes(task_run(), spec__ttlSecondsAfterFinished=True), "spec.ttlSecondsAfterFinished"),
        (with_changes(function_run(), spec__mode__function={}), "spec.mode.function.handler"),
        (with_changes(task_run(), status={"phase": "Done"}), "status.phase"),
        (with_changes(task_run(), status={"startTime": "now"}), "status.startTime"),
        (with_changes(task_run(), status={"endpoint": {"protocol": "GRPC", "url": "x"}}),
         "status.endpoint.protocol"),
        (with_changes(task_run(), status={"endpoint": {"protocol": "HTTPS", "url": "x", "caBundle": "!"}}),
         "status.endpoint.caBundle"),
        (with_changes(task_run(), apiVersion="v1"), "apiVersion"),
        (with_changes(task_run(), kind="Pod"), "kind"),
        (with_changes(task_run(), spec=None), "spec"),
    ],
)  # fmt: skip
def test_parse_errors_name_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        Run.from_dict(obj)
    assert caught.value.field == field


def test_bad_requests_raise_resource_error() -> None:
    with pytest.raises(ResourceError):
        Run.from_dict(with_changes(task_run(), spec__resources__requests={"runs": "1k"}))
    run = Run.from_dict(with_changes(task_run(), spec__resources__requests={"runs": "2"}))
    assert run.spec.effective_requests == {"runs": 2}


def test_runtime_round_trip_and_defaults() -> None:
    assert Runtime.from_dict(runtime()).to_dict() == runtime()
    minimal = Runtime.from_dict(
        {"metadata": {"name": "p"}, "spec": {"template": {"spec": {"containers": [{}]}}}}
    )
    assert minimal.spec.replicas == 1
    assert minimal.spec.port == 9091
    assert minimal.spec.effective_capacity == {"runs": 2}
    assert minimal.spec.daemon_image is None
    assert Runtime.from_dict(runtime()).spec.effective_capacity == {"runs": 8}
    with pytest.raises(InvalidObjectError) as caught:
        Runtime.from_dict({"spec": {}})
    assert caught.value.field == "spec.template"


def test_endpoint_to_dict_encodes_ca_bundle() -> None:
    endpoint = Endpoint(EndpointProtocol.HTTPS, "https://g/x", b"-----BEGIN")
    assert endpoint.to_dict()["caBundle"] == base64.b64encode(b"-----BEGIN").decode()
    assert Endpoint.from_dict(endpoint.to_dict()) == endpoint


# --- dataclasses <-> CRD schema agreement --------------------------------------------------


def _schema_paths(node: dict[str, Any], path: str = "") -> set[str]:
    paths = set()
    for name, sub in node.get("properties", {}).items():
        here = f"{path}.{name}"
        paths.add(here)
        if "x-kubernetes-preserve-unknown-fields" not in sub:
            paths |= _schema_paths(sub, here)
        if isinstance(sub.get("items"), dict):
            paths |= _schema_paths(sub["items"], here + "[]")
    return paths


def _value_paths(value: Any, path: str = "", *, maps: frozenset[str]) -> set[str]:
    paths = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            here = f"{path}.{key}"
            paths.add(here)
            if here not in maps:
                paths |= _value_paths(sub, here, maps=maps)
    elif isinstance(value, list):
        for item in value:
            paths |= _value_paths(item, path + "[]", maps=maps)
    return paths


_MAPS = frozenset(
    {
        ".metadata",
        ".spec.resources.requests",
        ".status.outputs",
        ".spec.capacity.resources",
        ".spec.template",
    }
)


def test_every_run_field_the_types_write_is_in_the_schema_and_vice_versa() -> None:
    both_modes = [
        Run.from_dict(with_changes(task_run(), status=full_status())).to_dict(),
        Run.from_dict(with_changes(function_run(), status=full_status())).to_dict(),
        Run.from_dict(with_changes(repo_run(), spec__cancelRequested=True)).to_dict(),
    ]
    written: set[str] = set()
    for obj in both_modes:
        written |= _value_paths(obj, maps=_MAPS)
    declared = _schema_paths(schema.run_schema())
    assert written - declared == set(), "fields written by krt.api.run but not in the CRD"
    assert declared - written == set(), "CRD fields krt.api.run never reads or writes"


def test_every_runtime_field_the_types_write_is_in_the_schema_and_vice_versa() -> None:
    written = _value_paths(Runtime.from_dict(runtime()).to_dict(), maps=_MAPS)
    declared = _schema_paths(schema.runtime_schema())
    assert written == declared


def test_status_with_every_field_passes_the_crd(run_admission: Any) -> None:
    run = Run.from_dict(with_changes(function_run(), status=full_status()))
    assert run_admission.errors(run.to_dict()) == []
    assert FunctionMode("a.b") != FunctionMode("a.b", 5)
    assert UID in run.status.to_dict()["endpoint"]["url"]
