"""Layering rules: production packages never import localkube, test helpers or each other.

DESIGN.md: localkube is "never imported by production code"; only the ``krt dev`` commands
(which start a local cluster) may import it, and only lazily inside the command.

DESIGN.md, "one room per component": the components (gateway, runtimed, servers) import only
the shared core ``krt`` (and their own package), never one another, and ``krt`` imports none
of them. Shared machinery (gRPC plumbing, Events, logging) lives in ``krt``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PRODUCTION = ["krt", "runtimed", "gateway", "servers"]
# krt dev up starts localkube: the CLI module for it may import it inside its functions.
ALLOWED_LAZY = {"krt/cli/dev.py"}


def _imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """Return (module, line, at_module_level) for every import in ``tree``."""
    found: list[tuple[str, int, bool]] = []
    top_level = {id(n) for n in getattr(tree, "body", [])}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno, id(node) in top_level))
    return found


def _production_files() -> list[Path]:
    return sorted(p for pkg in PRODUCTION for p in (SRC / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", _production_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_production_code_never_imports_localkube_or_tests(path: Path) -> None:
    rel = str(path.relative_to(SRC))
    for module, line, top in _imports(ast.parse(path.read_text(), str(path))):
        root = module.split(".")[0]
        if root in {"tests", "conftest", "pytest"}:
            pytest.fail(f"{rel}:{line} imports test code ({module})")
        if root == "localkube" and not (rel in ALLOWED_LAZY and not top):
            pytest.fail(f"{rel}:{line} imports localkube ({module}); production code must not")


COMPONENTS = {"gateway", "runtimed", "servers"}


def _component_import_violation(rel: str, module: str) -> str | None:
    """Why importing ``module`` from the file ``rel`` (relative to src/) breaks the layering."""
    owner = rel.split("/")[0]
    root = module.split(".")[0]
    if root not in COMPONENTS or root == owner:
        return None
    if owner == "krt":
        return f"krt must not import the component package {root!r} ({module})"
    return f"{owner} must not import another component ({module}); share code through krt"


@pytest.mark.parametrize("path", _production_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_components_import_only_krt_and_krt_imports_no_component(path: Path) -> None:
    rel = str(path.relative_to(SRC))
    for module, line, _ in _imports(ast.parse(path.read_text(), str(path))):
        reason = _component_import_violation(rel, module)
        if reason is not None:
            pytest.fail(f"{rel}:{line}: {reason}")


@pytest.mark.parametrize(
    ("rel", "module", "allowed"),
    [
        ("runtimed/dataplane/proxy.py", "gateway.grpc_client", False),
        ("gateway/app.py", "runtimed.metrics", False),
        ("servers/common/app.py", "runtimed", False),
        ("krt/cli/run_cmd.py", "gateway.targets", False),
        ("krt/kube/events.py", "servers.common", False),
        ("runtimed/tasks.py", "runtimed.identity", True),
        ("gateway/app.py", "krt.grpc.client", True),
        ("servers/python/adapter.py", "servers.common.validation", True),
        ("gateway/app.py", "gatewayish", True),
    ],
)
def test_the_component_rule_sees_violations(rel: str, module: str, allowed: bool) -> None:
    assert (_component_import_violation(rel, module) is None) is allowed


def test_the_boundary_check_sees_violations() -> None:
    tree = ast.parse("import localkube.storage\ndef f():\n    from localkube import x\n")
    assert [(m, top) for m, _, top in _imports(tree)] == [
        ("localkube.storage", True),
        ("localkube", False),
    ]


def test_pinned_grpc_http_stack_imports_together() -> None:
    """purerpc 0.8 needs h2 3.x; hypercorn 0.17.3 and grpclib 0.4.9 must accept the same h2."""
    import grpclib.client
    import h2
    import hypercorn.trio
    import purerpc

    assert h2.__version__.startswith("3.")
    assert purerpc.Server is not None
    assert hypercorn.trio.serve is not None
    assert grpclib.client.Channel is not None
