"""An invalid Run is rejected by the API with a clear message (issue 5 acceptance).

The rules live in the CRD (charts/kruntimes/crds, from :mod:`krt.api.schema`); this checks
them end to end on localkube as the control plane's users meet them.
"""

from __future__ import annotations

import pytest

from krt.kube.client import Kube
from krt.kube.errors import Invalid
from krt.kube.resources import RUNS

from .harness import NS, run_manifest


async def _rejected(kube: Kube, manifest: dict[str, object]) -> str:
    with pytest.raises(Invalid) as caught:
        await kube.create(RUNS, manifest)
    return str(caught.value)


async def test_invalid_runs_are_rejected_with_clear_messages(kube: Kube) -> None:
    both = run_manifest("both")
    both["spec"]["mode"] = {"task": {"entrypoint": "main.py"}, "function": {"handler": "m.f"}}
    assert "exactly one of spec.mode.task or spec.mode.function" in await _rejected(kube, both)

    dotdot = run_manifest("dotdot")
    dotdot["spec"]["mode"] = {"task": {"entrypoint": "../etc/passwd"}}
    assert "spec.mode.task.entrypoint must not contain a '..'" in await _rejected(kube, dotdot)


async def test_spec_transition_rules(kube: Kube) -> None:
    created = await kube.create(RUNS, run_manifest("immutable"))
    with pytest.raises(Invalid, match="spec.runtime is immutable"):
        await kube.patch(RUNS, "immutable", NS, {"spec": {"runtime": "bash"}})
    await kube.patch(RUNS, "immutable", NS, {"spec": {"cancelRequested": True}})
    with pytest.raises(Invalid, match="cancelRequested may only change from false to true"):
        await kube.patch(RUNS, "immutable", NS, {"spec": {"cancelRequested": False}})
    # ttlSecondsAfterFinished stays mutable
    await kube.patch(RUNS, "immutable", NS, {"spec": {"ttlSecondsAfterFinished": 5}})
    assert created["metadata"]["name"] == "immutable"
