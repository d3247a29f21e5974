"""docs/api-reference.md is generated from the CRDs and must never go stale (issue 9).

These tests fail when a CRD changes without `make docs`, and when the generator stops
documenting something the API server enforces (a field, a default, a rule message).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_api_docs.py"
CRD_DIR = ROOT / "charts" / "kruntimes" / "crds"
REFERENCE = ROOT / "docs" / "api-reference.md"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(CRD_DIR.glob("*.yaml"))]


def _walk(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        out += _walk(sub, f"{path}.{name}")
    items = schema.get("items")
    if isinstance(items, dict) and items.get("properties"):
        out += _walk(items, f"{path}[]")
    return out


def _all_fields() -> list[tuple[str, str, dict[str, Any]]]:
    fields = []
    for crd in _crds():
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            root = version["schema"]["openAPIV3Schema"]["properties"]
            for section in ("spec", "status"):
                fields += [(kind, p, s) for p, s in _walk(root[section], section)]
    return fields


def _kind_section(text: str, kind: str) -> str:
    """The part of the reference under ``## <kind> (...)`` up to the next kind."""
    start = text.index(f"\n## {kind} (")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_committed_reference_is_up_to_date() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == gen.render(CRD_DIR), (
        "docs/api-reference.md is stale: run `make docs`"
    )


def test_check_mode_passes_on_the_committed_tree() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_reports_a_changed_crd(tmp_path: Path) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(CRD_DIR, crds)
    output = tmp_path / "api-reference.md"
    output.write_text(gen.render(crds), encoding="utf-8")
    assert gen.check(output, crds) == ""

    run_crd = crds / "runs.kruntimes.io.yaml"
    text = run_crd.read_text(encoding="utf-8")
    assert "spec.runtime is immutable" in text
    run_crd.write_text(text.replace("spec.runtime is immutable", "runtime is frozen"), "utf-8")
    diff = gen.check(output, crds)
    assert "-  - `self.runtime == oldSelf.runtime` (on update): `spec.runtime is immutable`" in diff
    assert "+  - `self.runtime == oldSelf.runtime` (on update): `runtime is frozen`" in diff


def test_check_reports_a_missing_reference(tmp_path: Path) -> None:
    assert gen.check(tmp_path / "absent.md", CRD_DIR) != ""


@pytest.mark.parametrize(
    ("kind", "path", "schema"), _all_fields(), ids=[f"{k}:{p}" for k, p, _ in _all_fields()]
)
def test_every_field_is_documented_with_type_default_and_rules(
    kind: str, path: str, schema: dict[str, Any]
) -> None:
    text = _kind_section(REFERENCE.read_text(encoding="utf-8"), kind)
    rows = [line for line in text.splitlines() if line.startswith(f"| `{path}` |")]
    assert len(rows) == 1, f"{path}: expected one table row, found {len(rows)}"
    row = rows[0]
    shown_type = row.split("|")[2].strip()
    if "additionalProperties" in schema:
        assert shown_type.startswith("map[string]"), row
    elif schema.get("type") == "array":
        assert shown_type.startswith("[]"), row
    elif "type" in schema:
        assert shown_type.split()[0] == schema["type"], row
    if "format" in schema and schema.get("type") != "array":
        assert f"({schema['format']})" in shown_type, row
    if "default" in schema:
        assert "`" in row.split("|")[4], f"{path}: default {schema['default']!r} not shown"
    for key in ("maxLength", "minLength", "maximum", "minimum", "maxItems"):
        if key in schema:
            assert str(schema[key]) in row, f"{path}: {key} {schema[key]} not shown"
    for value in schema.get("enum", []):
        assert f"`{value}`" in row
    for rule in schema.get("x-kubernetes-validations", []):
        assert rule["message"] in text, f"{path}: message {rule['message']!r} missing"
        assert rule["rule"] in text, f"{path}: rule {rule['rule']!r} missing"


def test_defaults_are_rendered_as_json() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    assert "| `spec.replicas` | integer (int32) |  | `1` |" in text
    assert '`{"runs": 2}`' in text


def test_transition_rules_are_marked_on_update() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.lstrip().startswith("- `") and "oldSelf" in line.split("`:")[0]:
            assert "(on update)" in line, line


def test_render_rejects_a_directory_without_crds(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no CRD files"):
        gen.render(tmp_path)


def test_render_rejects_a_non_crd_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("kind: ConfigMap\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a CustomResourceDefinition"):
        gen.render(tmp_path)
