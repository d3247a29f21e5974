"""The Python Runtime Server over the wire (purerpc client): both services on one port."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import purerpc
import pytest
import trio

from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.common import limits
from servers.python.adapter import PythonAdapter

HANDLER = """
    import time

    def handle(event):
        if event.get("sleep"):
            time.sleep(event["sleep"])
        if event.get("raise"):
            raise KeyError(event["raise"])
        return {"got": event, "outputs": {"seen": "yes"}}
"""


async def status_code(call: Any) -> purerpc.StatusCode:
    with pytest.raises(purerpc.RpcFailedError) as excinfo:
        await call
    code: purerpc.StatusCode = excinfo.value.status.status_code
    return code


@pytest.fixture
def fn_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "fn"
    directory.mkdir()
    (directory / "handler.py").write_text(textwrap.dedent(HANDLER))
    return directory


async def test_health_and_tasks(start_runtime_server: Callable[..., Any], tmp_path: Path) -> None:
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        health = await server.runtime.Health(pb.HealthRequest())
        assert health.healthy
        assert "python" in health.message
        await server.runtime.Execute(pb.ExecuteRequest(id="t1", args=["-c", "print('hi')"]))
        assert (
            await status_code(
                server.runtime.Execute(pb.ExecuteRequest(id="t1", args=["-c", "pass"]))
            )
            == purerpc.StatusCode.ALREADY_EXISTS
        )
        with trio.fail_after(5):
            while True:
                status = await server.runtime.Status(pb.StatusRequest(id="t1"))
                if status.state >= pb.EXECUTION_STATE_SUCCEEDED:
                    break
                await trio.sleep(0.02)
        assert status.state == pb.EXECUTION_STATE_SUCCEEDED
        assert status.stdout == "hi\n"
        listed = await server.runtime.List(pb.ListRequest())
        assert [(e.id, e.state, e.stdout) for e in listed.entries] == [
            ("t1", pb.EXECUTION_STATE_SUCCEEDED, "")
        ]
        await server.runtime.Forget(pb.ForgetRequest(id="t1"))
        for call in (
            server.runtime.Status(pb.StatusRequest(id="t1")),
            server.runtime.Cancel(pb.CancelRequest(id="t1")),
            server.runtime.Forget(pb.ForgetRequest(id="t1")),
        ):
            assert await status_code(call) == purerpc.StatusCode.NOT_FOUND
        assert (
            await status_code(
                server.runtime.Execute(pb.ExecuteRequest(id="t2", entrypoint="../x.py"))
            )
            == purerpc.StatusCode.INVALID_ARGUMENT
        )
        await server.runtime.Execute(
            pb.ExecuteRequest(id="t3", args=["-c", "import time; time.sleep(30)"])
        )
        assert (
            await status_code(server.runtime.Forget(pb.ForgetRequest(id="t3")))
            == purerpc.StatusCode.FAILED_PRECONDITION
        )
        await server.runtime.Cancel(pb.CancelRequest(id="t3"))


async def test_status_of_a_huge_output_ends_with_its_last_line(
    start_runtime_server: Callable[..., Any], tmp_path: Path
) -> None:
    """3 MiB then "THE END" on both streams: Status keeps the end, with the marker between."""
    script = (
        "import sys\n"
        "for stream in (sys.stdout, sys.stderr):\n"
        "    stream.write('x' * 3 * 1024 * 1024 + '\\nTHE END')\n"
        "sys.exit(3)\n"
    )
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        await server.runtime.Execute(pb.ExecuteRequest(id="big", args=["-c", script]))
        with trio.fail_after(10):
            while True:
                status = await server.runtime.Status(pb.StatusRequest(id="big"))
                if status.state >= pb.EXECUTION_STATE_SUCCEEDED:
                    break
                await trio.sleep(0.02)
    assert status.state == pb.EXECUTION_STATE_FAILED
    assert status.exit_code == 3
    dropped = 3 * 1024 * 1024 + len("\nTHE END") - limits.TASK_OUTPUT_LIMIT_BYTES
    for text in (status.stdout, status.stderr):
        assert text.endswith("xxx\nTHE END")
        assert f"[... {dropped} bytes of output dropped by the Runtime Server" in text
        assert len(text.encode()) < limits.TASK_OUTPUT_LIMIT_BYTES + 200


async def test_function_lifecycle(
    start_runtime_server: Callable[..., Any],
    register_request: Callable[..., pb.RegisterFunctionRequest],
    fn_dir: Path,
    tmp_path: Path,
    fake_clock: Any,
) -> None:
    async with start_runtime_server(PythonAdapter(), tmp_path, clock=fake_clock) as server:
        functions = server.functions
        registered = await functions.RegisterFunction(register_request())
        assert registered.state == pb.FUNCTION_REGISTRATION_STATE_READY
        ref = registered.registration
        assert ref.run_uid == "run-1"
        assert ref.registration_id
        again = await functions.RegisterFunction(register_request())
        assert again.registration == ref
        assert (
            await status_code(
                functions.RegisterFunction(register_request(registration_digest="c" * 64))
            )
            == purerpc.StatusCode.ALREADY_EXISTS
        )

        status = await functions.FunctionStatus(pb.FunctionStatusRequest(registration=ref))
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_READY
        assert status.in_flight == 0
        assert status.last_activity_unix_nano == fake_clock.now
        assert status.fatal_error == ""

        response = await functions.InvokeFunction(
            pb.InvokeFunctionRequest(
                registration=ref,
                invocation_id="trace-1",
                input=json.dumps({"command": "status"}).encode(),
                content_type="application/json",
            )
        )
        assert response.invocation_id == "trace-1"
        assert response.registration == ref
        assert response.content_type == "application/json"
        assert json.loads(response.output)["got"] == {"command": "status"}
        assert dict(response.outputs) == {"seen": "yes"}

        generated = await functions.InvokeFunction(
            pb.InvokeFunctionRequest(registration=ref, input=b"{}", content_type="application/json")
        )
        assert len(generated.invocation_id) == 32

        def invoke(**fields: Any) -> Any:
            return functions.InvokeFunction(
                pb.InvokeFunctionRequest(
                    registration=ref, content_type="application/json", **fields
                )
            )

        assert await status_code(invoke(input=b'{"raise": "k"}')) == purerpc.StatusCode.UNKNOWN
        assert await status_code(invoke(input=b"{not json")) == purerpc.StatusCode.INVALID_ARGUMENT
        assert await status_code(invoke(input=b"{}", invocation_id="x" * 129)) == (
            purerpc.StatusCode.INVALID_ARGUMENT
        )
        assert await status_code(invoke(input=b'{"sleep": 30}', timeout_millis=200)) == (
            purerpc.StatusCode.DEADLINE_EXCEEDED
        )
        # only that invocation failed: READY, and the next one runs on a fresh worker
        status = await functions.FunctionStatus(pb.FunctionStatusRequest(registration=ref))
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_READY
        assert json.loads((await invoke(input=b'{"n": 1}')).output)["got"] == {"n": 1}

        async with trio.open_nursery() as nursery:
            nursery.start_soon(status_code, invoke(input=b'{"sleep": 30}'))
            with trio.fail_after(5):
                while True:
                    status = await functions.FunctionStatus(
                        pb.FunctionStatusRequest(registration=ref)
                    )
                    if status.in_flight:
                        break
                    await trio.sleep(0.01)
            assert await status_code(invoke(input=b"{}")) == purerpc.StatusCode.RESOURCE_EXHAUSTED
            await functions.UnregisterFunction(
                pb.UnregisterFunctionRequest(registration=ref, cancel_in_flight=True)
            )
        assert (
            await status_code(functions.FunctionStatus(pb.FunctionStatusRequest(registration=ref)))
            == purerpc.StatusCode.NOT_FOUND
        )
        await functions.UnregisterFunction(pb.UnregisterFunctionRequest(registration=ref))


async def test_supersede_and_stale_ids_over_the_wire(
    start_runtime_server: Callable[..., Any],
    register_request: Callable[..., pb.RegisterFunctionRequest],
    fn_dir: Path,
    tmp_path: Path,
) -> None:
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        functions = server.functions
        old = (await functions.RegisterFunction(register_request())).registration
        new = (
            await functions.RegisterFunction(register_request(registration_attempt=2))
        ).registration
        assert new.registration_id != old.registration_id
        assert (
            await status_code(functions.RegisterFunction(register_request(registration_attempt=1)))
            == purerpc.StatusCode.FAILED_PRECONDITION
        )
        for call in (
            functions.FunctionStatus(pb.FunctionStatusRequest(registration=old)),
            functions.InvokeFunction(pb.InvokeFunctionRequest(registration=old, input=b"{}")),
            functions.UnregisterFunction(pb.UnregisterFunctionRequest(registration=old)),
        ):
            assert await status_code(call) == purerpc.StatusCode.FAILED_PRECONDITION
        status = await functions.FunctionStatus(pb.FunctionStatusRequest(registration=new))
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_READY


async def test_registration_failure_reports_fatal_error(
    start_runtime_server: Callable[..., Any],
    register_request: Callable[..., pb.RegisterFunctionRequest],
    fn_dir: Path,
    tmp_path: Path,
) -> None:
    (fn_dir / "broken.py").write_text("import does_not_exist\n")
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        with pytest.raises(purerpc.RpcFailedError) as excinfo:
            await server.functions.RegisterFunction(register_request(handler="broken.handle"))
        assert excinfo.value.status.status_code == purerpc.StatusCode.FAILED_PRECONDITION
        detail = excinfo.value.status.status_message
        assert "No module named 'does_not_exist'" in detail
        # F9: runtimed copies this detail into Run status: no opaque registration ID in it,
        # and `krt function create` can cut the traceback that follows the exception
        assert detail.startswith(
            "registration attempt 1 failed: cannot load handler broken.handle: "
            "ModuleNotFoundError: No module named 'does_not_exist'\nTraceback (most recent"
        )
        assert re.search(r"reg_[0-9a-f]{8}", detail) is None
        from krt.cli.function_cmd import without_traceback

        assert without_traceback(f"RegistrationFailed; RegisterFunction {detail}").endswith(
            "No module named 'does_not_exist' [traceback left out]"
        )
        assert (
            await status_code(server.functions.RegisterFunction(register_request(handler="nodots")))
            == purerpc.StatusCode.INVALID_ARGUMENT
        )


async def test_timed_out_worker_is_replaced_and_a_broken_reimport_fails_the_registration(
    start_runtime_server: Callable[..., Any],
    register_request: Callable[..., pb.RegisterFunctionRequest],
    fn_dir: Path,
    tmp_path: Path,
) -> None:
    (fn_dir / "counted.py").write_text(
        textwrap.dedent(
            """
            import pathlib, time
            pathlib.Path("imports.log").open("a").write("x")

            def handle(event):
                time.sleep(event.get("sleep", 0))
                return "ok"
            """
        )
    )
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        functions = server.functions
        ref = (
            await functions.RegisterFunction(register_request(handler="counted.handle"))
        ).registration

        def invoke(payload: bytes, timeout_millis: int = 0) -> Any:
            return functions.InvokeFunction(
                pb.InvokeFunctionRequest(
                    registration=ref,
                    input=payload,
                    content_type="application/json",
                    timeout_millis=timeout_millis,
                )
            )

        assert (await invoke(b"{}")).output == b'"ok"'
        assert (fn_dir / "imports.log").read_text() == "x"
        assert (
            await status_code(invoke(b'{"sleep": 30}', 200)) == purerpc.StatusCode.DEADLINE_EXCEEDED
        )
        assert (await invoke(b"{}")).output == b'"ok"'
        assert (fn_dir / "imports.log").read_text() == "xx"  # imported again by a fresh worker

        assert (
            await status_code(invoke(b'{"sleep": 30}', 200)) == purerpc.StatusCode.DEADLINE_EXCEEDED
        )
        (fn_dir / "counted.py").write_text("def handle(:\n")
        with pytest.raises(purerpc.RpcFailedError) as excinfo:
            await invoke(b"{}")
        assert excinfo.value.status.status_code == purerpc.StatusCode.FAILED_PRECONDITION
        assert "SyntaxError" in excinfo.value.status.status_message
        status = await functions.FunctionStatus(pb.FunctionStatusRequest(registration=ref))
        assert status.state == pb.FUNCTION_REGISTRATION_STATE_FAILED
        assert "SyntaxError" in status.fatal_error
        assert "counted.py" in status.fatal_error


async def test_list_entries_carry_state_exit_code_and_error_but_no_output(
    start_runtime_server: Callable[..., Any], tmp_path: Path
) -> None:
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        script = "import sys; print('out'); print('err', file=sys.stderr); raise SystemExit(3)"
        for exec_id, args in (("ok", ["-c", "print('fine')"]), ("bad", ["-c", script])):
            await server.runtime.Execute(pb.ExecuteRequest(id=exec_id, args=args))
        with trio.fail_after(10):
            while True:
                listed = await server.runtime.List(pb.ListRequest())
                if all(e.state >= pb.EXECUTION_STATE_SUCCEEDED for e in listed.entries):
                    break
                await trio.sleep(0.02)
    assert [
        (e.id, e.state, e.exit_code, e.error_message, e.stdout, e.stderr) for e in listed.entries
    ] == [
        ("ok", pb.EXECUTION_STATE_SUCCEEDED, 0, "", "", ""),
        ("bad", pb.EXECUTION_STATE_FAILED, 3, "exited with status 3", "", ""),
    ]


class _SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


async def test_runtime_calls_are_answered_without_a_task_of_their_own(
    start_runtime_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Issue 6: every executor.v1.Runtime method runs in the connection's reader."""
    async with start_runtime_server(PythonAdapter(), tmp_path) as server:
        stream = await trio.open_tcp_stream(server.host, server.port)
        conn = GrpcConnection(stream, authority=f"{server.host}:{server.port}")
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            runtime = "executor.v1.Runtime"
            calls: list[tuple[str, Any, int | None]] = [  # method, request, error code
                ("Health", pb.HealthRequest(), None),
                ("List", pb.ListRequest(), None),
                ("Status", pb.StatusRequest(id="missing"), 5),
                ("Cancel", pb.CancelRequest(id="missing"), 5),
                ("Forget", pb.ForgetRequest(id="missing"), 5),
                ("Execute", pb.ExecuteRequest(id="bad id"), 3),
            ]
            await conn.unary_call(runtime, "Health", pb.HealthRequest().SerializeToString())
            counter = _SpawnCounter()
            trio.lowlevel.add_instrument(counter)
            try:
                with trio.fail_after(10):
                    for method, request, code in calls:
                        call = conn.unary_call(runtime, method, request.SerializeToString())
                        if code is None:
                            await call
                        else:
                            with pytest.raises(GrpcStatusError) as failed:
                                await call
                            assert failed.value.code == code
            finally:
                trio.lowlevel.remove_instrument(counter)
            assert counter.spawned == 0
            conn.close()
            nursery.cancel_scope.cancel()
