"""A KRM function for the kruntimes Python Runtime: ``main.invoke``.

It follows the KRM function interface of kpt/Porch (seed 004; "KRM Functions Specification",
``config.kubernetes.io/v1``): the input is a ``ResourceList`` holding Kubernetes manifests in
``items`` and the function's configuration in ``functionConfig``; the output is the
transformed ``ResourceList`` with ``results`` (each with ``severity`` error, warning or info,
``message``, and the ``resourceRef`` / ``field`` it is about).

What it does, for a set of application manifests about to be deployed:

1. **labels**: sets ``spec.labels`` on every item's ``metadata.labels`` and on the Pod
   template of workloads (Deployment, StatefulSet, DaemonSet, Job, CronJob), so the Pods
   carry them too. Selectors are left alone: they are immutable on a live Deployment.
2. **namespace**: sets ``spec.namespace`` on every namespaced item (cluster-scoped kinds such
   as Namespace or ClusterRole keep none) and on ServiceAccount subjects of RoleBindings
   that pointed at the old namespace.
3. **validation**: reports fields a cluster would reject or that break the workload
   (error: missing container image or name, missing selector, a Service without ports, an
   Ingress without rules or backend) and risky choices (warning: an image without a tag or
   with ``:latest``, a container without resource requests).

functionConfig is either this function's own kind::

    apiVersion: fn.kruntimes.io/v1alpha1
    kind: SetMetadata
    metadata: {name: shop-prod}
    spec:
      namespace: shop-prod
      labels: {app.kubernetes.io/part-of: shop, environment: prod}

or a ConfigMap whose ``data.namespace`` is the namespace and every other key a label.

The module is imported once, when the function Run registers; each invocation calls
:func:`invoke` with the decoded JSON input. It never raises for bad manifests (they become
error results, as kpt functions report them); it raises ``ValueError`` only when the input
is not a ResourceList or the functionConfig is unusable, which fails that invocation.
"""

from __future__ import annotations

import copy
import re

API_VERSION = "config.kubernetes.io/v1"
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "StorageClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PriorityClass",
        "IngressClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    }
)
#: kind -> path of the Pod template (for labels and container checks)
POD_TEMPLATES = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def read_config(function_config):
    """``(namespace or None, labels)`` from the functionConfig.

    Raises:
        ValueError: an unknown kind, a namespace that is not a DNS label, or a label key or
            value Kubernetes would reject (names which one).
    """
    if not function_config:
        return None, {}
    if not isinstance(function_config, dict):
        raise ValueError("functionConfig must be an object")
    kind = function_config.get("kind")
    if kind == "ConfigMap":
        data = dict(function_config.get("data") or {})
        namespace = data.pop("namespace", None)
        labels = data
    elif kind == "SetMetadata":
        spec = function_config.get("spec") or {}
        namespace = spec.get("namespace")
        labels = spec.get("labels") or {}
    else:
        raise ValueError(
            f"functionConfig kind {kind!r} is not supported: use SetMetadata or ConfigMap"
        )
    if namespace is not None and (
        not isinstance(namespace, str) or not _DNS_LABEL.match(namespace)
    ):
        raise ValueError(f"functionConfig namespace {namespace!r} is not a valid namespace name")
    if not isinstance(labels, dict):
        raise ValueError("functionConfig labels must be a map of strings")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ValueError(f"functionConfig label key {key!r} is not a valid label key")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise ValueError(f"functionConfig label {key}={value!r}: not a valid label value")
    return namespace, labels


