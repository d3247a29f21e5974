"""The Python adapter's warm worker, with real processes (seed 002 "Built-in Runtime Requirements")."""

from __future__ import annotations

import json
import logging
import os
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from servers.common.adapter import InvalidInput, InvocationError, RegistrationFailed
from servers.common.limits import MAX_LOGGED_OUTPUT_BYTES
from servers.python.adapter import PythonAdapter, PythonWorker
from servers.python.handler_log import MAX_LOG_LINE_CHARS


def write(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


HANDLER = """
    import os, sys, pathlib
    pathlib.Path("imports.log").open("a").write("imported\\n")
    CALLS = 0

    def handle(event):
        global CALLS
        CALLS += 1
        if isinstance(event, dict) and "op" in event:
            op = event["op"]
            if op == "print":
                print("printed to stdout", event.get("n"))
                print("printed to stderr", file=sys.stderr)
                os.write(1, b"raw fd write\\n")
                import subprocess
                subprocess.run(["echo", "from a child process"], check=True)
                return {"ok": True}
            if op == "raise":
                raise ValueError("bad value " + "x" * event.get("pad", 0))
            if op == "object":
                return object()
            if op == "nan":
                return float("nan")
            if op == "sleep":
                import time; time.sleep(event["seconds"])
            if op == "env":
                return dict(os.environ)
            if op == "outputs":
                return {"result": 1, "outputs": event["outputs"]}
            if op == "stdin":
                return sys.stdin.read()
            if op == "exit":
                os._exit(3)
            if op == "big":
                return "y" * event["size"]
            if op == "long-line":
                print("L" * 100_000)
                print("after the long line")
                return "printed"
            if op == "close-fds":
                os.close(1)
                os.close(2)
                return "closed"
            if op == "surrogate":
                raise ValueError("bad \\ud800 text")
            if op == "chatty":
                for i in range(event["n"]):
                    print("chatty line", i, "x" * 16)
                return "chatted"
            if op == "corrupt":
                # a 4 GiB frame header on the private protocol pipe
                os.write(sys.stdout._channel._out, b"\\xff\\xff\\xff\\xff")
                return "unreachable"
            if op == "bytes":
                sys.stdout.buffer.write(b"bytes out\\n")
                return "ok"
            if op == "threads":
                import threading
                def chatter(n):
                    for i in range(120):  # 4 x 120 lines of ~120 bytes: within the log budget
                        sys.stdout.write(f"thread {n} line {i} " + "x" * 100 + "\\n")
                threads = [threading.Thread(target=chatter, args=(n,)) for n in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                return "threads done"
        return {"calls": CALLS, "event": event}
"""


@pytest.fixture
def fn_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "fn"
    write(directory, "handler.py", HANDLER)
    return directory


@pytest.fixture
async def worker(fn_dir: Path) -> AsyncIterator[PythonWorker]:
    started = await PythonAdapter().start_worker(
        working_dir=fn_dir, handler="handler.handle", env={"MY_VAR": "1"}, run_uid="run-1"
    )
    assert isinstance(started, PythonWorker)
    try:
        yield started
    finally:
        await started.aclose()


async def call(worker: PythonWorker, event: object, invocation_id: str = "inv-1") -> object:
    result = await worker.invoke(
        json.dumps(event).encode(), content_type="application/json", invocation_id=invocation_id
    )
    assert result.content_type == "application/json"
    return json.loads(result.output)


async def test_json_in_json_out_with_state_kept_between_calls(
    worker: PythonWorker, fn_dir: Path
) -> None:
    assert await call(worker, {"a": [1, "é", None]}) == {"calls": 1, "event": {"a": [1, "é", None]}}
    assert await call(worker, 7) == {"calls": 2, "event": 7}
    assert (fn_dir / "imports.log").read_text() == "imported\n"


async def test_large_and_unicode_payloads_round_trip(worker: PythonWorker) -> None:
    text = '"quotes" $(x) `y` \n é ✓ ' * 32_000  # ~1 MiB of awkward characters
    result = await call(worker, {"text": text})
    assert result == {"calls": 1, "event": {"text": text}}


async def test_dotted_package_handler(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/sub/__init__.py", "")
    write(
        tmp_path, "pkg/sub/mod.py", "def fn(event):\n    return {'from': __name__, 'got': event}\n"
    )
    worker = await PythonAdapter().start_worker(
        working_dir=tmp_path, handler="pkg.sub.mod.fn", env={}, run_uid="r"
    )
    try:
        assert isinstance(worker, PythonWorker)
        assert await call(worker, 1) == {"from": "pkg.sub.mod", "got": 1}
    finally:
        await worker.aclose()


@pytest.mark.parametrize(
    ("files", "handler", "fragments"),
    [
        ({}, "missing.handle", ["ModuleNotFoundError", "No module named 'missing'"]),
        ({"bad.py": "def handle(:\n"}, "bad.handle", ["SyntaxError", "bad.py", "line 1"]),
        ({"m.py": "x = 1\n"}, "m.handle", ["AttributeError", "has no attribute 'handle'"]),
        ({"m.py": "handle = 42\n"}, "m.handle", ["TypeError", "m.handle is a int, not a callable"]),
        (
            {"m.py": "def helper():\n    raise RuntimeError('boom at import')\nhelper()\n"},
            "m.handle",
            ["RuntimeError: boom at import", "m.py", "line 2", "in helper"],
        ),
        ({"m.py": "import sys\nsys.exit(4)\n"}, "m.handle", ["SystemExit: 4"]),
    ],
)
async def test_load_failures_fail_the_registration_with_a_summary(
    tmp_path: Path, files: dict[str, str], handler: str, fragments: list[str]
) -> None:
    for name, source in files.items():
        write(tmp_path, name, source)
    with pytest.raises(RegistrationFailed) as excinfo:
        await PythonAdapter().start_worker(
            working_dir=tmp_path, handler=handler, env={}, run_uid="r"
        )
    summary = str(excinfo.value)
    assert summary.startswith(f"cannot load handler {handler}: ")
    for fragment in fragments:
        assert fragment in summary
    assert "servers/python/worker.py" not in summary


async def test_load_failure_summary_is_bounded(tmp_path: Path) -> None:
    write(tmp_path, "m.py", "raise ValueError('x' * 100000)\n")
    with pytest.raises(RegistrationFailed) as excinfo:
        await PythonAdapter().start_worker(working_dir=tmp_path, handler="m.f", env={}, run_uid="r")
    assert len(str(excinfo.value).encode()) <= 4096


async def test_handler_exception_is_an_invocation_error_and_worker_survives(
    worker: PythonWorker,
) -> None:
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "raise"})
    assert excinfo.value.error_type == "ValueError"
    assert excinfo.value.message == "bad value "
    assert worker.alive
    assert await call(worker, 1) == {"calls": 2, "event": 1}


