"""A KRM-style function for the kruntimes Python Runtime Server: ``krm_labels.set_labels``.

Input is a ``config.kubernetes.io/v1`` ResourceList (the kpt/KRM function format); the
labels to set come from ``functionConfig.data`` (a ConfigMap) or ``functionConfig.labels``.
Every item gets them in ``metadata.labels``; the ResourceList is returned with a
``results`` entry and an ``outputs`` map (which the Runtime Server copies into the
InvokeFunctionResponse ``outputs`` field).

The module is imported once per registration; ``print`` output goes to the Runtime Server's
structured log (keyed by Run UID and invocation ID), never into the response.
"""

import copy

API_VERSION = "config.kubernetes.io/v1"


def _labels_from(function_config):
    if not isinstance(function_config, dict):
        return {}
    labels = function_config.get("data") or function_config.get("labels") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError("functionConfig labels must map strings to strings")
    return labels


def set_labels(resource_list):
    """Set the configured labels on every item of a ResourceList.

    Raises:
        ValueError: the input is not a ResourceList, or the labels are not strings.
    """
    if not isinstance(resource_list, dict) or resource_list.get("kind") != "ResourceList":
        raise ValueError("input must be a ResourceList (kind: ResourceList)")
    labels = _labels_from(resource_list.get("functionConfig"))
    result = copy.deepcopy(resource_list)
    result["apiVersion"] = API_VERSION
    changed = 0
    for item in result.get("items", []):
        metadata = item.setdefault("metadata", {})
        current = metadata.setdefault("labels", {})
        before = dict(current)
        current.update(labels)
        if current != before:
            changed += 1
        print(f"labelled {item.get('kind')}/{metadata.get('name')}")
    result["results"] = [
        {
            "message": f"set {len(labels)} label(s) on {changed} of {len(result.get('items', []))} item(s)",
            "severity": "info",
        }
    ]
    result["outputs"] = {"itemsChanged": str(changed), "labels": ",".join(sorted(labels))}
    return result
