"""The warm Bash worker with real bash processes (seed 002, "Built-in Runtime Requirements").

Registration: the handler file is sourced once and the function checked with ``declare -F``.
Invocation: the payload is the function's one argument, stdout is the output, stderr goes to
the structured log, a non-zero status is an invocation error, cancellation kills the worker's
process group.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import trio
from bash_helpers import running_worker, write_handler

from servers.bash.adapter import BashAdapter, BashNotFound
from servers.bash.diagnostics import STDERR_LOG_TAIL_BYTES
from servers.bash.payload import BINARY_CONTENT_TYPE, JSON_CONTENT_TYPE, TEXT_CONTENT_TYPE
from servers.bash.worker import MAX_OUTPUT_BYTES
from servers.common.adapter import InvalidInput, InvocationError, RegistrationFailed

JSON = "application/json"

FUNCS = r"""
# top-level state, set once at registration
COUNTER=0
GREETING="hello"
echo "top level of funcs.sh ran" >&2

echo_arg() { printf '%s' "$1"; }
nargs() { printf '%d' "$#"; }
greet() { printf '{"greeting": "%s", "input": %s}\n' "$GREETING" "$1"; }
count() { COUNTER=$((COUNTER + 1)); MARK=set; printf '%d %s' "$COUNTER" "${MARK2-unset}"; MARK2=x; }
noisy() { echo "line one on stderr" >&2; echo "line two" >&2; printf 'out'; }
fail() { echo "something broke" >&2; return 7; }
newlines() { printf 'a\n\n\n'; }
binary() { printf '\xff\x00\xfe'; }
big() { head -c "$1" /dev/zero | tr '\0' 'a'; }
where() { pwd; }
env_of() { printf '%s|%s|%s' "${FOO-unset}" "$HOME" "${SECRET_OF_SERVER-unset}"; }
die() { kill -9 "$$"; }
leaky() {
    if [[ $1 == '"bg"' ]]; then
        { sleep 0.3; echo "LATE OUTPUT"; echo "LATE STDERR" >&2; } &
        printf 'started'
    else
        sleep 0.6; printf '%s' "$1"
    fi
}
"""


@pytest.fixture
def funcs(workdir: Path) -> Path:
    return write_handler(workdir, "funcs.sh", FUNCS)


# -- registration -----------------------------------------------------------------------


async def test_a_background_job_cannot_write_into_the_next_invocation(
    adapter: BashAdapter, workdir: Path, funcs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the job the first call leaves behind writes while the second call runs: its output
    # must not become (part of) the second call's output, nor its stderr the second's log.
    caplog.set_level(logging.INFO, logger="servers.bash")
    async with running_worker(adapter, workdir, "funcs.leaky") as worker:
        first = await worker.invoke(b'"bg"', content_type=JSON, invocation_id="first")
        second = await worker.invoke(b'"x"', content_type=JSON, invocation_id="second")
        # each call's files are removed once read: the scratch dir does not grow
        assert sorted(os.listdir(worker.scratch_dir)) == ["worker.log"]
    assert first.output == b"started"
    assert second.output == b'"x"'
    second_log = [
        r.getMessage() for r in caplog.records if getattr(r, "invocation_id", None) == "second"
    ]
    assert "LATE STDERR" not in second_log


async def test_registration_runs_the_top_level_once_and_logs_its_stderr(
    adapter: BashAdapter, workdir: Path, funcs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers.bash")
    async with running_worker(adapter, workdir, "funcs.count", run_uid="uid-7") as worker:
        assert worker.alive
        records = [r for r in caplog.records if r.getMessage() == "top level of funcs.sh ran"]
        assert len(records) == 1
        assert records[0].run_uid == "uid-7"  # type: ignore[attr-defined]
        assert records[0].invocation_id is None  # type: ignore[attr-defined]
        first = await worker.invoke(b"1", content_type=JSON, invocation_id="a")
        second = await worker.invoke(b"1", content_type=JSON, invocation_id="b")
    # top-level state is warm (COUNTER from the file), but each call runs in a subshell:
    # its variable changes never leak into the next invocation
    assert first.output == b"1 unset"
    assert second.output == b"1 unset"
    assert len([r for r in caplog.records if r.getMessage() == "top level of funcs.sh ran"]) == 1


async def test_missing_handler_file_fails_registration(adapter: BashAdapter, workdir: Path) -> None:
    with pytest.raises(RegistrationFailed, match="handler file nope.sh not found"):
        await adapter.start_worker(working_dir=workdir, handler="nope.f", env={}, run_uid="u")


async def test_handler_file_that_is_a_directory_fails_registration(
    adapter: BashAdapter, workdir: Path
) -> None:
    (workdir / "dir.sh").mkdir()
    with pytest.raises(RegistrationFailed, match="dir.sh is not a regular file"):
        await adapter.start_worker(working_dir=workdir, handler="dir.f", env={}, run_uid="u")


async def test_symlink_out_of_the_working_dir_fails_registration(
    adapter: BashAdapter, workdir: Path, tmp_path: Path
) -> None:
    outside = write_handler(tmp_path, "outside.sh", "f() { :; }\n")
    (workdir / "link.sh").symlink_to(outside)
    with pytest.raises(RegistrationFailed, match="resolves outside the working directory"):
        await adapter.start_worker(working_dir=workdir, handler="link.f", env={}, run_uid="u")


async def test_malformed_handler_fails_registration(adapter: BashAdapter, workdir: Path) -> None:
    with pytest.raises(RegistrationFailed, match="'..'"):
        await adapter.start_worker(working_dir=workdir, handler="../x.f", env={}, run_uid="u")


async def test_syntax_error_fails_registration_before_anything_runs(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(workdir, "bad.sh", "touch ran\nf() { echo (; }\n")
    with pytest.raises(RegistrationFailed, match=r"syntax error in bad.sh \(bash -n\): .*line 2"):
        await adapter.start_worker(working_dir=workdir, handler="bad.f", env={}, run_uid="u")
    assert not (workdir / "ran").exists()


async def test_missing_function_fails_registration(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    with pytest.raises(
        RegistrationFailed,
        match=r"funcs.sh does not define a function named 'nothere' \(checked with declare -F\)",
    ):
        await adapter.start_worker(
            working_dir=workdir, handler="funcs.nothere", env={}, run_uid="u"
        )


async def test_a_variable_or_command_is_not_a_function(adapter: BashAdapter, workdir: Path) -> None:
    write_handler(workdir, "h.sh", "handle=1\n")
    with pytest.raises(RegistrationFailed, match="does not define a function named 'handle'"):
        await adapter.start_worker(working_dir=workdir, handler="h.handle", env={}, run_uid="u")
    write_handler(workdir, "h2.sh", "\n")
    with pytest.raises(RegistrationFailed, match="does not define a function named 'ls'"):
        await adapter.start_worker(working_dir=workdir, handler="h2.ls", env={}, run_uid="u")


async def test_failing_top_level_fails_registration_with_stderr(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(workdir, "h.sh", "f() { :; }\necho 'config missing' >&2\nfalse\n")
    with pytest.raises(RegistrationFailed, match="sourcing h.sh returned status 1: config missing"):
        await adapter.start_worker(working_dir=workdir, handler="h.f", env={}, run_uid="u")


async def test_exiting_top_level_fails_registration(adapter: BashAdapter, workdir: Path) -> None:
    write_handler(workdir, "h.sh", "f() { :; }\necho bye >&2\nexit 3\n")
    with pytest.raises(RegistrationFailed, match="exited with status 3 while sourcing h.sh: bye"):
        await adapter.start_worker(working_dir=workdir, handler="h.f", env={}, run_uid="u")


async def test_registration_failure_summary_is_bounded(adapter: BashAdapter, workdir: Path) -> None:
    write_handler(workdir, "h.sh", "f() { :; }\nhead -c 100000 /dev/zero | tr '\\0' x >&2\nfalse\n")
    with pytest.raises(RegistrationFailed) as info:
        await adapter.start_worker(working_dir=workdir, handler="h.f", env={}, run_uid="u")
    assert len(str(info.value).encode()) <= 4096


async def test_top_level_output_and_redirections_do_not_break_the_protocol(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(
        workdir,
        "h.sh",
        "echo ready\necho done 0\nexec >/dev/null\nexec </dev/null\nf() { printf ok; }\n",
    )
    async with running_worker(adapter, workdir, "h.f") as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="i")
    assert result.output == b"ok"


async def test_handler_in_a_subdirectory_runs_in_the_working_dir(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    write_handler(workdir, "lib/sub.sh", "here() { pwd; }\n")
    async with running_worker(adapter, workdir, "lib/sub.here") as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="i")
    assert result.output.decode().strip() == str(workdir)  # the fixture resolved it


async def test_environment_is_exactly_env_plus_path_and_home(
    adapter: BashAdapter, workdir: Path, funcs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_OF_SERVER", "leak")
    async with running_worker(adapter, workdir, "funcs.env_of", env={"FOO": "bar"}) as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="i")
    assert result.output.decode() == f"bar|{workdir}|unset"


# -- invocation ---------------------------------------------------------------------------


async def test_payload_is_one_argument_and_stdout_is_the_json_output(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    async with running_worker(adapter, workdir, "funcs.greet") as worker:
        result = await worker.invoke(b'{"name": "a b  c"}', content_type=JSON, invocation_id="i")
        assert json.loads(result.output) == {"greeting": "hello", "input": {"name": "a b  c"}}
        assert result.content_type == JSON_CONTENT_TYPE
        assert result.outputs == {}
    async with running_worker(adapter, workdir, "funcs.nargs") as worker:
        result = await worker.invoke(b'"a b" "c"  ', content_type="text/plain", invocation_id="i")
        assert result.output == b"1"


async def test_stdout_is_returned_byte_exact(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    async with running_worker(adapter, workdir, "funcs.newlines") as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        assert result.output == b"a\n\n\n"
        assert result.content_type == TEXT_CONTENT_TYPE
    async with running_worker(adapter, workdir, "funcs.binary") as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        assert result.output == b"\xff\x00\xfe"
        assert result.content_type == BINARY_CONTENT_TYPE


async def test_stderr_goes_to_the_log_keyed_by_run_and_invocation_never_the_output(
    adapter: BashAdapter, workdir: Path, funcs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers.bash")
    async with running_worker(adapter, workdir, "funcs.noisy", run_uid="uid-9") as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="inv-3")
    assert result.output == b"out"
    lines = [
        (r.getMessage(), r.run_uid, r.invocation_id, r.stream)  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "invocation_id", None) == "inv-3"
    ]
    assert lines == [
        ("line one on stderr", "uid-9", "inv-3", "stderr"),
        ("line two", "uid-9", "inv-3", "stderr"),
    ]


async def test_logged_stderr_is_bounded_to_its_tail(
    adapter: BashAdapter, workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servers.bash")
    write_handler(
        workdir,
        "h.sh",
        "f() { head -c 200000 /dev/zero | tr '\\0' x >&2; echo >&2; echo last >&2; }\n",
    )
    async with running_worker(adapter, workdir, "h.f") as worker:
        await worker.invoke(b"1", content_type=JSON, invocation_id="i")
    messages = [r.getMessage() for r in caplog.records if getattr(r, "invocation_id", None) == "i"]
    assert messages[0] == f"[{200006 - STDERR_LOG_TAIL_BYTES} earlier bytes of stderr not logged]"
    assert messages[-1] == "last"
    assert sum(len(m) for m in messages[1:]) <= STDERR_LOG_TAIL_BYTES


async def test_non_zero_status_is_an_invocation_error_and_the_worker_stays_warm(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(
        workdir, "h.sh", "f() { if [[ $1 == 1 ]]; then echo broke >&2; return 7; fi; printf ok; }\n"
    )
    async with running_worker(adapter, workdir, "h.f") as worker:
        with pytest.raises(InvocationError) as info:
            await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        assert info.value.error_type == "ExitStatus"
        assert info.value.message == "function f exited with status 7; stderr tail: broke"
        assert worker.alive
        result = await worker.invoke(b"2", content_type=JSON, invocation_id="j")
        assert result.output == b"ok"


async def test_exit_status_error_names_signals_and_bounds_the_stderr_tail(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(
        workdir,
        "h.sh",
        "f() { head -c 50000 /dev/zero | tr '\\0' x >&2; echo END >&2; kill -TERM $BASHPID; }\n",
    )
    async with running_worker(adapter, workdir, "h.f") as worker:
        with pytest.raises(InvocationError) as info:
            await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        assert worker.alive
    message = info.value.message
    assert message.startswith("function f exited with status 143 (128 + SIGTERM); stderr tail: ...")
    assert message.endswith("xxxxEND")
    assert len(message.encode()) < 2300


async def test_errexit_from_the_handler_file_applies_to_invocations(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(workdir, "h.sh", "set -euo pipefail\nf() { false; printf reached; }\n")
    async with running_worker(adapter, workdir, "h.f") as worker:
        with pytest.raises(InvocationError, match="exited with status 1"):
            await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        with pytest.raises(InvocationError, match="exited with status 1"):
            await worker.invoke(b"1", content_type=JSON, invocation_id="j")
        assert worker.alive


async def test_exit_in_the_function_ends_only_that_invocation(
    adapter: BashAdapter, workdir: Path
) -> None:
    write_handler(workdir, "h.sh", "f() { printf 'bye\\n'; exit 0; }\n")
    async with running_worker(adapter, workdir, "h.f") as worker:
        for invocation in ("a", "b"):
            result = await worker.invoke(b"1", content_type=JSON, invocation_id=invocation)
            assert result.output == b"bye\n"


async def test_output_over_the_limit_is_an_invocation_error(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    async with running_worker(adapter, workdir, "funcs.big") as worker:
        at_limit = await worker.invoke(
            str(MAX_OUTPUT_BYTES).encode(), content_type=JSON, invocation_id="i"
        )
        assert len(at_limit.output) == MAX_OUTPUT_BYTES
        with pytest.raises(InvocationError) as info:
            await worker.invoke(
                str(MAX_OUTPUT_BYTES + 1).encode(), content_type=JSON, invocation_id="j"
            )
        assert info.value.error_type == "OutputTooLarge"
        assert "1048577 bytes to stdout; the limit is 1048576 bytes" in info.value.message
        assert worker.alive


async def test_invalid_input_is_refused_without_touching_the_worker(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    async with running_worker(adapter, workdir, "funcs.echo_arg") as worker:
        with pytest.raises(InvalidInput, match="not valid JSON"):
            await worker.invoke(b"{oops", content_type=JSON, invocation_id="i")
        with pytest.raises(InvalidInput, match="NUL byte"):
            await worker.invoke(b"a\x00b", content_type="text/plain", invocation_id="i")
        assert worker.alive
        result = await worker.invoke(b"[1]", content_type=JSON, invocation_id="j")
        assert result.output == b"[1]"


async def test_worker_death_during_an_invocation_is_reported(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    async with running_worker(adapter, workdir, "funcs.die") as worker:
        with pytest.raises(InvocationError) as info:
            await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        assert info.value.error_type == "WorkerExited"
        assert "exited with status -9 during the invocation" in info.value.message
        assert not worker.alive
        with pytest.raises(InvocationError, match="not running"):
            await worker.invoke(b"1", content_type=JSON, invocation_id="j")


# -- cancellation ---------------------------------------------------------------------------


def _is_dead(pid: int) -> bool:
    """True when ``pid`` is gone or a zombie (PID 1 here may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _read_fifo(path: Path) -> str:
    with path.open() as fifo:  # blocks until the function opens it for writing
        return fifo.read()


async def test_cancellation_kills_the_whole_process_group(
    adapter: BashAdapter, workdir: Path
) -> None:
    """The function's subshell and a background child it started die with the worker."""
    os.mkfifo(workdir / "started")
    write_handler(workdir, "h.sh", 'f() { sleep 1000 & echo "$BASHPID $!" > started; wait; }\n')
    async with running_worker(adapter, workdir, "h.f") as worker:
        scope = trio.CancelScope()

        async def call() -> None:
            with scope:
                await worker.invoke(b"1", content_type=JSON, invocation_id="i")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            pids = [
                int(p)
                for p in (await trio.to_thread.run_sync(_read_fifo, workdir / "started")).split()
            ]
            assert not any(_is_dead(pid) for pid in pids)
            scope.cancel()
        assert scope.cancelled_caught
        assert not worker.alive
        assert _is_dead(worker.pid)
        # SIGKILL delivery to the rest of the group is asynchronous: allow it a moment
        with trio.fail_after(5):
            while not all(_is_dead(pid) for pid in pids):  # noqa: ASYNC110
                await trio.sleep(0.01)


async def test_timeout_kills_the_worker(
    adapter: BashAdapter, workdir: Path, autojump_clock: trio.abc.Clock
) -> None:
    write_handler(workdir, "h.sh", "f() { sleep 1000; }\n")
    async with running_worker(adapter, workdir, "h.f") as worker:
        start = trio.current_time()
        with trio.move_on_after(30) as scope:
            await worker.invoke(b"1", content_type=JSON, invocation_id="i")
        assert scope.cancelled_caught
        assert trio.current_time() - start == pytest.approx(30)
        assert not worker.alive
        assert _is_dead(worker.pid)
    # the next worker for the same handler works (the shared layer starts a fresh one)
    write_handler(workdir, "h.sh", "f() { printf fresh; }\n")
    async with running_worker(adapter, workdir, "h.f") as worker:
        result = await worker.invoke(b"1", content_type=JSON, invocation_id="j")
        assert result.output == b"fresh"


async def test_aclose_is_idempotent_and_removes_the_worker(
    adapter: BashAdapter, workdir: Path, funcs: Path
) -> None:
    worker = await adapter.start_worker(
        working_dir=workdir, handler="funcs.echo_arg", env={}, run_uid="u"
    )
    assert worker.scratch_dir.is_dir()
    await worker.aclose()
    await worker.aclose()
    assert not worker.alive
    assert _is_dead(worker.pid)
    assert not worker.scratch_dir.exists()


async def test_unusable_bash_fails_registration(workdir: Path, funcs: Path) -> None:
    adapter = BashAdapter(bash=str(workdir / "no-such-bash"))
    with pytest.raises(RegistrationFailed, match="cannot prepare the bash worker: .*no-such-bash"):
        await adapter.start_worker(working_dir=workdir, handler="funcs.greet", env={}, run_uid="u")


def test_adapter_needs_bash_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BashNotFound, match="no bash executable on PATH"):
        BashAdapter()
