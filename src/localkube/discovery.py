"""Discovery documents: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}[/{v}]``.

Both formats are served: the legacy documents (what kr8s reads, and what a plain
``Accept: application/json`` gets), and the aggregated ``apidiscovery.k8s.io/v2``
``APIGroupDiscoveryList`` of ``/api`` and ``/apis`` that kubectl 1.32 asks for first, which
saves it one request per group/version.
"""

from __future__ import annotations

import hashlib
from typing import Any

from localkube.resources import ResourceRegistry, ResourceType

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-localkube",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
"""What ``/version`` answers: a Kubernetes 1.32 server (kr8s checks the minor version)."""


def version() -> dict[str, Any]:
    """Return the ``/version`` body."""
    return dict(KUBERNETES_VERSION)


def core_versions(server_address: str) -> dict[str, Any]:
    """Return the ``/api`` body (``APIVersions``)."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def group_list(registry: ResourceRegistry) -> dict[str, Any]:
    """Return the ``/apis`` body (``APIGroupList``) without the core group."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_entry(g, vs) for g, vs in registry.groups() if g],
    }


def group(registry: ResourceRegistry, name: str) -> dict[str, Any] | None:
    """Return the ``/apis/{name}`` body (``APIGroup``), or None if the group is unknown."""
    for g, versions in registry.groups():
        if g == name and g:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(g, versions)}
    return None


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    if rt.stored:
        main["storageVersionHash"] = hashlib.sha256(rt.storage_key.encode()).hexdigest()[:11]
    entries = [main]
    for sub in sorted(rt.subresources):
        if sub == "status":
            entries.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        elif sub == "scale":
            entries.append(
                {
                    "name": f"{rt.plural}/scale",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        elif sub == "log":
            entries.append(
                {
                    "name": f"{rt.plural}/log",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": "Pod",
                    "verbs": ["get"],
                }
            )
        elif sub == "binding":
            entries.append(
                {
                    "name": f"{rt.plural}/binding",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
        elif sub == "token":
            entries.append(
                {
                    "name": f"{rt.plural}/token",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "group": "authentication.k8s.io",
                    "version": "v1",
                    "kind": "TokenRequest",
                    "verbs": ["create"],
                }
            )
    return entries


def resource_list(registry: ResourceRegistry, group: str, version: str) -> dict[str, Any] | None:
    """Return the ``APIResourceList`` of one group/version, or None if not served."""
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in sorted(types, key=lambda t: t.plural):
        resources.extend(_resource_entries(rt))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


AGGREGATED_MEDIA_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
"""Content type of an aggregated discovery answer (``apidiscovery.k8s.io/v2``)."""


def wants_aggregated(accept: str) -> bool:
    """Return whether an ``Accept`` header asks for aggregated discovery v2."""
    compact = accept.replace(" ", "")
    return any(
        "as=APIGroupDiscoveryList" in part
        and "v=v2;" in part + ";"
        and "g=apidiscovery.k8s.io" in part
        for part in compact.split(",")
    )


def _subresource_discovery(rt: ResourceType) -> list[dict[str, Any]]:
    result = []
    for entry in _resource_entries(rt)[1:]:
        sub = entry["name"].split("/", 1)[1]
        kind = {
            "group": entry.get("group", rt.group),
            "version": entry.get("version", rt.version),
            "kind": entry["kind"],
        }
        result.append({"subresource": sub, "responseKind": kind, "verbs": entry["verbs"]})
    return result


def _resource_discovery(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subresources = _subresource_discovery(rt)
    if subresources:
        entry["subresources"] = subresources
    return entry


def aggregated(registry: ResourceRegistry, *, core: bool) -> dict[str, Any]:
    """Return the aggregated discovery document of ``/api`` (``core``) or ``/apis``.

    One ``APIGroupDiscovery`` per group, versions in preference order, every resource with
    its scope, verbs, short names, categories and subresources: kubectl 1.32 reads all of
    discovery from these two documents instead of one request per group/version.
    """
    items = []
    for group, versions in registry.groups():
        if (group == "") != core:
            continue
        items.append(
            {
                "metadata": {"name": group, "creationTimestamp": None},
                "versions": [
                    {
                        "version": version,
                        "resources": [
                            _resource_discovery(rt)
                            for rt in sorted(
                                registry.in_group_version(group, version), key=lambda t: t.plural
                            )
                        ],
                        "freshness": "Current",
                    }
                    for version in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
