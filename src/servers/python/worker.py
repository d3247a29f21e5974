"""The warm worker process: imports one handler once, then serves calls over pipes.

Runs as ``python -c <bootstrap> <handler> <max output bytes>`` in the registration's
working directory (see :mod:`servers.python.adapter`). Imports only cheap standard-library
modules (no trio, not even ``typing``), so it starts in about 25 ms and stays near 11 MiB.

Pipes: frames arrive on the original stdin and leave on the original stdout (both are
duplicated to private descriptors first). Descriptor 0 then reads ``/dev/null``, and
descriptors 1 and 2 both become one private pipe, so nothing the handler or its children
write at the descriptor level can corrupt the protocol. ``sys.stdout`` and ``sys.stderr``
become line-buffered frame writers, and a reader thread forwards the pipe's lines as
``STDERR`` frames: everything the handler prints, through Python or through a descriptor (C
code, child processes), reaches the server's structured log tagged with the Run UID and
invocation ID, never the output and never a raw line in the server's JSON log stream.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import sys
import threading
from collections.abc import Callable

from servers.python import framing

_MAX_TEXT = 4000
#: printed text is sent in frames of at most this many characters (at most 1 MiB of UTF-8),
#: so no amount of printing can exceed the frame limit and break the protocol.
_LOG_CHUNK_CHARS = 256 * 1024


class _Channel:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        # buffered: a frame's header and body usually arrive together and are read with one
        # system call instead of two
        self._in = os.fdopen(read_fd, "rb")
        self._out = write_fd
        # handler threads may print while the main thread answers: one frame at a time
        self._lock = threading.Lock()

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        view = memoryview(framing.encode(kind, payload))
        with self._lock:
            while view:
                view = view[os.write(self._out, view) :]

    def _read_exactly(self, n: int) -> bytes | None:
        data = self._in.read(n)  # a buffered read returns n bytes unless the pipe ends first
        return data if len(data) == n else None

    def receive(self) -> tuple[bytes, bytes] | None:
        header = self._read_exactly(framing.HEADER.size)
        if header is None:
            return None
        (size,) = framing.HEADER.unpack(header)
        if not 1 <= size <= framing.MAX_FRAME_BYTES:
            raise SystemExit(f"protocol error: frame of {size} bytes")
        body = self._read_exactly(size)
        if body is None:
            return None
        return body[:1], body[1:]


class _FrameWriter:
    """A minimal text stream that forwards complete lines as log frames."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, channel: _Channel, kind: bytes) -> None:
        self._channel = channel
        self._kind = kind
        self._pending = ""
        self._lock = threading.Lock()
        self.buffer = _BinaryWriter(self)

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            if "\n" in self._pending:
                head, _, self._pending = self._pending.rpartition("\n")
                self._send(head)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._pending = self._pending, ""
        if text:
            self._send(text)

    def _send(self, text: str) -> None:
        for start in range(0, len(text), _LOG_CHUNK_CHARS):
            chunk = text[start : start + _LOG_CHUNK_CHARS]
            self._channel.send(self._kind, chunk.encode("utf-8", "replace"))

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 2


class _BinaryWriter:
    """``sys.stdout.buffer`` for handlers that write bytes."""

    def __init__(self, text: _FrameWriter) -> None:
        self._text = text

    def write(self, data: bytes) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


class _RawOutput:
    """Descriptors 1 and 2 of the worker: one pipe whose lines become ``STDERR`` frames.

    A daemon thread forwards whatever arrives while the handler runs (so a child process can
    write any amount without blocking on a full pipe); :meth:`flush`, called before a call's
    result is sent, forwards what is left under the same lock, so every line written during
    a call is logged with that call's invocation ID.
    """

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self._fd = read_fd
        self._lock = threading.Lock()
        self._pending = b""
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        try:
            open_ = True
            while open_:
                poller.poll()
                with self._lock:
                    open_ = self._forward()
        except OSError:  # the server closed the protocol pipe: the worker is going away
            return

    def _forward(self) -> bool:
        """Send the complete lines available now (caller holds the lock).

        Returns:
            False once every writer has closed the pipe (the handler closed descriptors 1
            and 2 and no child holds them): nothing more can arrive.
        """
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            self._pending += data
            head, newline, rest = self._pending.rpartition(b"\n")
            if newline:
                self._channel.send(framing.STDERR, head)
                self._pending = rest
            while len(self._pending) > _LOG_CHUNK_CHARS:
                self._channel.send(framing.STDERR, self._pending[:_LOG_CHUNK_CHARS])
                self._pending = self._pending[_LOG_CHUNK_CHARS:]

    def flush(self) -> None:
        """Send everything written so far, a last partial line included (main thread)."""
        with self._lock:
            self._forward()
            if self._pending:
                self._channel.send(framing.STDERR, self._pending)
                self._pending = b""


