"""The committed gRPC stubs in src/krt/proto/ match a fresh generation from protos/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_committed_stubs_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_stubs_import_together_with_the_pinned_stack() -> None:
    import grpclib
    import h2
    import hypercorn.trio
    import purerpc

    from krt.proto.executor.v1 import runtime_grpc, runtime_pb2

    assert purerpc.__version__ == "0.8.0"
    assert h2.__version__.startswith("3.")
    assert grpclib.__version__ == "0.4.9"
    assert callable(hypercorn.trio.serve)
    assert runtime_pb2.DESCRIPTOR.package == "executor.v1"
    assert {
        "RuntimeServicer",
        "FunctionRuntimeServicer",
        "RuntimeStub",
        "FunctionRuntimeStub",
    } <= set(vars(runtime_grpc))
