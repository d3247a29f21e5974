"""Idempotent apply of the manifests ``krt dev up`` installs (create, or update what differs).

The manifest set lives in :mod:`krt.cli.dev_manifests`: the two charts rendered by Helm's own
engine with their ``values-localkube.yaml`` (``tests/quickstart/render_dev_manifests.py``
writes them; its ``--check`` fails the tests when a chart changed without a re-render).
Shipping rendered manifests instead of rendering at run time keeps Helm's engine (a ~240 MB
native library, an alpha API) out of the ``krt`` install, and works from a wheel that has no
``charts/`` folder; faithfulness to the charts is the drift test's job.

Apply is the part of ``kubectl apply`` a fresh or re-run install needs: create an object
that is missing; when it exists, leave it alone if every field the manifest sets already
has that value (:func:`is_applied`: server defaults are extra fields, not differences),
else replace it with the manifest (keeping ``resourceVersion``, so a concurrent writer gets
409). Re-running ``krt dev up`` therefore changes nothing and restarts no Pod.

The TLS Secrets are ``krt dev up``'s own: the whole dev cluster trusts only the CAs it
generated, so one holding a certificate from elsewhere (rotated by hand with kubectl) is put
back like any other object, but never silently: a ``warning:`` line names the Secret, says
what was done and why (:func:`replaced_secret_warning`).

An object the user owns once it exists (the built-in demo Runtimes) is applied with
``overwrite=False``: created when missing, otherwise left as it is, edits included
(``kept``). :func:`object_name` words an object as kubectl does (``runtime.kruntimes.io/bash``),
so every result can be reported per object (``runtime.kruntimes.io/bash kept``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final, Literal

import click
import yaml

from krt.cli.dev_certs import foreign_certificate
from krt.kube.client import Kube
from krt.kube.errors import AlreadyExists, NotFound
from krt.kube.resources import (
    DEPLOYMENTS,
    NAMESPACES,
    ROLEBINDINGS,
    ROLES,
    RUNTIMES,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceRef,
)

__all__ = [
    "KIND_REFS",
    "ApplyResult",
    "apply",
    "is_applied",
    "load_manifests",
    "object_name",
    "ref_for",
    "replaced_secret_warning",
]

Obj = dict[str, Any]
#: What :func:`apply` did: ``created``; ``configured`` (replaced with the manifest);
#: ``unchanged`` (already as the manifest says); ``kept`` (differs from the manifest, left
#: as it is because ``overwrite=False``).
ApplyResult = Literal["created", "configured", "unchanged", "kept"]

#: REST collections of every kind the manifest set holds (and the Secrets we add).
KIND_REFS: Final[dict[str, ResourceRef]] = {
    "Namespace": NAMESPACES,
    "ServiceAccount": SERVICEACCOUNTS,
    "Service": SERVICES,
    "Deployment": DEPLOYMENTS,
    "Role": ROLES,
    "RoleBinding": ROLEBINDINGS,
    "ClusterRole": ResourceRef(
        "rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole"
    ),
    "ClusterRoleBinding": ResourceRef(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding"
    ),
    "Runtime": RUNTIMES,
    "Secret": ResourceRef("", "v1", "secrets", True, "Secret"),
    "ConfigMap": ResourceRef("", "v1", "configmaps", True, "ConfigMap"),
    "CustomResourceDefinition": ResourceRef(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
    ),
}

#: Fields the API server owns: never compared, never sent back.
_SERVER_FIELDS: Final = ("status",)
_SERVER_METADATA: Final = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
)


def load_manifests(name: Literal["crds", "kruntimes", "runtimes"]) -> list[Obj]:
    """The documents of one file of the shipped manifest set (``dev_manifests/<name>.yaml``).

    Raises:
        ValueError: a document is not a mapping with ``kind`` and ``metadata.name``.
    """
    text = resources.files("krt.cli.dev_manifests").joinpath(f"{name}.yaml").read_text()
    docs: list[Obj] = []
    for index, doc in enumerate(yaml.safe_load_all(text)):
        if doc is None:
            continue
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("kind"), str)
            or not isinstance((doc.get("metadata") or {}).get("name"), str)
        ):
            raise ValueError(f"{name}.yaml document {index}: not a manifest with kind and name")
        docs.append(doc)
    return docs


def ref_for(doc: Mapping[str, Any]) -> ResourceRef:
    """The REST collection of a manifest.

    Raises:
        ValueError: a kind the install does not handle (names it).
    """
    kind = doc.get("kind")
    ref = KIND_REFS.get(str(kind))
    if ref is None:
        raise ValueError(f"cannot apply kind {kind!r}: known kinds are {sorted(KIND_REFS)}")
    return ref


def object_name(doc: Mapping[str, Any]) -> str:
    """The object as ``kubectl apply`` names it: ``<kind>[.<group>]/<name>``.

    E.g. ``namespace/kruntimes-system``, ``deployment.apps/krt-kruntimes-gateway``,
    ``runtime.kruntimes.io/bash``.

    Raises:
        ValueError: a kind the install does not handle (names it).
    """
    ref = ref_for(doc)
    kind = ref.kind.lower() + (f".{ref.group}" if ref.group else "")
    return f"{kind}/{(doc.get('metadata') or {}).get('name')}"


def is_applied(desired: Any, live: Any) -> bool:
    """Whether ``live`` already holds every value ``desired`` sets.

    Mappings: each key of ``desired`` must be in ``live`` with an applied value (extra keys
    in ``live`` are server defaults and do not count). Lists: the same length, element by
    element. Anything else: equal. Server-owned fields (``status``, ``metadata.uid``, ...)
    in ``desired`` are ignored.
    """
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return False
        return all(k in live and is_applied(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(is_applied(d, v) for d, v in zip(desired, live, strict=True))
        )
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    return bool(desired == live)


def _intent(doc: Mapping[str, Any]) -> Obj:
    out = {k: copy.deepcopy(v) for k, v in doc.items() if k not in _SERVER_FIELDS}
    meta = dict(out.get("metadata") or {})
    for key in _SERVER_METADATA:
        meta.pop(key, None)
    out["metadata"] = meta
    return out


async def apply(
    kube: Kube,
    doc: Mapping[str, Any],
    *,
    overwrite: bool = True,
    warn: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Create ``doc``, or bring the live object to it; see the module docstring.

    Args:
        kube: a client allowed to write the object.
        doc: the manifest (``kind``, ``metadata.name``, ``metadata.namespace`` when
            namespaced).
        overwrite: replace a live object that differs from ``doc`` (False: leave it as it
            is and return ``"kept"``).
        warn: told (one line, no newline) when a dev TLS Secret someone else changed is
            replaced (:func:`replaced_secret_warning`); default: the line goes to stderr.

    Returns:
        ``"created"``, ``"configured"`` (replaced), ``"unchanged"`` or ``"kept"``.

    Raises:
        ValueError: an unknown kind, or a namespaced manifest without a namespace.
        krt.kube.errors.ApiError: the API server refused (e.g. Invalid, Forbidden, or a
            Conflict when someone else changed the object meanwhile).
    """
    ref = ref_for(doc)
    intent = _intent(doc)
    name = intent["metadata"]["name"]
    namespace = intent["metadata"].get("namespace")
    if ref.namespaced and not namespace:
        raise ValueError(f"{ref.kind} {name}: metadata.namespace is required")
    try:
        live = await kube.get(ref, name, namespace if ref.namespaced else None)
    except NotFound:
        try:
            await kube.create(ref, intent)
            return "created"
        except AlreadyExists:  # created meanwhile: compare with that one below
            live = await kube.get(ref, name, namespace if ref.namespaced else None)
    if is_applied(intent, live):
        return "unchanged"
    if not overwrite:
        return "kept"
    warning = replaced_secret_warning(intent, live)
    if warning:
        (warn or _to_stderr)(warning)
    replacement = copy.deepcopy(intent)
    replacement["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    if ref.kind == "Service":  # the allocated ClusterIP is immutable: keep it
        live_spec, spec = live.get("spec") or {}, replacement.setdefault("spec", {})
        for key in ("clusterIP", "clusterIPs"):
            if key in live_spec and key not in spec:
                spec[key] = live_spec[key]
    await kube.replace(ref, replacement)
    return "configured"


def replaced_secret_warning(desired: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """The warning for replacing a dev TLS Secret that someone else changed, or ``""``.

    ``krt dev up`` owns its TLS Secrets (:func:`krt.cli.dev_certs.tls_secret`: labelled
    ``kruntimes.io/dev``): every part of the dev cluster trusts only the CAs it generated
    (clients check the gateway against the ``caBundle`` runtimed publishes, the gateway and
    runtimed check each other against the peer CA), so a certificate from elsewhere breaks
    invokes, and :func:`apply` puts its own copy back. That is said, not done silently,
    when the live Secret is not one ``krt dev up`` made
    (:func:`krt.cli.dev_certs.foreign_certificate`, e.g. rotated by hand); re-issuing its
    own leaf for new names is routine and says only ``configured``.

    Args:
        desired: the manifest being applied.
        live: the object as it is (differs from ``desired``).

    Returns:
        One line naming the Secret, what is done and why; ``""`` for any other object.
    """
    meta = desired.get("metadata") or {}
    if (
        desired.get("kind") != "Secret"
        or desired.get("type") != "kubernetes.io/tls"
        or (meta.get("labels") or {}).get("kruntimes.io/dev") != "true"
    ):
        return ""
    why = foreign_certificate(live, desired)
    if not why:
        return ""
    return (
        f"warning: secret {meta.get('namespace')}/{meta.get('name')} was changed since krt dev "
        f"up made it ({why}); replaced with krt dev up's copy: the dev cluster trusts only the "
        "CAs krt dev up generated, so another certificate fails its TLS checks (Pods using the "
        "Secret reload it within about 30 s; for certificates of your own, install the Helm "
        "chart, docs/install.md)"
    )


def _to_stderr(line: str) -> None:
    click.echo(line, err=True)