def _summary(exc: BaseException) -> str:
    """Exception line(s) first, then the innermost frames, within ``_MAX_TEXT`` characters."""
    import traceback  # only on failure: keeps the worker's start-up lean

    only = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    own = __file__
    user = [f for f in frames if f.filename != own and not f.filename.startswith("<frozen")]
    tb = "".join(traceback.format_list(user[-8:])).rstrip()
    text = only if not tb else f"{only}\nTraceback (most recent call last, innermost frames):\n{tb}"
    if len(text) > _MAX_TEXT:
        text = text[: _MAX_TEXT - 15] + " ...[truncated]"
    return text


def _load(handler: str) -> Callable[[object], object]:
    module_name, _, attr = handler.rpartition(".")
    module = importlib.import_module(module_name)
    try:
        function: object = getattr(module, attr)
    except AttributeError:
        raise AttributeError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(function):
        raise TypeError(f"{handler} is a {type(function).__name__}, not a callable")
    return function


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value (RFC 8259)")


# built once: json.loads/json.dumps with options build a new decoder/encoder on every call
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _parse_input(payload: bytes) -> object:
    """Decode an invocation input as strict JSON (RFC 8259): UTF-8, no NaN or Infinity.

    ``json.loads`` alone would also take UTF-16/32 bytes and ``NaN``/``Infinity``, which no
    other kruntimes component (gateway, Bash Runtime) accepts as JSON.

    Raises:
        ValueError: not UTF-8, not one JSON text, or nested too deeply to parse.
    """
    text = payload.decode("utf-8")
    if text.startswith("\ufeff"):  # as json.loads refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nesting is too deep to parse") from None


def _call(
    channel: _Channel,
    raw: _RawOutput,
    function: Callable[[object], object],
    payload: bytes,
    max_output: int,
) -> None:
    # an empty input is passed as None (JSON null)
    try:
        argument = _parse_input(payload) if payload else None
    except ValueError as exc:
        channel.send(framing.BAD_INPUT, f"input is not valid JSON: {exc}"[:_MAX_TEXT].encode())
        return
    try:
        result = function(argument)
    except BaseException as exc:  # the handler's failure is this invocation's result
        if isinstance(exc, KeyboardInterrupt):
            raise
        import traceback

        sys.stderr.write("".join(traceback.format_exception(exc)))
        _flush(raw)
        error = {"type": type(exc).__name__, "message": str(exc)[:_MAX_TEXT]}
        channel.send(framing.ERROR, json.dumps(error).encode())
        return
    _flush(raw)
    try:
        output = _ENCODER.encode(result).encode()
    except (TypeError, ValueError) as exc:
        message = f"the return value is not JSON-serialisable: {exc}"[:_MAX_TEXT]
        channel.send(framing.ERROR, json.dumps({"type": "TypeError", "message": message}).encode())
        return
    if len(output) > max_output:
        message = f"the JSON output is {len(output)} bytes; the limit is {max_output}"
        channel.send(
            framing.ERROR, json.dumps({"type": "OutputTooLarge", "message": message}).encode()
        )
        return
    if isinstance(result, dict) and isinstance(result.get("outputs"), dict):
        channel.send(framing.OUTPUTS, json.dumps(result["outputs"]).encode())
    channel.send(framing.RESULT, output)


def _flush(raw: _RawOutput) -> None:
    """Send what was printed so far, before the frame that ends a load or a call."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a handler may have replaced the stream with anything
            pass
    raw.flush()


def main() -> None:
    """Load the handler ``sys.argv[1]``; serve calls until stdin closes.

    ``sys.argv[2]`` is the output limit in bytes.
    """
    handler = sys.argv[1]
    max_output = int(sys.argv[2])
    channel = _Channel(os.dup(0), os.dup(1))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    raw = _RawOutput(channel)
    sys.stdout = _FrameWriter(channel, framing.STDOUT)  # type: ignore[assignment]
    sys.stderr = _FrameWriter(channel, framing.STDERR)  # type: ignore[assignment]
    if "" in sys.path:
        sys.path.remove("")
    sys.path.insert(0, os.getcwd())
    try:
        function = _load(handler)
    except BaseException as exc:
        _flush(raw)
        channel.send(framing.LOAD_FAILED, _summary(exc).encode("utf-8", "replace"))
        raise SystemExit(1) from None
    _flush(raw)
    channel.send(framing.READY)
    while (frame := channel.receive()) is not None:
        kind, payload = frame
        if kind == framing.CALL:
            _call(channel, raw, function, payload, max_output)
    raise SystemExit(0)
