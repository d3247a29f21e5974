"""Task processes and their output, watched by one trio task through one epoll set.

A task execution used to cost four trio tasks and two nurseries (the run, a drain per pipe,
a cancel watcher), each pipe a :class:`trio.lowlevel.FdStream` (two ``fcntl`` calls to open,
one to close) and each descriptor a registration in trio's epoll. Issue 6: for the
one-line tasks of the task-Run benchmark that machinery cost the Runtime Server more CPU
than starting the process. Here every execution's pipes and pidfd sit in one epoll set of
:class:`ChildWatcher`, whose single task wakes when any of them is ready and serves
everything that is, so an execution is one trio task (its run) and a few dictionary entries.

Processes start with ``subprocess.Popen`` on the event loop: CPython uses ``vfork`` on Linux
for these arguments, so the loop pauses only until the child calls ``exec`` and the parent
runs again (0.3-0.5 ms idle, a few ms on a busy machine). A worker thread would keep the loop
serving meanwhile (CPython 3.11 releases the GIL around ``vfork``), but measured on the
task-Run benchmark it cost the server 0.25-0.3 ms more CPU per process (hand-off and GIL
switches, +12-15% of its CPU per Run) and did not lower the complete latency. The exit is
seen through a pidfd (Linux >= 5.3), readable once the child has exited, so reaping it never
blocks. Linux only, as the Runtime Servers are.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

import trio

__all__ = ["ChildWatcher", "OutputSink", "WatchedChild"]

#: bytes read from one pipe per wakeup (the pipe buffer's default size).
_READ_CHUNK: Final = 65536


class OutputSink(Protocol):
    """Where a pipe's bytes go (e.g. :class:`servers.common.bounded.BoundedBuffer`)."""

    def write(self, chunk: bytes) -> None:
        """Take the next ``chunk`` of the stream."""
        ...


