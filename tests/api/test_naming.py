"""Names of a Runtime's objects (the gateway and runtimed rely on them)."""

from __future__ import annotations

import re

import pytest

from krt.api.naming import (
    runtime_deployment_name,
    runtime_object_name,
    runtime_service_host,
    runtime_service_name,
)

LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_short_names() -> None:
    assert runtime_service_name("python") == "runtime-python"
    assert runtime_deployment_name("python") == "runtime-python"
    assert runtime_service_host("python", "demo") == "runtime-python.demo.svc.cluster.local"


@pytest.mark.parametrize("length", [55, 56, 63])
def test_long_names_stay_valid_labels_and_distinct(length: int) -> None:
    a = "a" * (length - 1) + "b"
    b = "a" * (length - 1) + "c"
    for name in (a, b):
        assert len(runtime_object_name(name)) <= 63
        assert LABEL.fullmatch(runtime_object_name(name))
    assert runtime_object_name(a) != runtime_object_name(b)
    assert runtime_object_name(a) == runtime_object_name(a)


def test_hyphen_before_hash_is_not_doubled() -> None:
    name = "a" * 45 + "-" + "b" * 17
    assert "--" not in runtime_object_name(name)


def test_empty_name_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        runtime_object_name("")
