"""Generate docs/api-reference.md from the CRD manifests in charts/kruntimes/crds/.

Usage: ``python scripts/gen_api_docs.py`` writes the file; ``--check`` writes nothing and exits 1
(printing a unified diff) when the committed file differs from a fresh rendering. The test
tests/docs/test_api_reference.py runs the same comparison, so a CRD change without a
regenerated reference fails the suite.

The reference is built from the CRD files (what the API server enforces), not from the
Python schema they are generated from: every field with its type, default, constraints
(length, range, pattern, enum, list and map bounds), and every ``x-kubernetes-validations``
CEL rule with the exact message the API server returns. Rules that read ``oldSelf`` are
transition rules, checked on update only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = ROOT / "charts" / "kruntimes" / "crds"
OUTPUT = ROOT / "docs" / "api-reference.md"

# Constraint keywords rendered in the "constraints" column, in this order.
_CONSTRAINTS: tuple[tuple[str, str], ...] = (
    ("minLength", "min length {}"),
    ("maxLength", "max length {}"),
    ("minimum", "min {}"),
    ("maximum", "max {}"),
    ("minItems", "min items {}"),
    ("maxItems", "max items {}"),
    ("maxProperties", "max keys {}"),
    ("pattern", "pattern `{}`"),
)


@dataclass
class Rule:
    """One ``x-kubernetes-validations`` entry attached to a field path."""

    path: str
    rule: str
    message: str

    @property
    def on_update(self) -> bool:
        """True for transition rules (they compare with ``oldSelf``)."""
        return "oldSelf" in self.rule


@dataclass
class Field:
    """One row of a field table."""

    path: str
    type: str
    required: bool
    default: str
    constraints: list[str]
    description: str


@dataclass
class Walk:
    """Fields and rules collected from one schema tree."""

    fields: list[Field] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)


def _type_of(schema: dict[str, Any]) -> str:
    """A short type name: ``string``, ``integer (int32)``, ``[]object``, ``map[string]integer``."""
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return "[]" + _type_of(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "map[string]" + _type_of(schema["additionalProperties"])
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else kind


def _constraints(schema: dict[str, Any]) -> list[str]:
    out = [template.format(schema[key]) for key, template in _CONSTRAINTS if key in schema]
    if "enum" in schema:
        out.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type:
        keys = schema.get("x-kubernetes-list-map-keys")
        out.append(f"list type `{list_type}`" + (f" (keys: {', '.join(keys)})" if keys else ""))
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.append("unknown fields kept")
    items = schema.get("items")
    if isinstance(items, dict):
        out.extend(f"items: {c}" for c in _constraints(items))
    values = schema.get("additionalProperties")
    if isinstance(values, dict):
        out.extend(f"values: {c}" for c in _constraints(values))
    return out


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    return "`" + json.dumps(schema["default"], sort_keys=True, separators=(", ", ": ")) + "`"


def _walk(schema: dict[str, Any], path: str, required: bool, out: Walk) -> None:
    """Append ``schema`` (at ``path``) and everything below it to ``out``, depth first."""
    out.fields.append(
        Field(
            path=path,
            type=_type_of(schema),
            required=required,
            default=_default(schema),
            constraints=_constraints(schema),
            description=" ".join(str(schema.get("description", "")).split()),
        )
    )
    for entry in schema.get("x-kubernetes-validations", []):
        out.rules.append(Rule(path=path, rule=entry["rule"], message=entry.get("message", "")))
    for nested_path, nested in _children(schema, path):
        _walk(nested, nested_path, nested_path in _required_paths(schema, path), out)


def _required_paths(schema: dict[str, Any], path: str) -> set[str]:
    return {f"{path}.{name}" for name in schema.get("required", [])}


def _children(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, sub in schema.get("properties", {}).items():
        yield f"{path}.{name}", sub
    items = schema.get("items")
    if isinstance(items, dict) and (
        items.get("properties") or items.get("x-kubernetes-validations")
    ):
        yield f"{path}[]", items
    values = schema.get("additionalProperties")
    if isinstance(values, dict) and values.get("properties"):
        yield f"{path}.<key>", values


def _yes(value: object) -> str:
    return "yes" if value else "no"


def _cell(text: str) -> str:
    """Escape a table cell (pipes and newlines)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """A Markdown code span that survives backticks inside ``text``."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _render_crd(crd: dict[str, Any]) -> list[str]:
    spec = crd["spec"]
    names = spec["names"]
    lines: list[str] = []
    for version in spec["versions"]:
        group_version = f"{spec['group']}/{version['name']}"
        schema = version["schema"]["openAPIV3Schema"]
        lines += [f"## {names['kind']} (`{group_version}`)", ""]
        if schema.get("description"):
            lines += [" ".join(schema["description"].split()), ""]
        lines += [
            "| | |",
            "| --- | --- |",
            f"| resource | `{names['plural']}.{spec['group']}` ({spec['scope']}) |",
            f"| apiVersion / kind | `{group_version}` / `{names['kind']}` |",
            f"| short names | {', '.join(f'`{n}`' for n in names.get('shortNames', [])) or '-'} |",
            f"| categories | {', '.join(f'`{c}`' for c in names.get('categories', [])) or '-'} |",
            f"| served / storage | {_yes(version.get('served'))} / {_yes(version.get('storage'))} |",
            "| subresources | "
            + (", ".join(f"`{s}`" for s in version.get("subresources", {})) or "-")
            + " |",
            "",
        ]
        columns = version.get("additionalPrinterColumns", [])
        if columns:
            lines += [
                "`kubectl get` columns (priority 1 only with `-o wide`):",
                "",
                "| column | type | JSONPath | priority |",
                "| --- | --- | --- | --- |",
            ]
            lines += [
                f"| {c['name']} | {c['type']} | `{c['jsonPath']}` | {c.get('priority', 0)} |"
                for c in columns
            ]
            lines.append("")
        top_required = set(schema.get("required", []))
        root_rules = schema.get("x-kubernetes-validations", [])
        if root_rules:
            lines += [f"### {names['kind']} object rules", ""]
            lines += [f"- {_code(r['rule'])}: {r.get('message', '')}" for r in root_rules]
            lines.append("")
        for section in ("spec", "status"):
            sub = schema.get("properties", {}).get(section)
            if sub is None:
                continue
            walk = Walk()
            _walk(sub, section, section in top_required, walk)
            lines += _render_section(names["kind"], section, walk)
    return lines


def _render_section(kind: str, section: str, walk: Walk) -> list[str]:
    lines = [f"### {kind} `{section}`", ""]
    lines += [
        "| field | type | required | default | constraints | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for f in walk.fields:
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{f.path}`",
                    _cell(f.type),
                    "yes" if f.required else "",
                    _cell(f.default),
                    _cell("; ".join(f.constraints)),
                    _cell(f.description),
                ]
            )
            + " |"
        )
    lines.append("")
    if walk.rules:
        lines += [
            f"#### {kind} `{section}` validation rules",
            "",
            "CEL rules (`x-kubernetes-validations`) and the message the API server returns when",
            "one fails. *On update* rules compare with the stored object (`oldSelf`) and are",
            "checked only when an object is changed.",
            "",
        ]
        for path in dict.fromkeys(r.path for r in walk.rules):
            lines.append(f"- `{path}`")
            for r in (r for r in walk.rules if r.path == path):
                when = " (on update)" if r.on_update else ""
                lines.append(f"  - {_code(r.rule)}{when}: {_code(r.message)}")
        lines.append("")
    return lines


def render(crd_dir: Path = CRD_DIR) -> str:
    """Return the Markdown API reference for every CRD file in ``crd_dir``.

    Args:
        crd_dir: directory of CRD YAML files (one CustomResourceDefinition each).

    Returns:
        The complete Markdown text, ending in a newline.

    Raises:
        FileNotFoundError: ``crd_dir`` has no ``*.yaml`` file.
        ValueError: a file is not a CustomResourceDefinition.
    """
    paths = sorted(crd_dir.glob("*.yaml"))
    if not paths:
        raise FileNotFoundError(f"no CRD files (*.yaml) in {crd_dir}")
    crds = []
    for path in paths:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            raise ValueError(f"{path}: not a CustomResourceDefinition")
        crds.append((path, doc))
    lines = [
        "# API reference",
        "",
        "<!-- Generated by scripts/gen_api_docs.py from charts/kruntimes/crds/. Do not edit:",
        "     run `make docs` (tests/docs checks that this file is up to date). -->",
        "",
        "The kruntimes API as the API server enforces it: every field of the CustomResource",
        "Definitions in `charts/kruntimes/crds/`, with its type, default, constraints and the",
        "CEL validation rules with the exact error messages. Paths use `[]` for list items and",
        "`<key>` for map values. For what the fields mean in practice see",
        "[usage.md](usage.md); for the lifecycle see [architecture.md](architecture.md).",
        "",
        "Resources:",
        "",
    ]
    for path, crd in crds:
        kind = crd["spec"]["names"]["kind"]
        lines.append(
            f"- [{kind}](#{kind.lower()}-{crd['spec']['group'].replace('.', '')}"
            f"{crd['spec']['versions'][0]['name']}) (`{path.name}`)"
        )
    lines.append("")
    for _, crd in crds:
        lines += _render_crd(crd)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def check(output: Path = OUTPUT, crd_dir: Path = CRD_DIR) -> str:
    """Return a unified diff between ``output`` and a fresh rendering (empty when up to date)."""
    expected = render(crd_dir)
    actual = output.read_text(encoding="utf-8") if output.exists() else ""
    if actual == expected:
        return ""
    diff = "".join(
        difflib.unified_diff(
            actual.splitlines(keepends=True),
            expected.splitlines(keepends=True),
            fromfile=f"{output.name} (committed)",
            tofile=f"{output.name} (from the CRDs)",
        )
    )
    return diff or f"{output.name}: missing\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/api-reference.md is out of date"
    )
    args = parser.parse_args(argv)
    if args.check:
        diff = check()
        if diff:
            sys.stdout.write(diff)
            print(
                "docs/api-reference.md is out of date: run make docs "
                "(python scripts/gen_api_docs.py)",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
