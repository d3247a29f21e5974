"""The Bash Runtime Server over gRPC (purerpc client): tasks and function invocations.

The contract rules themselves (attempts, digests, fencing, drains) are tested once for both
servers in tests/servers/; here the Bash-specific behaviour is checked end to end through
``serve()``: task argv rules, registration failures, the payload as one argument, stdout as
output with its content type, exit status as UNKNOWN, and a timeout that kills the worker
while the registration stays READY.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import purerpc
import pytest
import trio
import trio.testing
from bash_helpers import write_handler

from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.bash.adapter import BashAdapter

ServerFactory = Callable[..., AbstractAsyncContextManager[Any]]

HANDLER = r"""
greet() {
    local name='world'
    # plain-bash field extraction for the test: {"name": "..."} without escapes
    if [[ $1 =~ \"name\"[[:space:]]*:[[:space:]]*\"([^\"\\]*)\" ]]; then
        name=${BASH_REMATCH[1]}
    fi
    echo "greeting $name" >&2
    printf '{"message": "hello, %s"}\n' "$name"
}
plain() { printf 'not json: %s' "$1"; }
fail() { echo "no such thing" >&2; return 4; }
slow() { sleep 1000; }
"""

TERMINAL = (pb.EXECUTION_STATE_SUCCEEDED, pb.EXECUTION_STATE_FAILED)


async def _wait_terminal(server: Any, execution_id: str) -> pb.StatusResponse:
    """Poll Status until the task ends (bash tasks here end within milliseconds)."""
    with trio.fail_after(10):
        while True:
            status: pb.StatusResponse = await server.runtime.Status(
                pb.StatusRequest(id=execution_id)
            )
            if status.state in TERMINAL:
                return status
            await trio.sleep(0.005)


@pytest.fixture
def fn_dir(tmp_path: Path) -> Path:
    path = tmp_path / "srv" / "fn"
    path.mkdir(parents=True)
    write_handler(path, "handler.sh", HANDLER)
    return path


def _register(fn_dir: Path, handler: str, *, run_uid: str = "run-1") -> pb.RegisterFunctionRequest:
    return pb.RegisterFunctionRequest(
        run_uid=run_uid,
        registration_attempt=1,
        working_dir=str(fn_dir),
        handler=handler,
        registration_digest="sha256:" + "a" * 64,
        idle_timeout_seconds=300,
    )


async def test_task_with_one_argument_runs_bash_c(
    start_runtime_server: ServerFactory, tmp_path: Path
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        await server.runtime.Execute(
            pb.ExecuteRequest(id="t1", args=['echo one; printf "%s" "$HOME" >&2; exit 3'])
        )
        status = await _wait_terminal(server, "t1")
    assert status.state == pb.EXECUTION_STATE_FAILED
    assert status.exit_code == 3
    assert status.stdout == "one\n"
    assert status.stderr.endswith("t1")  # HOME is the task's working dir <work-dir>/t1


async def test_task_with_entrypoint_runs_the_script_with_args(
    start_runtime_server: ServerFactory, tmp_path: Path
) -> None:
    task_dir = tmp_path / "srv" / "job"
    task_dir.mkdir(parents=True)
    (task_dir / "run.sh").write_text('printf "%s|" "$@"\n')
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        await server.runtime.Execute(
            pb.ExecuteRequest(
                id="t2", entrypoint="run.sh", args=["a b", "$(id)", "-x"], working_dir=str(task_dir)
            )
        )
        status = await _wait_terminal(server, "t2")
    assert status.state == pb.EXECUTION_STATE_SUCCEEDED
    assert status.stdout == "a b|$(id)|-x|"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [([], "needs an entrypoint or exactly one argument"), (["echo", "hi"], "got 2")],
)
async def test_task_without_entrypoint_needs_exactly_one_argument(
    start_runtime_server: ServerFactory, tmp_path: Path, args: list[str], fragment: str
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        with pytest.raises(purerpc.InvalidArgumentError, match=fragment):
            await server.runtime.Execute(pb.ExecuteRequest(id="t3", args=args))
        with pytest.raises(purerpc.NotFoundError):
            await server.runtime.Status(pb.StatusRequest(id="t3"))


async def test_register_and_invoke_a_bash_function(
    start_runtime_server: ServerFactory, tmp_path: Path, fn_dir: Path
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        registered = await server.functions.RegisterFunction(_register(fn_dir, "handler.greet"))
        assert registered.state == pb.FUNCTION_REGISTRATION_STATE_READY
        reply = await server.functions.InvokeFunction(
            pb.InvokeFunctionRequest(
                registration=registered.registration,
                invocation_id="inv-1",
                input=b'{"name": "Ada"}',
                content_type="application/json",
            )
        )
        assert reply.output == b'{"message": "hello, Ada"}\n'
        assert reply.content_type == "application/json"
        assert reply.invocation_id == "inv-1"
        status = await server.functions.FunctionStatus(
            pb.FunctionStatusRequest(registration=registered.registration)
        )
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_READY
        assert status.in_flight == 0
        plain = await server.functions.RegisterFunction(
            _register(fn_dir, "handler.plain", run_uid="run-2")
        )
        reply = await server.functions.InvokeFunction(
            pb.InvokeFunctionRequest(registration=plain.registration, input=b'"$(id)"')
        )
        assert reply.output == b'not json: "$(id)"'
        assert reply.content_type == "text/plain; charset=utf-8"
        assert reply.invocation_id  # generated when empty


@pytest.mark.parametrize(
    ("handler", "fragment"),
    [
        ("handler.missing", "handler.sh does not define a function named 'missing'"),
        ("nofile.greet", "handler file nofile.sh not found"),
    ],
)
async def test_registration_failures_carry_the_reason(
    start_runtime_server: ServerFactory, tmp_path: Path, fn_dir: Path, handler: str, fragment: str
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        with pytest.raises(purerpc.FailedPreconditionError, match=fragment):
            await server.functions.RegisterFunction(_register(fn_dir, handler))


async def test_malformed_handler_is_invalid_argument(
    start_runtime_server: ServerFactory, tmp_path: Path, fn_dir: Path
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        with pytest.raises(purerpc.InvalidArgumentError, match="not a valid bash function name"):
            await server.functions.RegisterFunction(_register(fn_dir, "handler.$(id)"))
        with pytest.raises(purerpc.InvalidArgumentError) as excinfo:
            await server.functions.RegisterFunction(_register(fn_dir, "handler"))
    # the detail names the handler once, not "handler 'handler': handler 'handler' ..."
    assert str(excinfo.value.args[0]).count("'handler'") == 1, excinfo.value


async def test_exit_status_is_unknown_and_invalid_json_is_invalid_argument(
    start_runtime_server: ServerFactory, tmp_path: Path, fn_dir: Path
) -> None:
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        registered = await server.functions.RegisterFunction(_register(fn_dir, "handler.fail"))
        ref = registered.registration
        with pytest.raises(
            purerpc.UnknownError,
            match="ExitStatus: function fail exited with status 4; stderr tail: no such thing",
        ):
            await server.functions.InvokeFunction(
                pb.InvokeFunctionRequest(registration=ref, input=b"{}")
            )
        with pytest.raises(purerpc.InvalidArgumentError, match="not valid JSON"):
            await server.functions.InvokeFunction(
                pb.InvokeFunctionRequest(registration=ref, input=b"{")
            )
        status = await server.functions.FunctionStatus(pb.FunctionStatusRequest(registration=ref))
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_READY


def _is_dead(pid: int) -> bool:
    """True when ``pid`` is gone or a zombie (PID 1 here may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def test_timeout_kills_the_worker_and_the_next_invocation_gets_a_fresh_one(
    start_runtime_server: ServerFactory,
    tmp_path: Path,
    fn_dir: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Virtual time only jumps while the slow call waits: registration and the follow-up
    # call wait on real processes and must not see the clock jump to their deadlines.
    autojump_clock.autojump_threshold = math.inf
    write_handler(
        fn_dir,
        "pid.sh",
        'f() { if [[ $1 == \'"slow"\' ]]; then sleep 1000; fi; printf "%s" "$$"; }\n',
    )
    async with start_runtime_server(BashAdapter(), tmp_path / "srv") as server:
        registered = await server.functions.RegisterFunction(_register(fn_dir, "pid.f"))
        ref = registered.registration
        first = await server.functions.InvokeFunction(
            pb.InvokeFunctionRequest(registration=ref, input=b"1")
        )
        autojump_clock.autojump_threshold = 0
        start = trio.current_time()
        with pytest.raises(purerpc.DeadlineExceededError, match="exceeded its timeout of 5000 ms"):
            await server.functions.InvokeFunction(
                pb.InvokeFunctionRequest(registration=ref, input=b'"slow"', timeout_millis=5000)
            )
        assert trio.current_time() - start == pytest.approx(5)
        autojump_clock.autojump_threshold = math.inf
        old_pid = int(first.output)  # the warm worker that served both calls
        assert _is_dead(old_pid)
        status = await server.functions.FunctionStatus(pb.FunctionStatusRequest(registration=ref))
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_READY
        assert status.in_flight == 0
        after = await server.functions.InvokeFunction(
            pb.InvokeFunctionRequest(registration=ref, input=b"2")
        )
        assert int(after.output) != old_pid
