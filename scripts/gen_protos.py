"""Regenerate the committed gRPC stubs in src/krt/proto/ from protos/.

Usage: ``python scripts/gen_protos.py`` (or ``make protos``); ``--check`` exits 1 when the
committed stubs differ from a fresh generation (used by tests/unit/test_proto_stubs.py).

protoc's purerpc plugin writes absolute imports (``import executor.v1.runtime_pb2``); the
stubs live under the ``krt.proto`` package, so those imports are rewritten here.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT_ROOT = ROOT / "src" / "krt" / "proto"
PACKAGE = "krt.proto"


def _proto_files() -> list[Path]:
    return sorted(p.relative_to(PROTO_ROOT) for p in PROTO_ROOT.rglob("*.proto"))


def generate(out: Path) -> list[Path]:
    """Run protoc into ``out``; return the generated .py/.pyi paths relative to ``out``."""
    bindir = Path(sys.executable).parent
    plugin = shutil.which("protoc-gen-purerpc", path=str(bindir)) or shutil.which(
        "protoc-gen-purerpc"
    )
    if plugin is None:
        raise SystemExit("protoc-gen-purerpc not found: install the project with its test extra")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--purerpc_out={out}",
        f"--plugin=protoc-gen-purerpc={plugin}",
        *[str(p) for p in _proto_files()],
    ]
    subprocess.run(cmd, check=True)
    generated: list[Path] = []
    for path in sorted(out.rglob("*.py*")):
        text = path.read_text()
        text = re.sub(r"^import (executor\.)", rf"import {PACKAGE}.\1", text, flags=re.M)
        text = re.sub(r"^from (executor\.)", rf"from {PACKAGE}.\1", text, flags=re.M)
        path.write_text(text)
        generated.append(path.relative_to(out))
    for d in {parent for p in generated for parent in p.parents if parent != Path(".")}:
        init = out / d / "__init__.py"
        if not init.exists():
            init.write_text("")
            generated.append(init.relative_to(out))
    return sorted(set(generated))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the stubs are stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        files = generate(fresh)
        if args.check:
            stale = []
            for rel in files:
                new = (fresh / rel).read_text()
                old_path = OUT_ROOT / rel
                old = old_path.read_text() if old_path.exists() else ""
                if new != old:
                    stale.append(rel)
                    sys.stdout.writelines(
                        difflib.unified_diff(
                            old.splitlines(True), new.splitlines(True), str(old_path), "fresh"
                        )
                    )
            if stale:
                print(f"stale stubs: {', '.join(map(str, stale))}; run `make protos`")
                return 1
            return 0
        for rel in files:
            dest = OUT_ROOT / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(fresh / rel, dest)
            os.chmod(dest, 0o644)
        print(f"wrote {len(files)} files under {OUT_ROOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
