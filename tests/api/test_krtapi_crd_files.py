"""The committed CRD files are exactly what schema.py renders, and have the required shape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from krtapi_crd_harness import CRD_DIR, ROOT

from krt.api import constants
from krt.api.crds import CRD_FILES, render_crd, run_crd, runtime_crd

SCRIPT = ROOT / "scripts" / "gen_crds.py"


@pytest.mark.parametrize(("filename", "which"), sorted(CRD_FILES.items()))
def test_committed_crd_matches_the_schema_source(filename: str, which: str) -> None:
    committed = (CRD_DIR / filename).read_text(encoding="utf-8")
    assert committed == render_crd(which), "run: python scripts/gen_crds.py"


def test_gen_crds_check_passes_on_the_committed_tree() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_gen_crds_check_reports_drift(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gen_crds
    finally:
        sys.path.remove(str(SCRIPT.parent))
    gen_crds.write(tmp_path)
    assert gen_crds.check(tmp_path) == []
    drifted = tmp_path / "runs.kruntimes.io.yaml"
    drifted.write_text(drifted.read_text().replace("maxLength: 2048", "maxLength: 4096", 1))
    diffs = gen_crds.check(tmp_path)
    assert len(diffs) == 1
    assert "runs.kruntimes.io.yaml" in diffs[0]
    assert "+" in diffs[0]
    (tmp_path / "runtimes.kruntimes.io.yaml").unlink()
    assert len(gen_crds.check(tmp_path)) == 2


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version  # type: ignore[no-any-return]


@pytest.mark.parametrize("crd", [run_crd(), runtime_crd()], ids=["run", "runtime"])
def test_crd_shape(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["spec"]["group"] == constants.GROUP == "kruntimes.io"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["categories"] == ["kruntimes"]
    version = _version(crd)
    assert version["name"] == constants.VERSION == "v1alpha1"
    assert version["served"]
    assert version["storage"]
    assert version["subresources"]["status"] == {}
    if crd["spec"]["names"]["kind"] == "Runtime":  # kubectl scale runtime
        assert version["subresources"]["scale"] == {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        }
    else:
        assert set(version["subresources"]) == {"status"}
    plural = crd["spec"]["names"]["plural"]
    assert crd["metadata"]["name"] == f"{plural}.kruntimes.io"


# Short names of built-in kubectl resources a CRD must not shadow.
BUILTIN_SHORT_NAMES = {
    "cm", "cs", "csr", "crd", "crds", "deploy", "ds", "ep", "ev", "hpa", "ing", "limits",
    "netpol", "no", "ns", "pc", "pdb", "po", "psp", "pv", "pvc", "quota", "rc", "rs", "sa",
    "sc", "sts", "svc", "run", "rt", "rn",
}  # fmt: skip


def test_short_names_do_not_clash() -> None:
    names = run_crd()["spec"]["names"]["shortNames"] + runtime_crd()["spec"]["names"]["shortNames"]
    assert names == ["krun", "krt"]
    assert not set(names) & BUILTIN_SHORT_NAMES


def test_run_printer_columns() -> None:
    columns = {c["name"]: c for c in _version(run_crd())["additionalPrinterColumns"]}
    assert [n for n, c in columns.items() if not c.get("priority")] == [
        "Phase",
        "Runtime",
        "Pod",
        "Attempt",
        "Age",
    ]
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Runtime"]["jsonPath"] == ".spec.runtime"
    assert columns["Pod"]["jsonPath"] == ".status.assignedPod"
    assert columns["Attempt"] == {
        "name": "Attempt",
        "type": "integer",
        "jsonPath": ".status.attempt",
    }
    assert columns["Age"]["type"] == "date"


def test_runtime_printer_columns() -> None:
    columns = {c["name"]: c for c in _version(runtime_crd())["additionalPrinterColumns"]}
    assert columns["Ready"]["jsonPath"] == ".status.readyReplicas"
    assert columns["Desired"]["jsonPath"] == ".spec.replicas"
    assert columns["Runs/Pod"]["jsonPath"] == ".spec.capacity.resources.runs"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        nodes += _walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            nodes += _walk(schema[key], f"{path}[]")
    return nodes


@pytest.mark.parametrize("crd", [run_crd(), runtime_crd()], ids=["run", "runtime"])
def test_every_cel_rule_sits_under_bounded_values(crd: dict[str, Any]) -> None:
    """A real API server rejects CEL rules whose cost it cannot bound: strings matched by a
    regex need maxLength, and lists/maps iterated need maxItems/maxProperties."""
    for path, node in _walk(_version(crd)["schema"]["openAPIV3Schema"]):
        for entry in node.get("x-kubernetes-validations", []):
            expression = entry["rule"]
            assert entry["message"], path
            if node.get("type") == "string" and "matches" in expression:
                assert "maxLength" in node, path
            if ".all(" in expression or ".filter(" in expression:
                assert "maxItems" in node or "maxProperties" in node, path


def test_status_lists_are_list_maps() -> None:
    nodes = dict(_walk(_version(run_crd())["schema"]["openAPIV3Schema"]))
    conditions = nodes[".status.conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    env = nodes[".spec.env"]
    assert env["x-kubernetes-list-map-keys"] == ["name"]


def test_rendered_yaml_is_one_document_with_a_header() -> None:
    text = render_crd("run")
    assert text.startswith("# Generated by scripts/gen_crds.py")
    assert len(list(yaml.safe_load_all(text))) == 1
