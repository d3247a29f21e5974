"""The Python language adapter: handlers are ``module.function``, workers are warm processes.

One persistent worker process per registration (:mod:`servers.python.worker`) imports the
handler's module once; each invocation is a frame round trip over its pipes (seed 002,
"Built-in Runtime Requirements"; issue 2). A cancelled invocation (timeout, unregister)
kills the worker's process group before the cancellation propagates.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

import servers
from krt.api.outputs import validate_outputs
from servers.common import limits
from servers.common.adapter import (
    FunctionWorker,
    InvalidInput,
    InvocationError,
    InvokeResult,
    RegistrationFailed,
)
from servers.common.executions import minimal_env
from servers.common.validation import bound_text, is_json_media_type, valid_text
from servers.python import framing
from servers.python.handler_log import HandlerOutputLog

log = logging.getLogger("servers.python")

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_HANDLER_RE = re.compile(rf"{_IDENT}(\.{_IDENT})+")
#: where the ``servers`` package lives, so the worker finds it even without an install.
_PACKAGE_ROOT = str(Path(servers.__file__).resolve().parent.parent)
_BOOTSTRAP = (
    "import sys\n"
    f"sys.path.append({_PACKAGE_ROOT!r})\n"
    "from servers.python.worker import main\n"
    "main()\n"
)


class _FrameReader:
    """Reads frames from a trio receive stream, keeping leftovers between calls."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def _fill(self, n: int) -> bool:
        while len(self._buffer) < n:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                return False
            self._buffer += chunk
        return True

    async def receive(self) -> tuple[bytes, bytes] | None:
        """Return (kind, payload), or None at end of stream."""
        if not await self._fill(framing.HEADER.size):
            return None
        (size,) = framing.HEADER.unpack_from(self._buffer)
        if not 1 <= size <= framing.MAX_FRAME_BYTES:
            raise InvocationError("ProtocolError", f"the worker sent a frame of {size} bytes")
        end = framing.HEADER.size + size
        if not await self._fill(end):
            return None
        body = bytes(self._buffer[framing.HEADER.size : end])
        del self._buffer[:end]
        return body[:1], body[1:]