async def test_handler_exception_message_is_bounded(worker: PythonWorker) -> None:
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "raise", "pad": 100_000})
    assert len(excinfo.value.message.encode()) <= 4096


@pytest.mark.parametrize("op", ["object", "nan"])
async def test_non_json_return_value_is_an_invocation_error(worker: PythonWorker, op: str) -> None:
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": op})
    assert "not JSON-serialisable" in excinfo.value.message
    assert worker.alive


async def test_output_is_bounded_to_1_mib(worker: PythonWorker) -> None:
    assert await call(worker, {"op": "big", "size": 1024 * 1024 - 2}) == "y" * (1024 * 1024 - 2)
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "big", "size": 1024 * 1024})
    assert excinfo.value.error_type == "OutputTooLarge"
    assert "1048578 bytes; the limit is 1048576" in excinfo.value.message
    assert worker.alive


async def test_invalid_json_and_content_type_are_invalid_input(worker: PythonWorker) -> None:
    with pytest.raises(InvalidInput, match="not valid JSON"):
        await worker.invoke(b"{nope", content_type="application/json", invocation_id="i")
    with pytest.raises(InvalidInput, match="content_type 'text/plain'"):
        await worker.invoke(b"{}", content_type="text/plain", invocation_id="i")
    result = await worker.invoke(
        b'"x"', content_type="application/json; charset=utf-8", invocation_id="i"
    )
    assert json.loads(result.output) == {"calls": 1, "event": "x"}