class WatchedChild:
    """A started task process: its exit and its output pipes, served by a :class:`ChildWatcher`.

    Attributes:
        pid: the process ID; also its process group and session ID (``start_new_session``).
        exited: set once the process has exited and been reaped (:attr:`returncode` is set).
        drained: set once both pipes reached end of file or were closed by
            :meth:`close_pipes` (every byte written before then is in the sinks).
    """

    def __init__(
        self,
        watcher: ChildWatcher,
        popen: subprocess.Popen[bytes],
        pidfd: int,
        pipes: Mapping[int, OutputSink],
    ) -> None:
        self.pid = popen.pid
        self.exited = trio.Event()
        self.drained = trio.Event()
        self._watcher = watcher
        self._popen = popen
        self._pidfd = pidfd
        self._pipes = dict(pipes)

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal), else ``None``."""
        return self._popen.returncode

    def close_pipes(self) -> None:
        """Stop reading: close whatever pipe is still open (output after this is lost).

        Used once the process exited and its group was killed, when something outside the
        group still holds a pipe open; also on every exit path. Idempotent.
        """
        for fd in list(self._pipes):
            self._close_pipe(fd)

    async def reap_unwatched(self) -> int:
        """Wait for the exit without the watcher's task (which may be cancelled); reap it.

        For shutdown paths: the caller has killed the process group and shields this wait.

        Returns:
            The return code.
        """
        if self._popen.returncode is None:
            self._watcher.forget(self._pidfd)
            await trio.lowlevel.wait_readable(self._pidfd)
            self._on_exit()
        return self._popen.returncode  # type: ignore[return-value]  # set by _on_exit

    def _on_exit(self) -> None:
        if self._popen.returncode is not None:
            return
        self._popen.wait()  # the pidfd is readable: a zombie by now, so this never blocks
        self._watcher.forget(self._pidfd)
        os.close(self._pidfd)
        self.exited.set()

    def _on_readable(self, fd: int) -> None:
        sink = self._pipes.get(fd)
        if sink is None:
            return
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO and the like: nothing more will come
            chunk = b""
        if chunk:
            sink.write(chunk)
        else:
            self._close_pipe(fd)

    def _close_pipe(self, fd: int) -> None:
        if self._pipes.pop(fd, None) is None:
            return
        self._watcher.forget(fd)
        os.close(fd)
        if not self._pipes:
            self.drained.set()


class ChildWatcher:
    """Starts task processes and serves their pipes and exits from one trio task.

    The task runs while some child has a pipe open or is not reaped yet, in ``nursery``;
    it starts with the first :meth:`spawn` after an idle spell and ends when nothing is
    left to watch (so a nursery holding only finished executions can close). The epoll
    set and ``/dev/null`` (every task's stdin) are opened for each such spell.

    Args:
        nursery: runs the watching task; it must outlive the children's users.
    """

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._handlers: dict[int, Callable[[], None]] = {}
        self._epoll: select.epoll | None = None
        self._devnull = -1
        self._serving = False
        #: cancelled when nothing is left to watch, so the task stops waiting and ends.
        self._wait_scope: trio.CancelScope | None = None

    @property
    def watching(self) -> int:
        """Descriptors watched now (pipes and pidfds of live or undrained children)."""
        return len(self._handlers)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdout: OutputSink,
        stderr: OutputSink,
    ) -> WatchedChild:
        """Start ``argv`` in its own session, stdin from /dev/null, stdout/stderr piped.

        Args:
            argv: the program and its arguments (``argv[0]`` a path, or a name looked up on
                the ``PATH`` of ``env``).
            cwd: the working directory.
            env: the complete environment of the process.
            stdout: receives the process's stdout, chunk by chunk, as it arrives.
            stderr: receives its stderr likewise.

        Returns:
            The started child; the watcher reads its pipes and notices its exit.

        Raises:
            OSError: the process could not be started (missing program, bad ``cwd``, no
                file descriptors left); no descriptor of the child is left open.
        """
        if self._epoll is None:
            self._open()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            popen = subprocess.Popen(  # noqa: ASYNC220 - vfork: see the module docstring
                argv,
                cwd=cwd,
                env=env,
                stdin=self._devnull,
                stdout=out_write,
                stderr=err_write,
                start_new_session=True,
            )
        except BaseException:
            os.close(out_read)
            os.close(err_read)
            if not self._serving:
                self._close()  # the first child of a spell failed: keep nothing open
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        try:
            pidfd = os.pidfd_open(popen.pid)
        except OSError:
            _kill_group(popen.pid)
            popen.wait()
            os.close(out_read)
            os.close(err_read)
            if not self._serving:
                self._close()
            raise
        child = WatchedChild(self, popen, pidfd, {out_read: stdout, err_read: stderr})
        try:
            for fd in (out_read, err_read):
                os.set_blocking(fd, False)
                self._watch(fd, functools.partial(child._on_readable, fd))
            self._watch(pidfd, child._on_exit)
        except BaseException:  # e.g. ENOMEM from epoll: leave no process or descriptor behind
            _kill_group(popen.pid)
            child.close_pipes()
            self.forget(pidfd)
            popen.wait()
            os.close(pidfd)
            if not self._serving:
                self._close()
            raise
        return child

    def forget(self, fd: int) -> None:
        """Stop watching ``fd`` (call it before closing ``fd``); unknown ones are ignored."""
        if self._handlers.pop(fd, None) is None:
            return
        if self._epoll is not None:
            self._epoll.unregister(fd)
        if not self._handlers and self._wait_scope is not None:
            self._wait_scope.cancel()

    def _open(self) -> None:
        self._epoll = select.epoll()
        try:
            self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self._epoll.close()
            self._epoll = None
            raise

    def _close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
            os.close(self._devnull)
            self._epoll = None
            self._devnull = -1

    def _watch(self, fd: int, handler: Callable[[], None]) -> None:
        assert self._epoll is not None
        self._epoll.register(fd, select.EPOLLIN)
        self._handlers[fd] = handler
        if not self._serving:
            self._serving = True
            self._nursery.start_soon(self._serve, self._epoll)

    async def _serve(self, epoll: select.epoll) -> None:
        """Serve ready descriptors while any is watched; close the epoll set at the end."""
        try:
            while self._handlers:
                with trio.CancelScope() as self._wait_scope:
                    await trio.lowlevel.wait_readable(epoll.fileno())
                for fd, _events in epoll.poll(0):
                    handler = self._handlers.get(fd)
                    if handler is not None:
                        handler()
        finally:
            # nothing is watched any more, or the nursery is cancelled (shutdown: children
            # still running are reaped by their owners with WatchedChild.reap_unwatched)
            self._serving = False
            self._wait_scope = None
            self._handlers.clear()
            trio.lowlevel.notify_closing(epoll.fileno())
            self._close()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
