"""Kubernetes-style conditions on Run and Runtime status, edited by pure functions.

``status.conditions`` is a list-map keyed by ``type`` (at most one entry per type). The
helpers follow the Kubernetes convention (``meta.SetStatusCondition``):
``lastTransitionTime`` changes only when ``status`` changes; a new reason or message alone
keeps the old transition time. They never mutate their input: they return the new list, or a
:data:`~krt.api.patches.StatusPatch` that is empty when nothing would change (so callers can
skip the write).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from krt.api._build import builder
from krt.api.constants import ConditionStatus
from krt.api.errors import InvalidObjectError
from krt.api.limits import MAX_MESSAGE_CHARS
from krt.api.patches import StatusPatch
from krt.api.times import format_time, parse_time

_STATUSES: dict[str, ConditionStatus] = {status.value: status for status in ConditionStatus}


@dataclass(frozen=True, slots=True)
class Condition:
    """One entry of ``status.conditions``.

    Attributes:
        type: the condition type (``Scheduled``, ``Running``, ``Ready``, ...).
        status: ``True``, ``False`` or ``Unknown``.
        reason: a CamelCase machine reason (``FunctionRegistered``, ``PodLost``, ...).
        message: human-readable detail, at most :data:`~krt.api.limits.MAX_MESSAGE_CHARS`.
        last_transition_time: when ``status`` last changed (aware, UTC).
        observed_generation: ``metadata.generation`` the writer acted on, if it tracks it.
    """

    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: datetime
    observed_generation: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, field: str = "status.conditions[]") -> Condition:
        """Parse one wire-form condition.

        Raises:
            InvalidObjectError: a required field is missing or has the wrong type.
        """
        try:
            ctype = data["type"]
            raw_status = data["status"]
        except KeyError as missing:
            raise InvalidObjectError(field, f"condition lacks {missing.args[0]!r}") from None
        status = _STATUSES.get(raw_status) if isinstance(raw_status, str) else None
        if status is None:
            raise InvalidObjectError(
                f"{field}.status", f"must be True, False or Unknown, got {data.get('status')!r}"
            )
        if "lastTransitionTime" not in data:
            raise InvalidObjectError(field, "condition lacks 'lastTransitionTime'")
        transition = data["lastTransitionTime"]
        if not isinstance(ctype, str) or not isinstance(transition, str):
            raise InvalidObjectError(field, "type and lastTransitionTime must be strings")
        generation = data.get("observedGeneration")
        return _new_condition(
            ctype,
            status,
            str(data.get("reason", "")),
            str(data.get("message", "")),
            _transition_time(transition, field),
            generation if isinstance(generation, int) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire form (camelCase keys; empty message and absent generation omitted)."""
        data: dict[str, Any] = {
            "type": self.type,
            "status": self.status.value,
            "reason": self.reason,
            "lastTransitionTime": format_time(self.last_transition_time),
        }
        if self.message:
            data["message"] = self.message
        if self.observed_generation is not None:
            data["observedGeneration"] = self.observed_generation
        return data


# Positional constructor in field order (see krt.api._build: the parsers' hot path).
_new_condition = builder(Condition)


def bound_message(text: str, *, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Fit a message into ``limit`` characters, keeping its end (a failure's stderr tail).

    Args:
        text: the message.
        limit: maximum length in characters (at least 2).

    Returns:
        ``text`` when short enough, else ``"…" + the last limit-1 characters``.
    """
    if len(text) <= limit:
        return text
    return "\u2026" + text[len(text) - (limit - 1) :]


def find_condition(conditions: Iterable[Condition], ctype: str) -> Condition | None:
    """The condition of type ``ctype``, or ``None``."""
    for condition in conditions:
        if condition.type == ctype:
            return condition
    return None


def is_condition_true(conditions: Iterable[Condition], ctype: str) -> bool:
    """True when a condition of type ``ctype`` exists with status ``True``."""
    condition = find_condition(conditions, ctype)
    return condition is not None and condition.status is ConditionStatus.TRUE


def set_condition(
    conditions: Sequence[Condition],
    ctype: str,
    status: ConditionStatus | bool,
    *,
    reason: str,
    message: str = "",
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """Return ``conditions`` with the ``ctype`` entry set (list-map semantics, order kept).

    Args:
        conditions: the current list (not modified).
        ctype: the condition type to set.
        status: the new status (``bool`` maps to True/False).
        reason: the new reason.
        message: the new message; longer than the bound keeps its tail (:func:`bound_message`).
        now: the writer's current time; becomes ``lastTransitionTime`` only if ``status``
            differs from the existing entry's (or the entry is new).
        observed_generation: recorded when given.

    Returns:
        A new list: the existing entry replaced in place, or the new one appended.
    """
    if isinstance(status, bool):
        status = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    message = bound_message(message)
    result: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != ctype:
            result.append(condition)
            continue
        if found:  # a duplicate entry breaks the list-map: drop it
            continue
        found = True
        transition = condition.last_transition_time if condition.status is status else now
        result.append(
            replace(
                condition,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=transition,
                observed_generation=observed_generation
                if observed_generation is not None
                else condition.observed_generation,
            )
        )
    if not found:
        result.append(
            Condition(
                type=ctype,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=observed_generation,
            )
        )
    return result


def remove_condition(conditions: Sequence[Condition], ctype: str) -> list[Condition]:
    """Return ``conditions`` without any entry of type ``ctype``."""
    return [condition for condition in conditions if condition.type != ctype]


def wire_conditions(conditions: Iterable[Condition]) -> list[dict[str, Any]]:
    """``conditions`` as the JSON list ``status.conditions`` holds."""
    return [condition.to_dict() for condition in conditions]


def conditions_patch(conditions: Sequence[Condition]) -> StatusPatch:
    """The status merge patch that writes ``conditions`` (merge patches replace lists whole)."""
    return {"conditions": wire_conditions(conditions)}


def set_condition_patch(
    conditions: Sequence[Condition],
    ctype: str,
    status: ConditionStatus | bool,
    *,
    reason: str,
    message: str = "",
    now: datetime,
    observed_generation: int | None = None,
) -> StatusPatch:
    """Like :func:`set_condition`, as a status patch; ``{}`` when nothing would change.

    Returns:
        ``{"conditions": [...complete new list...]}`` or ``{}``.
    """
    updated = set_condition(
        conditions,
        ctype,
        status,
        reason=reason,
        message=message,
        now=now,
        observed_generation=observed_generation,
    )
    if updated == list(conditions):
        return {}
    return conditions_patch(updated)


def parse_conditions(raw: object, *, field: str = "status.conditions") -> tuple[Condition, ...]:
    """Parse a wire-form conditions list (absent means empty).

    Raises:
        InvalidObjectError: ``raw`` is not a list of condition objects.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidObjectError(field, "must be a list")
    parsed = []
    for index, item in enumerate(raw):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise InvalidObjectError(f"{field}[{index}]", "must be an object")
        try:
            parsed.append(Condition.from_dict(item))
        except InvalidObjectError:
            # the item's path is only spelled out for the error (it costs on every event)
            Condition.from_dict(item, field=f"{field}[{index}]")
            raise
    return tuple(parsed)


def _transition_time(text: str, field: str) -> datetime:
    """``parse_time`` with the ``lastTransitionTime`` path built only for the error."""
    try:
        return parse_time(text)
    except InvalidObjectError:
        return parse_time(text, field=f"{field}.lastTransitionTime")