async def test_prints_go_to_the_structured_log_not_the_output(
    worker: PythonWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers")
    assert await call(worker, {"op": "print", "n": 5}, invocation_id="inv-42") == {"ok": True}
    lines = [
        (r.getMessage(), getattr(r, "stream", None))
        for r in caplog.records
        if getattr(r, "invocation_id", None) == "inv-42"
    ]
    assert ("printed to stdout 5", "stdout") in lines
    assert ("printed to stderr", "stderr") in lines
    # descriptor-level writes (C code, child processes) are structured records too, never
    # raw lines in the server's JSON log stream
    assert ("raw fd write", "stderr") in lines
    assert ("from a child process", "stderr") in lines
    assert all(
        getattr(r, "run_uid", None) == "run-1" for r in caplog.records if r.name == "servers.python"
    )
    # a raw write to descriptor 1 did not corrupt the protocol
    assert await call(worker, 2) == {"calls": 2, "event": 2}


async def test_prints_from_threads_and_bytes_writes_keep_the_protocol_intact(
    worker: PythonWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers")
    assert await call(worker, {"op": "threads"}, invocation_id="inv-t") == "threads done"
    thread_lines = [
        r.getMessage() for r in caplog.records if getattr(r, "invocation_id", None) == "inv-t"
    ]
    assert len(thread_lines) == 4 * 120
    assert all(line.startswith("thread ") and line.endswith("x" * 100) for line in thread_lines)
    assert await call(worker, {"op": "bytes"}, invocation_id="inv-b") == "ok"
    assert "bytes out" in [
        r.getMessage() for r in caplog.records if getattr(r, "invocation_id", None) == "inv-b"
    ]


async def test_outputs_map_goes_to_outputs(worker: PythonWorker) -> None:
    result = await worker.invoke(
        json.dumps({"op": "outputs", "outputs": {"phase": "done", "n.count": "3"}}).encode(),
        content_type="application/json",
        invocation_id="i",
    )
    assert result.outputs == {"phase": "done", "n.count": "3"}
    assert json.loads(result.output) == {"result": 1, "outputs": {"phase": "done", "n.count": "3"}}


@pytest.mark.parametrize(
    ("outputs", "fragment"),
    [
        ({"bad key": "v"}, "'bad key'"),
        ({"k": 1}, "must be a string"),
        ({"k": "x" * 5000}, "5000 bytes"),
    ],
)
async def test_invalid_outputs_are_an_invocation_error(
    worker: PythonWorker, outputs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "outputs", "outputs": outputs})
    assert excinfo.value.error_type == "InvalidOutputs"
    assert fragment in excinfo.value.message


async def test_outputs_total_counts_keys_like_run_outputs(worker: PythonWorker) -> None:
    # the one outputs validator (krt.api.outputs): key bytes count toward the 16 KiB total,
    # so four 4 KiB values are over the bound once their keys are added.
    outputs = {f"k{i}": "x" * 4096 for i in range(4)}
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "outputs", "outputs": outputs})
    assert excinfo.value.error_type == "InvalidOutputs"
    assert "16384 bytes in total" in excinfo.value.message


