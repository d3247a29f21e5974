"""Render the kruntimes Helm charts with Helm's own template engine, from Python.

Helm's engine is Go code; ``helm-python-sdk`` (the ``helm_python`` module, a ``test`` extra)
ships it as a shared library bound with ctypes, so no ``helm`` binary is downloaded and
rendering works offline (``Chart.render`` is ``helm template``: no cluster is contacted,
``lookup`` returns nothing). Where the package is missing (or its native library cannot be
loaded on this platform), every test that renders is skipped with the reason.

Also here: the kind -> REST collection table used to apply rendered manifests to localkube.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from krt.kube.resources import (
    DEPLOYMENTS,
    ROLEBINDINGS,
    ROLES,
    RUNTIMES,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceRef,
)

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "charts"
KRUNTIMES = CHARTS / "kruntimes"
RUNTIMES_CHART = CHARTS / "kruntimes-runtimes"
CRD_DIR = KRUNTIMES / "crds"

#: Release name and namespace the tests render with (the namespace of seed 000's example URL).
RELEASE = "krt"
NAMESPACE = "kruntimes-system"

try:  # pragma: no cover - depends on the environment
    import helm_python

    HELM_ERROR: str | None = None
except Exception as exc:  # ImportError, or OSError from the native library
    helm_python = None
    HELM_ERROR = f"Helm's engine is unavailable (helm-python-sdk: {exc!r}); install '.[test]'"

requires_helm = pytest.mark.skipif(HELM_ERROR is not None, reason=HELM_ERROR or "")


class RenderError(Exception):
    """Helm refused to render: the message is Helm's (a ``fail``/``required`` message)."""


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into ``base`` like Helm merges ``-f`` files (maps merge, rest replaces)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def values_file(chart: Path, name: str) -> dict[str, Any]:
    """Load a values file shipped next to a chart (e.g. ``values-localkube.yaml``)."""
    data = yaml.safe_load((chart / name).read_text())
    assert isinstance(data, dict)
    return data


def render_files(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Render ``chart`` as ``helm install --dry-run`` would: template path -> text.

    Raises:
        RenderError: a template failed (Helm's message, e.g. from ``required``).
    """
    if helm_python is None:  # pragma: no cover
        pytest.skip(HELM_ERROR or "helm-python-sdk unavailable")
    # a fresh load each time: the files may change between renders (and loading is cheap)
    with helm_python.Chart.load(str(chart)) as loaded:
        try:
            return dict(
                loaded.render(
                    dict(values or {}), name=release, namespace=namespace, is_install=True
                )
            )
        except helm_python.HelmError as exc:
            raise RenderError(str(exc)) from exc


def render(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """Render ``chart`` and parse every manifest (NOTES.txt and empty documents dropped)."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(
        render_files(chart, values, release=release, namespace=namespace).items()
    ):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                assert isinstance(doc, dict), f"{path}: a manifest is not a mapping"
                docs.append(doc)
    return docs


def crds() -> list[dict[str, Any]]:
    """The chart's CRDs (``crds/``: Helm installs them as they are, never templated)."""
    return [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """The documents of ``kind`` (and ``name``, when given)."""
    return [
        d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single document of ``kind`` (and ``name``); fails the test otherwise."""
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def containers(pod_spec: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container and init container of a Pod spec."""
    yield from pod_spec.get("initContainers") or []
    yield from pod_spec.get("containers") or []


#: REST collections of the kinds the charts render, for applying them to localkube.
KIND_REFS: dict[str, ResourceRef] = {
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
    "CustomResourceDefinition": ResourceRef(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
    ),
}
