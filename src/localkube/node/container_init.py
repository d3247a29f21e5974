"""The init process of one container run: a child subreaper that takes every descendant down.

On Kubernetes a container's processes live in its own PID namespace (and cgroup): when the
container's main process dies, the kernel kills everything else in the namespace, however
it was started. A local node has no namespace, and a process group is not enough: a
descendant can start its own session (``setsid``, as the Runtime Servers do for every task)
and clear its environment, so neither the group signal nor the environment mark
(:data:`localkube.node.process.CONTAINER_MARK_ENV`) reaches it. Issue 6: killing the Runtime
Server container left the task processes it had started running.

So the node starts each container as::

    python -I -S container_init.py REPORT_FD PROGRAM [ARG...]

and this script (standard library only, no site packages, so it starts in milliseconds):

1. makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux >= 3.4): any
   descendant orphaned by its parent's death is re-parented to it instead of to PID 1, so
   it keeps hold of every process of the container, new sessions included;
2. starts ``PROGRAM`` (looked up on the container's ``PATH``) as its child, as the leader of a
   new process group (the container's group, which the node signals), with the container's
   environment, working directory and pipes;
3. writes ``pid <main pid>`` (or ``error <errno> <message>`` when the program cannot be
   executed) to the file descriptor ``REPORT_FD`` and closes it;
4. reaps orphans until the main process exits; then SIGKILLs every remaining descendant
   (re-scanning until it has no child left, as killed processes hand their own children to
   it) and exits the way the main process did (same exit code, or the same signal).

Signals: the node signals the container's process group (the main process's), which this
process is not in, so even a SIGKILL of the whole group leaves it alive to take down the
descendants that left the group. A stop signal sent to this process itself is forwarded to
the container's group (the handler is reset by ``exec`` in the child).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import time

#: prctl option: make this process the reaper of its orphaned descendants.
PR_SET_CHILD_SUBREAPER = 36
#: Signals forwarded to the main process (the node uses SIGTERM and SIGKILL).
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
#: Seconds between scans while waiting for killed descendants to be reaped.
REAP_POLL_SECONDS = 0.005


def become_subreaper() -> None:
    """Make this process the child subreaper of its descendants.

    Raises:
        OSError: ``prctl`` failed (not Linux, or a kernel without the option).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(errno)}")


def children_of(pid: int) -> list[int]:
    """Return the pids whose parent is ``pid`` (zombies included), from ``/proc``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def kill_descendants() -> None:
    """SIGKILL every descendant of this process and reap them all.

    Killing a child hands its own children to this process (the subreaper), so the scan
    repeats until ``waitpid`` reports no child at all.
    """
    me = os.getpid()
    while True:
        for pid in children_of(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if reaped == 0:
            time.sleep(REAP_POLL_SECONDS)


def exit_like(status: int) -> None:
    """Exit the way a process with wait ``status`` ended (never returns)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of the init itself
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not terminate (should not happen)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> int:
    """Run the container's program under this init; see the module docstring."""
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: container_init.py REPORT_FD PROGRAM [ARG...]", file=sys.stderr)
        return 2
    report_fd, program = int(argv[0]), argv[1:]
    main_pid = 0

    def forward(signum: int, _frame: object) -> None:
        if main_pid:
            try:
                os.killpg(main_pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        become_subreaper()
        child = subprocess.Popen(program, close_fds=True, process_group=0)
    except OSError as exc:
        _report(report_fd, f"error {exc.errno or 0} {exc.strerror or exc}")
        return 127
    main_pid = child.pid
    _report(report_fd, f"pid {main_pid}")
    while True:
        pid, status = os.wait()
        if pid == main_pid:
            break
    kill_descendants()
    exit_like(status)
    return 0  # pragma: no cover - exit_like never returns


def _report(fd: int, line: str) -> None:
    """Write ``line`` to the node's report pipe and close it (a vanished node is ignored)."""
    try:
        os.write(fd, line.encode() + b"\n")
    except OSError:
        pass  # the node is gone; the program still runs under this init
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