async def test_environment_is_exactly_env_plus_path_and_home(
    worker: PythonWorker, fn_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KRT_SERVER_SECRET", "hunter2")
    env = await call(worker, {"op": "env"})
    assert isinstance(env, dict)
    assert env["MY_VAR"] == "1"
    assert env["HOME"] == str(fn_dir)
    assert env["PATH"]
    assert set(env) - {"MY_VAR", "HOME", "PATH", "LC_CTYPE"} == set()


async def test_handler_reading_stdin_gets_eof(worker: PythonWorker) -> None:
    assert await call(worker, {"op": "stdin"}) == ""
    assert await call(worker, 3) == {"calls": 2, "event": 3}


async def test_cancelled_invocation_kills_the_worker_process_group(worker: PythonWorker) -> None:
    pid = worker.pid
    with trio.move_on_after(0.3):
        await call(worker, {"op": "sleep", "seconds": 30})
    assert not worker.alive
    await worker.aclose()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


async def test_worker_exit_during_a_call_is_an_invocation_error(worker: PythonWorker) -> None:
    with pytest.raises(InvocationError, match="exited with status 3"):
        await call(worker, {"op": "exit"})
    assert not worker.alive


async def test_a_long_printed_line_is_cut_not_dropped(
    worker: PythonWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers")
    assert await call(worker, {"op": "long-line"}, invocation_id="inv-l") == "printed"
    lines = [r.getMessage() for r in caplog.records if getattr(r, "invocation_id", None) == "inv-l"]
    assert lines[0] == "L" * MAX_LOG_LINE_CHARS
    assert lines[1] == "after the long line"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_handler_closing_its_descriptors_leaves_the_worker_idle(
    worker: PythonWorker,
) -> None:
    # the descriptor-output reader sees end of file: it must stop, not spin
    assert await call(worker, {"op": "close-fds"}) == "closed"
    before = _cpu_seconds(worker.pid)
    await trio.sleep(0.3)
    assert _cpu_seconds(worker.pid) - before < 0.1
    assert await call(worker, 5) == {"calls": 2, "event": 5}


async def test_error_text_that_is_not_valid_unicode_is_made_valid(worker: PythonWorker) -> None:
    # a lone surrogate cannot be encoded as UTF-8: left in, it would break the gRPC status
    # (INTERNAL instead of UNKNOWN)
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "surrogate"})
    assert excinfo.value.error_type == "ValueError"
    assert excinfo.value.message.encode() == b"bad ? text"


async def test_protocol_error_retires_the_worker(worker: PythonWorker) -> None:
    # a desynchronised frame stream can never be trusted again: the next invocation must get
    # a fresh worker instead of failing the same way for ever.
    pid = worker.pid
    with pytest.raises(InvocationError) as excinfo:
        await call(worker, {"op": "corrupt"})
    assert excinfo.value.error_type == "ProtocolError"
    assert not worker.alive
    await worker.aclose()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


async def test_chatty_handler_log_is_bounded_per_invocation(
    worker: PythonWorker, caplog: pytest.LogCaptureFixture
) -> None:
    # 20000 lines (about 750 KB) would otherwise become 20000 log records on the event loop
    caplog.set_level(logging.INFO, logger="servers")
    assert await call(worker, {"op": "chatty", "n": 20000}, invocation_id="inv-c") == "chatted"
    lines = [r.getMessage() for r in caplog.records if getattr(r, "invocation_id", None) == "inv-c"]
    assert lines[0] == "chatty line 0 " + "x" * 16
    assert sum(len(line.encode()) + 1 for line in lines[:-1]) <= MAX_LOGGED_OUTPUT_BYTES
    assert "not logged" in lines[-1]
    # the bound is per invocation: the next one logs again
    await call(worker, {"op": "print"}, invocation_id="inv-d")
    assert any(
        r.getMessage().startswith("printed to stdout")
        for r in caplog.records
        if getattr(r, "invocation_id", None) == "inv-d"
    )


def _proc_status(pid: int) -> str:
    return Path(f"/proc/{pid}/status").read_text()


async def test_worker_rss_is_small(worker: PythonWorker) -> None:
    status = _proc_status(worker.pid)
    rss_kib = int(
        next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]
    )
    assert rss_kib < 30 * 1024


def test_handler_syntax() -> None:
    adapter = PythonAdapter()
    assert adapter.handler_error("handler.handle") is None
    assert adapter.handler_error("pkg.sub.mod.fn") is None
    for bad in ("handle", "a..b", ".a.b", "a.b.", "a-b.c", "a.1b", "a.b c", "os.system('x')"):
        assert adapter.handler_error(bad) is not None, bad


def test_task_argv() -> None:
    adapter = PythonAdapter(python="/py")
    assert adapter.task_argv(entrypoint="main.py", args=["a", "b"]) == ["/py", "main.py", "a", "b"]
    assert adapter.task_argv(entrypoint="", args=["-c", "print(1)"]) == ["/py", "-c", "print(1)"]
    with pytest.raises(ValueError, match="entrypoint or args"):
        adapter.task_argv(entrypoint="", args=[])
