"""Logical resources: ``Run.spec.resources.requests`` and ``Runtime.spec.capacity.resources``.

Issue 5 and seed 000, Capacity and Concurrency: resources are integer logical quantities
keyed by name (``runs`` and any others a Runtime declares, e.g. ``gpu``). A Run requests
``runs: 1`` unless it says otherwise; a Runtime Pod offers ``runs: 2`` unless the Runtime says
otherwise (a capacity map without ``runs`` still gets ``runs: 2``: every Run requests runs).
A Pod's usage is the sum of the requests of the Runs that hold capacity on it (see
:func:`krt.api.phases.holds_capacity`); :func:`fits` decides whether one more Run fits.

Quantities are non-negative integers, written as JSON numbers (``runs: 2``) or, as the seeds
write them (a Go ``resource.Quantity``), decimal strings (``runs: "2"``); the CRD declares them
int-or-string. A logical resource has no units, so suffixes and fractions (``1k``, ``500m``)
are rejected, by the CRD and by :func:`parse_quantity` alike, with a message saying so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final, TypeAlias

from krt.api.errors import ResourceError
from krt.api.limits import (
    MAX_RESOURCE_KINDS,
    MAX_RESOURCE_NAME_CHARS,
    MAX_RESOURCE_QUANTITY,
    RESOURCE_NAME_PATTERN,
    RESOURCE_QUANTITY_STRING_PATTERN,
)

ResourceList: TypeAlias = Mapping[str, int]
"""Resource name -> non-negative integer quantity."""

RUNS: Final = "runs"
DEFAULT_RUN_REQUESTS: Final[ResourceList] = MappingProxyType({RUNS: 1})
DEFAULT_RUNTIME_CAPACITY: Final[ResourceList] = MappingProxyType({RUNS: 2})

_NAME: Final = re.compile(RESOURCE_NAME_PATTERN)
_QUANTITY_STRING: Final = re.compile(RESOURCE_QUANTITY_STRING_PATTERN)


def parse_quantity(value: object, *, field: str) -> int:
    """Parse one logical quantity.

    Args:
        value: a JSON integer, or a string of decimal digits (``"2"``).
        field: dotted path for the error message.

    Returns:
        The quantity.

    Raises:
        ResourceError: not an integer (booleans, floats and strings such as ``"500m"``,
            ``"1k"`` or ``"-1"`` are rejected, as the CRD does) or outside
            ``0..``:data:`~krt.api.limits.MAX_RESOURCE_QUANTITY`.
    """
    if isinstance(value, str) and _QUANTITY_STRING.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResourceError(
            field,
            f'must be an integer such as 2 or "2" (no suffixes or fractions), got {value!r}',
        )
    if value < 0 or value > MAX_RESOURCE_QUANTITY:
        raise ResourceError(field, f"must be between 0 and {MAX_RESOURCE_QUANTITY}, got {value}")
    return value


def parse_resources(raw: object, *, field: str) -> dict[str, int]:
    """Parse a resources map (absent means empty; no defaults applied).

    Raises:
        ResourceError: not a map, too many names, an invalid name or quantity.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ResourceError(field, "must be a map of resource name to integer")
    if len(raw) > MAX_RESOURCE_KINDS:
        raise ResourceError(
            field, f"{len(raw)} resource names exceed the limit of {MAX_RESOURCE_KINDS}"
        )
    parsed: dict[str, int] = {}
    for name, value in raw.items():
        if (
            not isinstance(name, str)
            or len(name) > MAX_RESOURCE_NAME_CHARS
            or not _NAME.fullmatch(name)
        ):
            raise ResourceError(field, f"invalid resource name {name!r}")
        if type(value) is int and 0 <= value <= MAX_RESOURCE_QUANTITY:
            parsed[name] = value  # the common case, without building the field's path
        else:
            parsed[name] = parse_quantity(value, field=f"{field}.{name}")
    return parsed


def run_requests(requests: Mapping[str, int] | None) -> dict[str, int]:
    """A Run's effective requests: ``runs`` defaults to 1.

    Args:
        requests: parsed ``spec.resources.requests`` (or ``None``).

    Raises:
        ResourceError: ``runs`` is 0 (a Run must occupy a slot, or capacity means nothing).
    """
    effective = {**DEFAULT_RUN_REQUESTS, **(requests or {})}
    if effective[RUNS] < 1:
        raise ResourceError("spec.resources.requests.runs", "must be at least 1")
    return effective


def runtime_capacity(capacity: Mapping[str, int] | None) -> dict[str, int]:
    """A Runtime Pod's effective capacity: ``runs`` defaults to 2."""
    return {**DEFAULT_RUNTIME_CAPACITY, **(capacity or {})}


def add(*lists: ResourceList) -> dict[str, int]:
    """Sum resource lists name by name."""
    total: dict[str, int] = {}
    for resources in lists:
        for name, quantity in resources.items():
            total[name] = total.get(name, 0) + quantity
    return total


def total_usage(requests: Iterable[ResourceList]) -> dict[str, int]:
    """The usage of a Pod: the sum of the effective requests of the Runs holding capacity on it."""
    return add(*requests)


def free(capacity: ResourceList, used: ResourceList) -> dict[str, int]:
    """Remaining capacity per name (never negative; names only in ``used`` are omitted)."""
    return {name: max(0, total - used.get(name, 0)) for name, total in capacity.items()}


def fits(requests: ResourceList, used: ResourceList, capacity: ResourceList) -> bool:
    """True when a Run with ``requests`` fits on a Pod with ``capacity`` already using ``used``.

    Args:
        requests: the Run's effective requests (:func:`run_requests`).
        used: the Pod's current usage (:func:`total_usage`).
        capacity: the Pod's effective capacity (:func:`runtime_capacity`).

    Returns:
        True iff for every requested name, ``used + requested <= capacity`` (a name the Pod
        does not offer has capacity 0, so any positive request for it does not fit).
    """
    return all(
        used.get(name, 0) + quantity <= capacity.get(name, 0)
        for name, quantity in requests.items()
        if quantity > 0
    )
