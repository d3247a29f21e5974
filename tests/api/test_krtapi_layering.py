"""krt.api is the bottom layer: pure, importing nothing above it and doing no I/O at import."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("krt.kube", "krt.controlplane", "krt.cli", "runtimed", "gateway", "localkube", "trio",
             "kr8s", "httpx", "purerpc")  # fmt: skip


def test_krt_api_imports_nothing_above_it() -> None:
    code = (
        "import sys, krt.api, krt.api.crds, krt.api.lifecycle\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} "
        f"or any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r})]\n"
        "print(','.join(sorted(bad)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