def _dig(obj, path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _ref(item):
    meta = item.get("metadata") or {}
    ref = {"apiVersion": item.get("apiVersion"), "kind": item.get("kind"), "name": meta.get("name")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


def _result(severity, message, item=None, path=None):
    result = {"severity": severity, "message": message}
    if item is not None:
        result["resourceRef"] = _ref(item)
    if path is not None:
        result["field"] = {"path": path}
    return result


def _set_labels(item, labels):
    changed = False
    targets = [item.setdefault("metadata", {})]
    template_path = POD_TEMPLATES.get(item.get("kind"))
    if template_path is not None:
        template = _dig(item, template_path)
        if isinstance(template, dict):
            targets.append(template.setdefault("metadata", {}))
    for meta in targets:
        current = meta.get("labels") or {}
        merged = {**current, **labels}
        if merged != current:
            meta["labels"] = merged
            changed = True
    return changed


def _set_namespace(item, namespace):
    if item.get("kind") in CLUSTER_SCOPED:
        return False
    meta = item.setdefault("metadata", {})
    old = meta.get("namespace")
    changed = old != namespace
    meta["namespace"] = namespace
    if item.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
        for subject in item.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace") in (None, old):
                changed = changed or subject.get("namespace") != namespace
                subject["namespace"] = namespace
    return changed


def _validate(item, index):
    """Results for one manifest: required fields (error) and risky choices (warning)."""
    found = []
    kind = item.get("kind")
    name = (item.get("metadata") or {}).get("name")
    for field in ("apiVersion", "kind"):
        if not item.get(field):
            found.append(_result("error", f"items[{index}] has no {field}", item, field))
    if not name:
        found.append(
            _result("error", f"items[{index}] ({kind}) has no metadata.name", item, "metadata.name")
        )
    template_path = POD_TEMPLATES.get(kind)
    if template_path is not None:
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet") and not _dig(
            item, ("spec", "selector")
        ):
            found.append(_result("error", "no spec.selector", item, "spec.selector"))
        base = ".".join(template_path) + ".spec"
        containers = _dig(item, (*template_path, "spec", "containers"))
        if not containers:
            found.append(
                _result("error", "no containers in the Pod template", item, f"{base}.containers")
            )
        for i, container in enumerate(containers or []):
            where = f"{base}.containers[{i}]"
            cname = container.get("name")
            if not cname:
                found.append(_result("error", f"container {i} has no name", item, f"{where}.name"))
            image = container.get("image")
            if not image:
                found.append(
                    _result("error", f"container {cname or i} has no image", item, f"{where}.image")
                )
            else:
                last = image.rsplit("/", 1)[-1]
                if "@" not in last and (":" not in last or last.endswith(":latest")):
                    found.append(
                        _result(
                            "warning",
                            f"image {image} is not pinned to a version",
                            item,
                            f"{where}.image",
                        )
                    )
            if not _dig(container, ("resources", "requests")):
                found.append(
                    _result(
                        "warning",
                        f"container {cname or i} sets no resource requests",
                        item,
                        f"{where}.resources.requests",
                    )
                )
    elif kind == "Service":
        spec = item.get("spec") or {}
        if spec.get("type") != "ExternalName" and not spec.get("ports"):
            found.append(_result("error", "a Service needs spec.ports", item, "spec.ports"))
        for i, port in enumerate(spec.get("ports") or []):
            if "port" not in port:
                found.append(
                    _result(
                        "error", f"ports[{i}] has no port number", item, f"spec.ports[{i}].port"
                    )
                )
    elif kind == "Ingress":
        spec = item.get("spec") or {}
        if not spec.get("rules") and not spec.get("defaultBackend"):
            found.append(
                _result("error", "an Ingress needs rules or a defaultBackend", item, "spec.rules")
            )
    return found


def invoke(resource_list):
    """Transform and validate a ResourceList (see the module docstring).

    Args:
        resource_list: ``{"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
            "items": [...], "functionConfig": {...}}``.

    Returns:
        The ResourceList with transformed ``items`` and ``results``.

    Raises:
        ValueError: the input is not a ResourceList, or the functionConfig is unusable.
    """
    if not isinstance(resource_list, dict) or resource_list.get("kind") != "ResourceList":
        raise ValueError("input must be a ResourceList (kind: ResourceList)")
    items = resource_list.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError("ResourceList.items must be a list of objects")
    namespace, labels = read_config(resource_list.get("functionConfig"))
    out = copy.deepcopy(resource_list)
    out["apiVersion"] = API_VERSION
    results = []
    labelled = moved = 0
    for index, item in enumerate(out["items"]):
        if labels and _set_labels(item, labels):
            labelled += 1
        if namespace and _set_namespace(item, namespace):
            moved += 1
        results.extend(_validate(item, index))
    errors = sum(1 for r in results if r["severity"] == "error")
    warnings = sum(1 for r in results if r["severity"] == "warning")
    summary = (
        f"{len(items)} item(s): labels set on {labelled}, namespace {namespace or '-'} set on "
        f"{moved}; {errors} error(s), {warnings} warning(s)"
    )
    print(summary)  # to the Runtime Server's log, keyed by the invocation ID
    out["results"] = [_result("info", summary), *results]
    return out
