"""The committed CRDs admit valid Runs/Runtimes and reject invalid ones with clear messages.

Checked with the independent jsonschema + celpy harness of conftest.py; the same cases run
through localkube's CRDValidator in test_krtapi_crd_localkube.py. Seed 000 Spec Transition Rules
and Run Status API bounds; seed 001 mode exclusivity; issue 5 validation list.
"""

from __future__ import annotations

import pytest
from krtapi_crd_cases import INVALID_RUNS, INVALID_RUNTIMES, VALID_RUNS, VALID_RUNTIMES, Case
from krtapi_crd_harness import Admission, matches


@pytest.mark.parametrize("case", VALID_RUNS, ids=lambda c: c.id)
def test_valid_run_is_admitted(run_admission: Admission, case: Case) -> None:
    assert run_admission.errors(case.obj, case.old) == []


@pytest.mark.parametrize("case", INVALID_RUNS, ids=lambda c: c.id)
def test_invalid_run_is_rejected_with_its_message(run_admission: Admission, case: Case) -> None:
    errors = run_admission.errors(case.obj, case.old)
    assert matches(errors, case.expect), errors


@pytest.mark.parametrize("case", VALID_RUNTIMES, ids=lambda c: c.id)
def test_valid_runtime_is_admitted(runtime_admission: Admission, case: Case) -> None:
    assert runtime_admission.errors(case.obj, case.old) == []


@pytest.mark.parametrize("case", INVALID_RUNTIMES, ids=lambda c: c.id)
def test_invalid_runtime_is_rejected(runtime_admission: Admission, case: Case) -> None:
    errors = runtime_admission.errors(case.obj, case.old)
    assert matches(errors, case.expect), errors


def test_transition_rules_are_skipped_on_create(run_admission: Admission) -> None:
    # A Run created with cancelRequested true is fine: the rule compares with oldSelf only.
    from krtapi_samples import task_run, with_changes

    assert run_admission.errors(with_changes(task_run(), spec__cancelRequested=True)) == []
