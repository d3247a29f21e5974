"""Build the KRM function's input from the manifests and show its output (no kruntimes needed).

The KRM function interface (kpt/Porch, seed 004) passes a ``ResourceList``; tools like kpt
build it from a folder of YAML files, recording where each item came from in the
``config.kubernetes.io/path`` and ``config.kubernetes.io/index`` annotations. This does the
same for ``manifests.yaml`` plus ``fn-config.yaml``, and turns an output ResourceList back
into YAML documents and a results table::

    python examples/krm/resource_list.py build > /tmp/in.json     # the ResourceList
    krt invoke krm-set-metadata -d @/tmp/in.json > /tmp/out.json
    python examples/krm/resource_list.py show /tmp/out.json       # YAML + results

``resource-list.json`` next to this file is ``build``'s output, for ``krt invoke -d @...``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
MANIFESTS = HERE / "manifests.yaml"
FN_CONFIG = HERE / "fn-config.yaml"
PATH_ANNOTATION = "config.kubernetes.io/path"
INDEX_ANNOTATION = "config.kubernetes.io/index"


def build(manifests: Path = MANIFESTS, fn_config: Path = FN_CONFIG) -> dict[str, Any]:
    """The ResourceList of every document in ``manifests`` with ``fn_config``.

    Raises:
        ValueError: a document is not a mapping, or the functionConfig file is empty.
    """
    items = []
    for index, doc in enumerate(d for d in yaml.safe_load_all(manifests.read_text()) if d):
        if not isinstance(doc, dict):
            raise ValueError(f"{manifests}: document {index} is not a mapping")
        annotations = doc.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[PATH_ANNOTATION] = manifests.name
        annotations[INDEX_ANNOTATION] = str(index)
        items.append(doc)
    config = yaml.safe_load(fn_config.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{fn_config}: expected one functionConfig object")
    return {
        "apiVersion": "config.kubernetes.io/v1",
        "kind": "ResourceList",
        "functionConfig": config,
        "items": items,
    }


def to_yaml(resource_list: dict[str, Any]) -> str:
    """The items as multi-document YAML, without the bookkeeping annotations."""
    docs = []
    for item in resource_list.get("items") or []:
        meta = item.get("metadata") or {}
        annotations = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if k not in (PATH_ANNOTATION, INDEX_ANNOTATION)
        }
        shown = {**item, "metadata": {**meta, "annotations": annotations}}
        if not annotations:
            del shown["metadata"]["annotations"]
        docs.append(yaml.safe_dump(shown, sort_keys=False))
    return "---\n".join(docs)


def format_results(resource_list: dict[str, Any]) -> str:
    """The ``results`` as aligned lines: severity, resource, field, message."""
    rows = []
    for result in resource_list.get("results") or []:
        ref = result.get("resourceRef") or {}
        where = f"{ref.get('kind')}/{ref.get('name')}" if ref else "-"
        field = (result.get("field") or {}).get("path") or "-"
        rows.append((result.get("severity", "info"), where, field, result.get("message", "")))
    if not rows:
        return "(no results)"
    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    return "\n".join(
        f"{sev.upper():<{widths[0]}}  {where:<{widths[1]}}  {field:<{widths[2]}}  {msg}"
        for sev, where, field, msg in rows
    )


def main(argv: list[str]) -> int:
    """``build`` (print the input JSON) or ``show FILE|-`` (print an output as YAML + results)."""
    if argv[:1] == ["build"]:
        json.dump(build(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if argv[:1] == ["show"] and len(argv) == 2:
        text = sys.stdin.read() if argv[1] == "-" else Path(argv[1]).read_text()
        output = json.loads(text)
        print(to_yaml(output), end="")
        print("\nresults:")
        print(format_results(output))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
