"""Regenerate the CRD manifests in charts/kruntimes/crds/ from src/krt/api/schema.py.

Usage: ``python scripts/gen_crds.py`` writes the files; ``--check`` writes nothing and exits 1
(printing a unified diff) when a committed file differs from a fresh rendering. The test
tests/api/test_krtapi_crd_files.py runs the same comparison.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from krt.api.crds import CRD_FILES, render_crd  # noqa: E402

CRD_DIR = ROOT / "charts" / "kruntimes" / "crds"


def check(crd_dir: Path = CRD_DIR) -> list[str]:
    """Return unified diffs of every committed CRD file that differs from the source (empty if none)."""
    diffs = []
    for filename, which in CRD_FILES.items():
        path = crd_dir / filename
        expected = render_crd(which)
        actual = path.read_text(encoding="utf-8") if path.exists() else ""
        if actual != expected:
            diffs.append(
                "".join(
                    difflib.unified_diff(
                        actual.splitlines(keepends=True),
                        expected.splitlines(keepends=True),
                        fromfile=f"{filename} (committed)",
                        tofile=f"{filename} (from schema.py)",
                    )
                )
                or f"{filename}: missing\n"
            )
    return diffs


def write(crd_dir: Path = CRD_DIR) -> list[Path]:
    """Write every CRD file; return the paths written."""
    crd_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, which in CRD_FILES.items():
        path = crd_dir / filename
        path.write_text(render_crd(which), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed CRDs are out of date"
    )
    args = parser.parse_args(argv)
    if args.check:
        diffs = check()
        for diff in diffs:
            sys.stdout.write(diff)
        if diffs:
            print("CRDs are out of date: run python scripts/gen_crds.py", file=sys.stderr)
            return 1
        return 0
    for path in write():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
