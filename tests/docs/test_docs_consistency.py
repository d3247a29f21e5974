"""The hand-written docs of issue 9 stay true to the code and to each other.

* every relative link between docs (and to repository files) resolves, anchors included;
* the lifecycle diagrams in docs/architecture.md draw only transitions the state machine
  (``krt.api.phases.TRANSITIONS``) allows, and every phase;
* every reason the API defines is explained in docs/architecture.md, and every Scheduled
  reason in docs/troubleshooting.md;
* every gateway status code the e2e tests and the CLI exit codes rely on is in the
  troubleshooting table, with the exit code the CLI really uses.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from krt.api.constants import Reason
from krt.api.phases import Phase, can_transition
from krt.api.retry import FailureReason
from krt.cli.exitcodes import for_http_status

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
OWN_DOCS = (
    "architecture.md",
    "api-reference.md",
    "quickstart.md",
    "usage.md",
    "troubleshooting.md",
    "security.md",
    "e2e.md",
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def _links(name: str) -> list[str]:
    text = (DOCS / name).read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans (CEL patterns look like links)
    return [m.group(1) for m in LINK.finditer(text)]


@pytest.mark.parametrize("name", OWN_DOCS)
def test_relative_links_resolve(name: str) -> None:
    for target in _links(name):
        if re.match(r"^[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (DOCS / name).parent / path if path else DOCS / name
        assert resolved.exists(), f"{name}: link to missing {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{name}: no heading for #{anchor} in {path}"


def _state_edges() -> list[tuple[str, str]]:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```mermaid\n(stateDiagram-v2\n.*?)```", text, flags=re.S)
    assert len(blocks) == 2, "architecture.md: expected a task and a function stateDiagram"
    edges = []
    for block in blocks:
        for line in block.splitlines():
            m = re.match(r"\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)", line)
            if m:
                edges.append((m.group(1), m.group(2)))
    return edges


def test_lifecycle_diagrams_draw_only_allowed_transitions() -> None:
    for old, new in _state_edges():
        if "[*]" in (old, new):
            continue
        assert can_transition(Phase(old), Phase(new)), f"diagram draws forbidden {old} -> {new}"


def test_lifecycle_diagrams_show_every_phase() -> None:
    drawn = {p for edge in _state_edges() for p in edge} - {"[*]"}
    assert drawn == {p.value for p in Phase}


def test_lifecycle_diagrams_start_pending_and_end_only_in_terminal_phases() -> None:
    edges = _state_edges()
    assert {new for old, new in edges if old == "[*]"} == {"Pending"}
    assert {old for old, new in edges if new == "[*]"} == {
        "Succeeded",
        "Failed",
        "Timeout",
        "Cancelled",
    }


@pytest.mark.parametrize("reason", [*Reason, *FailureReason], ids=str)
def test_every_reason_is_explained_in_architecture(reason: str) -> None:
    assert f"`{reason}`" in (DOCS / "architecture.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "reason",
    [Reason.RUNTIME_NOT_FOUND, Reason.NO_READY_POD, Reason.INSUFFICIENT_CAPACITY, Reason.REQUEUED],
)
def test_every_pending_reason_has_a_troubleshooting_row(reason: str) -> None:
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    assert f"| `{reason}` |" in text


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 415, 429, 502, 503, 504, 500])
def test_troubleshooting_rows_use_the_cli_exit_codes(status: int) -> None:
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith(f"| {status} (")]
    assert rows, f"no troubleshooting row for HTTP {status}"
    for row in rows:
        exit_code = int(row.split("|")[2])
        reason = "HandlerError" if "(`HandlerError`)" in row else ""
        assert exit_code == int(for_http_status(status, reason)), row
