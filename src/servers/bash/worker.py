"""The warm Bash worker of one registration (seed 002, "Built-in Runtime Requirements").

Design. One long-lived ``bash`` process per registration runs the fixed script ``driver.sh``
in the registered working directory, in a session (and process group) of its own. At start
it sources the handler file once and checks the function with ``declare -F``; then it serves
invocations over its stdin/stdout:

* request (server to worker, stdin): ``LENGTH\\n`` then exactly LENGTH payload bytes. The
  driver reads them with ``read -r -N LENGTH`` (under ``LC_ALL=C``, so LENGTH counts bytes)
  into a variable and calls ``"$function" "$payload"``: the payload is data from end to end;
  neither it nor the handler is ever evaluated as shell source or spliced into a command
  string.
* the call runs in a subshell (one fork per invocation): variables, ``cd`` and traps set by
  one invocation do not leak into the next, while functions and variables defined when the
  file was sourced stay warm. Its stdin is ``/dev/null``; its stdout and stderr go to two
  fresh files (``out.N``, ``err.N`` for call N) in a private scratch directory, so output is
  byte-exact (no trailing-newline stripping, NUL bytes kept) and a background process left
  behind can neither hold the reply open nor write into a later call's output.
* reply (worker to server, stdout): ``done STATUS\\n`` once the subshell has exited. The server
  then reads stdout (the output, at most 1 MiB) and the tail of stderr (64 KiB, logged as JSON
  lines keyed by run UID and invocation ID, never returned as output), and unlinks both.

Registration (:mod:`servers.bash.startup`) fails with :class:`RegistrationFailed` and a
bounded summary for a missing file, a ``bash -n`` syntax error, a failing or exiting top
level, or no such function. ``set -e``/``-u``/``-x``/``-o pipefail`` turned on by the handler
file apply to each invocation, not to the driver's loop. A non-zero
function status is an :class:`InvocationError` naming the status and a bounded stderr tail; the
worker stays warm. Cancellation (timeout, drain deadline, caller gone) SIGKILLs the worker's
whole process group before it propagates, so nothing the function started survives it.

Measured on the 2-core reference machine: about 1 ms per invocation of a trivial function
(the subshell fork is about 0.45 ms of it), 3 MiB RSS per worker, about 15 ms to register.

Known limits: stderr is logged when the call returns, not streamed while it runs; stdout and
stderr are written to the scratch files in full before the limits apply (trusted code, as
everywhere in kruntimes); a background process a function leaves running keeps running (in
the worker's process group, writing to unlinked files) until the worker is cancelled or
closed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Final

import trio

from servers.bash.diagnostics import (
    STDERR_LOG_TAIL_BYTES,
    bounded,
    log_stderr,
    read_head,
    read_tail,
    remove_tree,
    status_text,
    tail_text,
)
from servers.bash.handler import BashHandler
from servers.bash.payload import check_input, output_content_type
from servers.common import limits
from servers.common.adapter import (
    InvalidInput,
    InvocationError,
    InvokeResult,
    RegistrationFailed,
)

#: largest function stdout returned as output, in bytes (the gateway's request limit).
MAX_OUTPUT_BYTES: Final = limits.MAX_INVOKE_OUTPUT_BYTES
#: protocol replies are short ("ready", "done 0"); anything longer is a broken worker.
_MAX_REPLY_BYTES: Final = 64


class _ReplyReader:
    """Reads the worker's newline-terminated replies from its stdout pipe."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def aclose(self) -> None:
        """Close the pipe."""
        await self._stream.aclose()

    async def line(self) -> str | None:
        """Return the next reply line without its newline, or None at end of file.

        Raises:
            InvocationError: the reply is longer than 64 bytes (``WorkerProtocolError``).
        """
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                reply = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return reply.decode("ascii", errors="replace")
            if len(self._buffer) > _MAX_REPLY_BYTES:
                raise InvocationError(
                    "WorkerProtocolError", f"unexpected worker reply {bytes(self._buffer)!r}"
                )
            chunk = await self._stream.receive_some(4096)
            if not chunk:
                return None
            self._buffer += chunk


