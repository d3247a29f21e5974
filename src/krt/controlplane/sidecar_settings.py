"""The runtimed sidecar's hardening: security context, resources and liveness (pure).

Every Runtime Pod gets the injected ``runtimed`` container (:mod:`krt.controlplane.
runtime_resources`). So that a Runtime Pod is admitted in a namespace that enforces the
Kubernetes Pod Security Standards "restricted" profile, which checks *every* container, the
sidecar carries its own container-level settings instead of relying on the Runtime's Pod
template: no privilege escalation, all capabilities dropped, ``runAsNonRoot`` (the image
runs as the numeric user 65532, images/Dockerfile) and the ``RuntimeDefault`` seccomp
profile; its root filesystem is read-only, with a small emptyDir at ``/tmp``.

Its CPU/memory requests and memory limit are an installation setting (the control plane's
``--runtimed-resources``, chart value ``runtimed.resources``), so namespaces with a
ResourceQuota on requests/limits admit the Pods. Its liveness probe is runtimed's ``/healthz``,
which answers 200 while runtimed's own loops run whatever the Runtime Server's health (that
is the ``kruntimes.io/RuntimedReady`` condition), with generous timing so a busy burst never
restarts it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from krt.api.naming import RUNTIMED_HTTP_PORT_NAME

#: The sidecar's container ``securityContext`` (Pod Security Standards "restricted").
RUNTIMED_SECURITY_CONTEXT: Final[Mapping[str, Any]] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}

#: The emptyDir mounted at ``/tmp`` in the sidecar (its root filesystem is read-only).
RUNTIMED_TMP_VOLUME: Final = "kruntimes-runtimed-tmp"
RUNTIMED_TMP_MOUNT_PATH: Final = "/tmp"
RUNTIMED_TMP_SIZE_LIMIT: Final = "64Mi"

#: The sidecar's liveness probe: ``GET /healthz`` every 10 s, 5 s to answer, restarted only
#: after 6 failures in a row (a minute), so a loaded node never restarts a working runtimed.
#: The first probe waits 30 s: ``/healthz`` is served once runtimed's informers have synced,
#: which a slow API server or a namespace with many Runs can delay.
RUNTIMED_LIVENESS_PROBE: Final[Mapping[str, Any]] = {
    "httpGet": {"path": "/healthz", "port": RUNTIMED_HTTP_PORT_NAME},
    "initialDelaySeconds": 30,
    "periodSeconds": 10,
    "timeoutSeconds": 5,
    "failureThreshold": 6,
    "successThreshold": 1,
}

#: The sidecar's resources unless the installation sets others (``--runtimed-resources``).
DEFAULT_RUNTIMED_RESOURCES: Final[Mapping[str, Mapping[str, str]]] = {
    "requests": {"cpu": "50m", "memory": "96Mi"},
    "limits": {"memory": "512Mi"},
}

#: A Kubernetes resource quantity (non-negative): a number with an optional binary-SI,
#: decimal-SI or exponent suffix (``50m``, ``96Mi``, ``1.5``, ``2e3``).
_QUANTITY: Final = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$")
#: A resource name: ``cpu``, ``memory``, ``ephemeral-storage``, ``example.com/thing``.
_RESOURCE_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9./]*[a-z0-9])?$")
_SETTING: Final = "runtimed resources"


def check_resources(value: object) -> dict[str, dict[str, str]]:
    """Validate a container ``resources`` object and return a plain copy.

    Args:
        value: ``{"requests": {name: quantity}, "limits": {name: quantity}}``; either key
            may be absent, ``{}`` means no requests or limits.

    Raises:
        ValueError: not an object, a key other than ``requests``/``limits``, a resource name
            that is not a resource name, or a value that is not a non-negative quantity
            (the message names the setting and the entry).
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"{_SETTING}: expected an object with requests and/or limits")
    result: dict[str, dict[str, str]] = {}
    for section, entries in value.items():
        if section not in ("requests", "limits"):
            raise ValueError(f"{_SETTING}: unknown key {section!r} (only requests, limits)")
        if not isinstance(entries, Mapping):
            raise ValueError(f"{_SETTING}: {section} must be an object of quantities")
        checked: dict[str, str] = {}
        for name, quantity in entries.items():
            if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
                raise ValueError(f"{_SETTING}: {section}: {name!r} is not a resource name")
            text = str(quantity) if isinstance(quantity, int | float) else quantity
            if isinstance(quantity, bool) or not isinstance(text, str) or not _QUANTITY.match(text):
                raise ValueError(
                    f"{_SETTING}: {section}.{name}: {quantity!r} is not a quantity "
                    "(e.g. 50m, 96Mi, 1)"
                )
            checked[name] = text
        if checked:
            result[section] = checked
    return result


def parse_resources_json(text: str) -> dict[str, dict[str, str]]:
    """Parse ``--runtimed-resources``: a JSON object as :func:`check_resources` takes.

    Raises:
        ValueError: not JSON, or see :func:`check_resources`.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{_SETTING}: not JSON ({exc.msg})") from None
    return check_resources(value)
