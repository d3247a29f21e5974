"""The in-memory registration map the invoke proxy reads (registration IDs never in status)."""

from __future__ import annotations

import pytest

from runtimed.functions.registry import EntryState, FunctionRegistry


def test_only_ready_entries_accept_invokes() -> None:
    changes: list[str] = []
    reg = FunctionRegistry(on_change=changes.append)
    reg.registering("u1", key="ns/f", attempt=1, digest="d")
    assert reg.accepting("u1") is None
    entry = reg.ready("u1", attempt=1, registration_id="reg_1")
    assert entry.accepts_invokes
    assert reg.accepting("u1") == entry
    reg.unavailable("u1")
    assert reg.accepting("u1") is None
    assert reg.get("u1") is not None
    assert reg.get("u1").state is EntryState.UNAVAILABLE
    assert changes == ["u1", "u1", "u1"]


def test_terminating_is_final() -> None:
    reg = FunctionRegistry()
    reg.registering("u1", key="ns/f", attempt=1, digest="d")
    reg.ready("u1", attempt=1, registration_id="reg_1")
    reg.terminating("u1", key="ns/f", attempt=1)
    assert reg.accepting("u1") is None
    assert reg.unavailable("u1").state is EntryState.TERMINATING  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="terminating"):
        reg.registering("u1", key="ns/f", attempt=2, digest="d")
    with pytest.raises(ValueError, match="terminating"):
        reg.ready("u1", attempt=1, registration_id="reg_1")
    assert reg.remove("u1") is not None
    assert reg.get("u1") is None


def test_ready_needs_the_same_attempt_and_an_id() -> None:
    reg = FunctionRegistry()
    reg.registering("u1", key="ns/f", attempt=2, digest="d")
    with pytest.raises(ValueError, match="attempt 2"):
        reg.ready("u1", attempt=1, registration_id="reg_1")
    with pytest.raises(ValueError, match="empty"):
        reg.ready("u1", attempt=2, registration_id="")
    with pytest.raises(ValueError, match=">= 1"):
        reg.registering("u2", key="ns/g", attempt=0, digest="d")
    # re-registering the same attempt keeps the known ID until the new answer arrives
    reg.ready("u1", attempt=2, registration_id="reg_9")
    assert reg.registering("u1", key="ns/f", attempt=2, digest="d").registration_id == "reg_9"
    assert reg.registering("u1", key="ns/f", attempt=3, digest="d").registration_id is None
