"""registration_digest (seed 002, Registration Identity)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest

from krt.api import Run
from runtimed.functions.digest import canonical_inputs, registration_digest


def run(**spec: Any) -> Run:
    base: dict[str, Any] = {
        "runtime": "python",
        "source": {"inline": "def invoke(r):\n    return r\n"},
        "mode": {"function": {"handler": "main.invoke", "idleTimeoutSeconds": 60}},
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }
    base.update(spec)
    return Run.from_dict({"metadata": {"name": "f", "namespace": "ns", "uid": "u1"}, "spec": base})


def test_digest_is_lowercase_sha256_of_the_canonical_json() -> None:
    digest = registration_digest(run(), inline_path="main.py")
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    raw = canonical_inputs(run(), inline_path="main.py")
    assert digest == hashlib.sha256(raw).hexdigest()
    doc = json.loads(raw)
    assert doc["handler"] == "main.invoke"
    assert (
        doc["source"]["inlineSHA256"]
        == hashlib.sha256(b"def invoke(r):\n    return r\n").hexdigest()
    )
    assert "workingDir" not in raw.decode()
    assert "/workspace" not in raw.decode()


def test_digest_is_stable_and_env_order_does_not_matter() -> None:
    a = registration_digest(run(), inline_path="main.py")
    swapped = run(env=[{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
    assert registration_digest(swapped, inline_path="main.py") == a
    # another Run object (other name/uid/status) with the same inputs: same digest
    other = Run.from_dict(
        {**run().to_dict(), "metadata": {"name": "g", "namespace": "x", "uid": "u2"}}
    )
    assert registration_digest(other, inline_path="main.py") == a


@pytest.mark.parametrize(
    "change",
    [
        {"source": {"inline": "def invoke(r):\n    return 1\n"}},
        {"mode": {"function": {"handler": "main.other", "idleTimeoutSeconds": 60}}},
        {"mode": {"function": {"handler": "main.invoke", "idleTimeoutSeconds": 61}}},
        {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]},
        {"runtime": "python2"},
        {"source": {"repoURL": "https://example.com/r.git", "commitSHA": "a" * 40}},
    ],
)
def test_each_immutable_input_changes_the_digest(change: dict[str, Any]) -> None:
    assert registration_digest(run(**change), inline_path="main.py") != registration_digest(
        run(), inline_path="main.py"
    )


def test_inline_file_is_part_of_the_source_identity() -> None:
    assert registration_digest(run(), inline_path="main.py") != registration_digest(
        run(), inline_path="app.py"
    )


def test_task_runs_have_no_digest() -> None:
    with pytest.raises(ValueError, match="task Run"):
        registration_digest(run(mode={"task": {}}), inline_path="main.py")
