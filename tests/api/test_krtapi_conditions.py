"""Condition helpers: list-map by type; lastTransitionTime changes only with status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from krt.api.conditions import (
    Condition,
    bound_message,
    find_condition,
    is_condition_true,
    parse_conditions,
    remove_condition,
    set_condition,
    set_condition_patch,
)
from krt.api.constants import ConditionStatus, Reason, RunConditionType
from krt.api.errors import InvalidObjectError
from krt.api.limits import MAX_MESSAGE_CHARS

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=5)


def _ready(status: bool, reason: str = "FunctionRegistered") -> list[Condition]:
    return set_condition([], RunConditionType.READY, status, reason=reason, now=T0)


def test_new_condition_is_appended_with_now() -> None:
    conditions = set_condition([], "Scheduled", True, reason=Reason.ASSIGNED, message="m", now=T0)
    assert conditions == [Condition("Scheduled", ConditionStatus.TRUE, "Assigned", "m", T0, None)]


def test_same_status_keeps_transition_time_but_updates_reason_and_message() -> None:
    before = _ready(False, "Registering")
    after = set_condition(before, "Ready", False, reason="RegistrationFailed", message="x", now=T1)
    assert after[0].last_transition_time == T0
    assert (after[0].reason, after[0].message) == ("RegistrationFailed", "x")


def test_status_change_moves_transition_time() -> None:
    after = set_condition(_ready(False), "Ready", True, reason="FunctionRegistered", now=T1)
    assert after[0].last_transition_time == T1
    assert after[0].status is ConditionStatus.TRUE


def test_list_map_semantics_one_entry_per_type_order_kept() -> None:
    conditions = set_condition([], "Scheduled", True, reason="Assigned", now=T0)
    conditions = set_condition(conditions, "Running", True, reason="Claimed", now=T0)
    conditions = set_condition(conditions, "Scheduled", False, reason="Requeued", now=T1)
    assert [c.type for c in conditions] == ["Scheduled", "Running"]
    duplicated = conditions + [conditions[0]]
    assert [c.type for c in set_condition(duplicated, "Scheduled", True, reason="A", now=T1)] == [
        "Scheduled",
        "Running",
    ]


def test_input_is_not_mutated() -> None:
    original = _ready(False)
    snapshot = list(original)
    set_condition(original, "Ready", True, reason="FunctionRegistered", now=T1)
    assert original == snapshot


def test_patch_is_empty_when_nothing_changes() -> None:
    conditions = _ready(True)
    assert set_condition_patch(conditions, "Ready", True, reason="FunctionRegistered", now=T1) == {}
    patch = set_condition_patch(conditions, "Ready", False, reason="IdleTimeout", now=T1)
    assert patch == {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "IdleTimeout",
                "lastTransitionTime": "2026-11-29T08:00:05.000000Z",
            }
        ]
    }


def test_observed_generation_is_kept_unless_given() -> None:
    conditions = set_condition([], "Ready", True, reason="R", now=T0, observed_generation=3)
    assert set_condition(conditions, "Ready", True, reason="R", now=T1)[0].observed_generation == 3
    assert (
        set_condition(conditions, "Ready", True, reason="R", now=T1, observed_generation=4)[
            0
        ].observed_generation
        == 4
    )


def test_long_messages_keep_their_tail() -> None:
    text = "head " + "x" * MAX_MESSAGE_CHARS + " tail"
    bounded = bound_message(text)
    assert len(bounded) == MAX_MESSAGE_CHARS
    assert bounded.endswith(" tail")
    assert bounded.startswith("\u2026")
    assert bound_message("short") == "short"
    conditions = set_condition([], "Running", False, reason="ExecutionFailed", message=text, now=T0)
    assert len(conditions[0].message) == MAX_MESSAGE_CHARS


def test_find_and_truth_and_remove() -> None:
    conditions = set_condition(_ready(True), "Scheduled", False, reason="NoReadyPod", now=T0)
    found = find_condition(conditions, "Scheduled")
    assert found is not None
    assert found.reason == "NoReadyPod"
    assert find_condition(conditions, "Running") is None
    assert is_condition_true(conditions, "Ready")
    assert not is_condition_true(conditions, "Scheduled")
    assert not is_condition_true(conditions, "Running")
    assert [c.type for c in remove_condition(conditions, "Ready")] == ["Scheduled"]


def test_wire_round_trip() -> None:
    conditions = set_condition(
        [], "Ready", True, reason="R", message="m", now=T0, observed_generation=2
    )
    wire = [c.to_dict() for c in conditions]
    assert parse_conditions(wire) == tuple(conditions)
    assert parse_conditions(None) == ()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("nope", "status.conditions"),
        (["nope"], "status.conditions[0]"),
        ([{"type": "Ready", "status": "Yes", "lastTransitionTime": "2026-11-29T08:00:00Z"}],
         "status.conditions[0].status"),
        ([{"type": "Ready", "status": "True"}], "status.conditions[0]"),
        # an invalid status is reported before a missing lastTransitionTime
        ([{"type": "Ready", "status": "Yes"}], "status.conditions[0].status"),
        ([{"type": "Ready", "status": ["True"], "lastTransitionTime": "2026-11-29T08:00:00Z"}],
         "status.conditions[0].status"),
        ([{"type": "Ready", "lastTransitionTime": "2026-11-29T08:00:00Z"}],
         "status.conditions[0]"),
        ([{"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}],
         "status.conditions[0].lastTransitionTime"),
    ],
)  # fmt: skip
def test_parse_errors_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        parse_conditions(raw)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"type": "Ready"}, "condition lacks 'status'"),
        ({"status": "True"}, "condition lacks 'type'"),
        ({"type": "Ready", "status": "True"}, "condition lacks 'lastTransitionTime'"),
        ({"type": "Ready", "status": "Yes"}, "must be True, False or Unknown, got 'Yes'"),
        ({"type": "Ready", "status": 1}, "must be True, False or Unknown, got 1"),
    ],
)
def test_parse_error_messages(raw: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidObjectError, match=message):
        parse_conditions([raw])