class PythonWorker:
    """A warm worker process serving one registration (implements ``FunctionWorker``)."""

    def __init__(self, process: trio.Process, *, run_uid: str, handler: str) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._reader = _FrameReader(process.stdout)
        self._handler = handler
        self._broken = False
        self._output_log = HandlerOutputLog(run_uid)

    @property
    def pid(self) -> int:
        """The worker's process ID (also its process group ID)."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """False once the worker exited, was killed or broke the protocol."""
        return not self._broken and self._process.returncode is None

    def _log_output(self, kind: bytes, payload: bytes) -> None:
        self._output_log.write("stdout" if kind == framing.STDOUT else "stderr", payload)

    async def _receive(self) -> tuple[bytes, bytes] | None:
        """The next frame; a malformed one marks the worker broken (it is never trusted again)."""
        try:
            return await self._reader.receive()
        except InvocationError:
            self._broken = True
            raise

    async def _kill_and_reap(self) -> None:
        """SIGKILL the process group and reap the worker (shielded: runs while cancelled)."""
        self.kill()
        with trio.CancelScope(shield=True):
            await self._process.wait()

    async def wait_ready(self) -> None:
        """Wait for the handler to be imported.

        Raises:
            RegistrationFailed: the import failed, or the worker exited first.
        """
        self._output_log.start("")
        try:
            await self._wait_ready()
        except InvocationError as exc:
            raise RegistrationFailed(bound_text(f"{exc.error_type}: {exc.message}")) from None
        finally:
            self._output_log.finish()

    async def _wait_ready(self) -> None:
        while True:
            frame = await self._receive()
            if frame is None:
                code = await self._process.wait()
                raise RegistrationFailed(
                    f"the Python worker exited with status {code} before loading {self._handler}"
                )
            kind, payload = frame
            if kind == framing.READY:
                return
            if kind == framing.LOAD_FAILED:
                raise RegistrationFailed(
                    bound_text(
                        f"cannot load handler {self._handler}: {payload.decode('utf-8', 'replace')}"
                    )
                )
            if kind in (framing.STDOUT, framing.STDERR):
                self._log_output(kind, payload)

    async def invoke(
        self, payload: bytes, *, content_type: str, invocation_id: str
    ) -> InvokeResult:
        """Send one call and read its result; see ``FunctionWorker.invoke``.

        Raises:
            InvalidInput: non-JSON content type or invalid JSON.
            InvocationError: the handler raised, returned a non-serialisable value or bad
                outputs, or the worker died.
        """
        if not is_json_media_type(content_type):
            raise InvalidInput(
                f"content_type {content_type!r} is not supported: the Python runtime takes"
                " application/json"
            )
        if not self.alive:
            raise InvocationError("WorkerExited", "the worker is not running")
        self._output_log.start(invocation_id)
        try:
            return await self._round_trip(payload)
        except (InvalidInput, InvocationError):
            if not self.alive:  # exited or broke the protocol: the next call gets a new one
                await self._kill_and_reap()
            raise
        except BaseException:
            # cancelled (timeout, unregister, caller gone): the warm process is mid-call, so
            # its process group is killed before the cancellation propagates. Reaping it is
            # left to the caller (FunctionService reaps it right after freeing the Run's
            # in-flight slot, so the slot does not wait for the process to exit).
            self.kill()
            raise
        finally:
            self._output_log.finish()

    async def _round_trip(self, payload: bytes) -> InvokeResult:
        try:
            await self._stdin.send_all(framing.encode(framing.CALL, payload))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._broken = True
            raise InvocationError("WorkerExited", "the worker closed its input") from None
        outputs: dict[str, str] = {}
        bad_outputs = ""
        while True:
            frame = await self._receive()
            if frame is None:
                self._broken = True
                code = await self._process.wait()
                raise InvocationError(
                    "WorkerExited", f"the Python worker exited with status {code} during the call"
                )
            kind, body = frame
            if kind in (framing.STDOUT, framing.STDERR):
                self._log_output(kind, body)
            elif kind == framing.OUTPUTS:
                try:
                    outputs = validate_outputs(json.loads(body))
                except ValueError as exc:
                    bad_outputs = str(exc)
            elif kind == framing.RESULT:
                if bad_outputs:
                    raise InvocationError("InvalidOutputs", bad_outputs)
                return InvokeResult(output=body, content_type="application/json", outputs=outputs)
            elif kind == framing.ERROR:
                error = json.loads(body)
                raise InvocationError(
                    valid_text(str(error["type"])), bound_text(str(error["message"]))
                )
            elif kind == framing.BAD_INPUT:
                raise InvalidInput(body.decode("utf-8", "replace"))
            else:
                self._broken = True
                raise InvocationError("ProtocolError", f"unexpected frame kind {kind!r}")

    async def reap(self) -> None:
        """Wait for the process of a worker killed mid-call (no-op while it is running)."""
        if self._broken:
            await self._process.wait()

    def kill(self) -> None:
        """SIGKILL the worker's process group now (synchronous, safe to repeat)."""
        self._broken = True
        if self._process.returncode is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def aclose(self) -> None:
        """Kill the worker and reap it; idempotent."""
        self.kill()
        with trio.CancelScope(shield=True):
            await self._process.wait()
            await self._stdin.aclose()


class PythonAdapter:
    """``FunctionAdapter`` for Python handlers (``module.function``, dotted packages allowed).

    Args:
        python: the interpreter for workers and tasks (default: the server's own).
    """

    name = "python"

    def __init__(self, *, python: str = sys.executable) -> None:
        self._python = python

    def handler_error(self, handler: str) -> str | None:
        """Return why ``handler`` is not ``module.function`` (identifiers joined by dots)."""
        if not _HANDLER_RE.fullmatch(handler):
            return (
                f"handler {handler!r} must be module.function (Python identifiers, dotted"
                " packages allowed)"
            )
        return None

    async def start_worker(
        self, *, working_dir: Path, handler: str, env: Mapping[str, str], run_uid: str
    ) -> FunctionWorker:
        """Start a worker and wait until it imported the handler.

        Raises:
            RegistrationFailed: import error, syntax error, missing or non-callable
                attribute (with a bounded traceback summary), or the worker could not start.
        """
        try:
            process = await trio.lowlevel.open_process(
                [self._python, "-c", _BOOTSTRAP, handler, str(limits.MAX_INVOKE_OUTPUT_BYTES)],
                cwd=str(working_dir),
                env=minimal_env(env, home=working_dir),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise RegistrationFailed(f"cannot start the Python worker: {exc}") from None
        worker = PythonWorker(process, run_uid=run_uid, handler=handler)
        try:
            await worker.wait_ready()
        except BaseException:
            await worker.aclose()
            raise
        log.info("worker ready", extra={"run_uid": run_uid, "pid": process.pid})
        return worker

    def task_argv(self, *, entrypoint: str, args: Sequence[str]) -> list[str]:
        """``python <entrypoint> <args...>``, or ``python <args...>`` without an entrypoint.

        Raises:
            ValueError: neither an entrypoint nor args were given.
        """
        if entrypoint:
            return [self._python, entrypoint, *args]
        if not args:
            raise ValueError("a Python task needs an entrypoint or args")
        return [self._python, *args]
