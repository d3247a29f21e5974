"""Chaos scenarios on one cluster: each fault alone under load, then several together.

Every scenario prints its figures (``chaos[<scenario>] ...``; run with ``-s`` to see them)
and fails on any broken promise (see ``promises.py`` and ``scenario.py``).
"""

from __future__ import annotations

import pytest

from .cluster import ChaosCluster
from .conftest import full_size
from .faults import ALL_FAULTS, Fault, Several
from .scenario import Size, run_scenario

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def _only_full(fault: type[Fault]) -> list[pytest.MarkDecorator]:
    if fault.short or full_size():
        return []
    return [pytest.mark.skip(reason="full size only: make chaos (KRT_CHAOS_FULL=1)")]


@pytest.mark.parametrize(
    "fault", [pytest.param(f, id=f.name, marks=_only_full(f)) for f in ALL_FAULTS]
)
async def test_one_fault_under_load_keeps_every_promise(
    fault: type[Fault], chaos_cluster: ChaosCluster, chaos_size: Size
) -> None:
    report = await run_scenario(chaos_cluster, [fault()], chaos_size, name=fault.name)
    report.print()
    assert not report.violations, "\n".join(report.violations)


@pytest.mark.skipif(not full_size(), reason="full size only: make chaos (KRT_CHAOS_FULL=1)")
async def test_several_faults_together_keep_every_promise(
    chaos_cluster: ChaosCluster, chaos_size: Size
) -> None:
    report = await run_scenario(chaos_cluster, [Several()], chaos_size, name=Several.name)
    report.print()
    assert not report.violations, "\n".join(report.violations)
