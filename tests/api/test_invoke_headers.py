"""The invoke wire names are defined once and match the documented contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from krt.api import invoke_headers
from krt.api.invoke_headers import wire_name

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def test_wire_name_is_lowercase_ascii_bytes() -> None:
    assert wire_name("X-Kruntime-Invocation-ID") == b"x-kruntime-invocation-id"


@pytest.mark.parametrize(
    "header",
    [
        invoke_headers.INVOCATION_ID_HEADER,
        invoke_headers.TIMEOUT_HEADER,
        invoke_headers.OUTPUTS_HEADER,
    ],
)
def test_http_headers_are_the_documented_ones(header: str) -> None:
    assert header in DOC.read_text()


def test_grpc_metadata_names_are_lowercase() -> None:
    for name in (invoke_headers.NAMESPACE_METADATA, invoke_headers.RUNTIME_METADATA):
        assert name == name.lower()
        assert name.startswith("x-kruntime-")
