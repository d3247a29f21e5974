"""Label and annotation syntax, checked as apimachinery's ``ValidateLabels`` and
``ValidateAnnotations`` do, with the same messages.

Label keys and annotation keys are qualified names (an optional DNS-1123 subdomain prefix
and ``/``, then at most 63 characters of ``[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]``);
label values are empty or at most 63 such characters; all annotations together (keys and
values) are at most 256 KiB. Kubernetes rejects objects that break these rules, and so
must localkube: a label that could never be selected on a real cluster must not be
accepted locally.
"""

from __future__ import annotations

import json
import re

from localkube.errors import FieldError

QUALIFIED_NAME_MAX = 63
"""Longest name part of a qualified name (characters)."""
LABEL_VALUE_MAX = 63
"""Longest label value (characters)."""
SUBDOMAIN_MAX = 253
"""Longest DNS-1123 subdomain (characters)."""
ANNOTATIONS_TOTAL_MAX = 256 * 1024
"""Largest total size of all annotation keys and values (bytes)."""

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(f"^{_QUALIFIED_NAME_FMT}$")
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_SUBDOMAIN = re.compile(f"^{_SUBDOMAIN_FMT}$")

_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{_QUALIFIED_NAME_FMT}')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE_FMT}')"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_SUBDOMAIN_FMT}')"
)


def qualified_name_problems(value: str) -> list[str]:
    """Return why ``value`` is not a qualified name (``IsQualifiedName``); empty if it is."""
    parts = value.split("/")
    problems: list[str] = []
    if len(parts) > 2:
        return [
            f"a qualified name {_QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix "
            "and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > SUBDOMAIN_MAX:
                problems.append(f"prefix part must be no more than {SUBDOMAIN_MAX} characters")
            if not _SUBDOMAIN.match(prefix):
                problems.append(f"prefix part {_SUBDOMAIN_MSG}")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        problems.append(f"name part must be no more than {QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_NAME.match(name):
        problems.append(f"name part {_QUALIFIED_NAME_MSG}")
    return problems


def label_value_problems(value: str) -> list[str]:
    """Return why ``value`` is not a valid label value (``IsValidLabelValue``)."""
    problems: list[str] = []
    if len(value) > LABEL_VALUE_MAX:
        problems.append(f"must be no more than {LABEL_VALUE_MAX} characters")
    if not _LABEL_VALUE.match(value):
        problems.append(_LABEL_VALUE_MSG)
    return problems


def _invalid(field: str, value: str, problem: str) -> FieldError:
    return FieldError(
        field,
        "FieldValueInvalid",
        f"Invalid value: {json.dumps(value, ensure_ascii=False)}: {problem}",
    )


def label_errors(labels: dict[str, str], field: str = "metadata.labels") -> list[FieldError]:
    """Return the errors of a string map used as labels (keys and values).

    Args:
        labels: the labels (already known to map strings to strings).
        field: the field path reported (``metadata.labels``, or a template's).
    """
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors += [_invalid(field, key, p) for p in qualified_name_problems(key)]
        errors += [_invalid(field, value, p) for p in label_value_problems(value)]
    return errors


def annotation_errors(
    annotations: dict[str, str], field: str = "metadata.annotations"
) -> list[FieldError]:
    """Return the errors of a string map used as annotations (keys, total size).

    Args:
        annotations: the annotations (already known to map strings to strings).
        field: the field path reported.
    """
    errors: list[FieldError] = []
    total = 0
    for key, value in annotations.items():
        errors += [_invalid(field, key, p) for p in qualified_name_problems(key.lower())]
        total += len(key.encode()) + len(value.encode())
    if total > ANNOTATIONS_TOTAL_MAX:
        errors.append(
            FieldError(
                field,
                "FieldValueTooLong",
                f"Too long: may not be more than {ANNOTATIONS_TOTAL_MAX} bytes",
            )
        )
    return errors
