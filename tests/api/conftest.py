"""Fixtures for the API tests: admission of the committed Run and Runtime CRDs."""

from __future__ import annotations

import pytest
from krtapi_crd_harness import Admission, load_crd_schema


@pytest.fixture(scope="session")
def run_admission() -> Admission:
    """Admission for the committed Run CRD."""
    return Admission(load_crd_schema("runs.kruntimes.io.yaml"))


@pytest.fixture(scope="session")
def runtime_admission() -> Admission:
    """Admission for the committed Runtime CRD."""
    return Admission(load_crd_schema("runtimes.kruntimes.io.yaml"))