class BashWorker:
    """A warm ``bash`` process serving one registration's invocations (see module docstring).

    Create it with :func:`start_bash_worker`. ``invoke`` calls never overlap (the shared
    layer guarantees one in-flight invocation per registration).
    """

    def __init__(
        self,
        *,
        process: trio.Process,
        scratch: Path,
        handler: BashHandler,
        run_uid: str,
    ) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._replies = _ReplyReader(process.stdout)
        self._scratch = scratch
        self._handler = handler
        self._run_uid = run_uid
        self._killed = False
        self._closed = False
        #: invocations sent so far; call N writes ``out.N`` and ``err.N`` (see driver.sh).
        self._calls = 0

    @property
    def pid(self) -> int:
        """The worker's process ID, which is also its process group and session ID."""
        return self._process.pid

    @property
    def scratch_dir(self) -> Path:
        """The private directory holding this worker's stdout/stderr files (removed by aclose)."""
        return self._scratch

    @property
    def alive(self) -> bool:
        """False once the worker exited or was killed."""
        return not self._killed and self._process.returncode is None

    def _kill(self) -> None:
        """SIGKILL the worker's whole process group (the worker and all it started)."""
        self._killed = True
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def _stop_after_failure(self, invocation_id: str | None) -> int:
        """Kill the group, reap the worker and log what the function wrote to stderr.

        Shielded: it runs while a cancellation is propagating. Returns the worker's exit
        status (negative for a signal).
        """
        self._kill()
        with trio.CancelScope(shield=True):
            status = await self._process.wait()
            data, size = await trio.to_thread.run_sync(
                read_tail, self._call_files()[1], STDERR_LOG_TAIL_BYTES
            )
        log_stderr(data, size, run_uid=self._run_uid, invocation_id=invocation_id)
        return status

    async def handshake(self) -> None:
        """Wait for the driver's verdict on the handler file (registration).

        Raises:
            RegistrationFailed: the file's top level failed or exited, or the function is
                not defined; the message carries a bounded tail of the worker's stderr.
        """
        try:
            reply = await self._replies.line()
        except InvocationError as exc:
            raise RegistrationFailed(bounded(exc.message)) from None
        data, size = await trio.to_thread.run_sync(
            read_tail, self._scratch / "worker.log", STDERR_LOG_TAIL_BYTES
        )
        log_stderr(data, size, run_uid=self._run_uid, invocation_id=None)
        script = self._handler.script
        detail = tail_text(data)
        suffix = f": {detail}" if detail else ""
        if reply == "ready":
            return
        if reply == "no-function":
            raise RegistrationFailed(
                bounded(
                    f"{script} does not define a function named {self._handler.function!r}"
                    f" (checked with declare -F){suffix}"
                )
            )
        if reply is not None and reply.startswith("source-failed "):
            status = reply.removeprefix("source-failed ")
            raise RegistrationFailed(bounded(f"sourcing {script} returned status {status}{suffix}"))
        status_code = await self._process.wait()
        raise RegistrationFailed(
            bounded(
                f"the bash worker exited with status {status_code} while sourcing {script}{suffix}"
            )
        )

    async def invoke(
        self, payload: bytes, *, content_type: str, invocation_id: str
    ) -> InvokeResult:
        """Call the function once with ``payload`` as its one argument.

        Args:
            payload: the input bytes (at most 1 MiB, no NUL byte; valid JSON when
                ``content_type`` is JSON or empty).
            content_type: the input's content type.
            invocation_id: for the structured stderr log.

        Returns:
            The function's stdout (at most 1 MiB) and its content type.

        Raises:
            InvalidInput: see :func:`servers.bash.payload.check_input`; the worker is
                untouched.
            InvocationError: ``ExitStatus`` (non-zero status, worker stays warm),
                ``OutputTooLarge`` (stdout over 1 MiB, worker stays warm), ``WorkerExited``
                (the worker died; ``alive`` is False) or ``WorkerProtocolError``.
            trio.Cancelled: after the worker's process group was killed.
        """
        check_input(payload, content_type=content_type)
        if not self.alive:
            raise InvocationError("WorkerExited", "the bash worker is not running")
        try:
            return await self._exchange(payload, invocation_id)
        except (InvalidInput, InvocationError):
            raise
        except BaseException:
            await self._stop_after_failure(invocation_id)
            raise

    def _call_files(self) -> tuple[Path, Path]:
        """The stdout and stderr files of the current invocation."""
        return self._scratch / f"out.{self._calls}", self._scratch / f"err.{self._calls}"

    async def _exchange(self, payload: bytes, invocation_id: str) -> InvokeResult:
        self._calls += 1
        try:
            await self._stdin.send_all(b"%d\n" % len(payload) + payload)
            reply = await self._replies.line()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            reply = None
        except InvocationError:
            await self._stop_after_failure(invocation_id)
            raise
        if reply is None or not reply.startswith("done "):
            returncode = await self._stop_after_failure(invocation_id)
            if reply is None:
                raise InvocationError(
                    "WorkerExited",
                    f"the bash worker exited with status {returncode} during the invocation",
                )
            raise InvocationError("WorkerProtocolError", f"unexpected worker reply {reply!r}")
        try:
            status = int(reply.removeprefix("done "))
        except ValueError:
            await self._stop_after_failure(invocation_id)
            raise InvocationError(
                "WorkerProtocolError", f"unexpected worker reply {reply!r}"
            ) from None
        # Read on the event loop, deliberately: both files were just written by the subshell
        # (page cache), are bounded (1 MiB head, 64 KiB tail) and a thread hop measured 0.5 ms,
        # a third of a whole invocation on the reference machine.
        output, output_size, err, err_size = self._read_results()
        log_stderr(err, err_size, run_uid=self._run_uid, invocation_id=invocation_id)
        function = self._handler.function
        if status != 0:
            tail = tail_text(err)
            raise InvocationError(
                "ExitStatus",
                bounded(
                    f"function {function} exited with {status_text(status)}"
                    + (f"; stderr tail: {tail}" if tail else "; stderr was empty")
                ),
            )
        if output_size > MAX_OUTPUT_BYTES:
            raise InvocationError(
                "OutputTooLarge",
                f"function {function} wrote {output_size} bytes to stdout; the limit is"
                f" {MAX_OUTPUT_BYTES} bytes",
            )
        return InvokeResult(output=output, content_type=output_content_type(output))

    def _read_results(self) -> tuple[bytes, int, bytes, int]:
        """Read the output head and stderr tail of the finished invocation, then unlink both.

        Unlinking matters: a background job the function left running still holds the files
        open, and its later writes must go to these (now nameless) files, never into the
        files of a later invocation.
        """
        out_path, err_path = self._call_files()
        try:
            output, output_size = read_head(out_path, MAX_OUTPUT_BYTES)
            err, err_size = read_tail(err_path, STDERR_LOG_TAIL_BYTES)
        finally:
            for path in (out_path, err_path):
                path.unlink(missing_ok=True)
        return output, output_size, err, err_size

    async def aclose(self) -> None:
        """Kill the worker's process group, reap it and delete its scratch directory.

        Idempotent; shielded from cancellation (it only waits for a SIGKILLed process).
        """
        if self._closed:
            return
        self._closed = True
        self._kill()
        with trio.CancelScope(shield=True):
            await self._stdin.aclose()
            await self._replies.aclose()
            await self._process.wait()
            await trio.to_thread.run_sync(remove_tree, self._scratch)
