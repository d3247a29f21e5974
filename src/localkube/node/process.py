"""Container processes: one init, one process group and one session per container run.

Each container run is started under its own init (:mod:`localkube.node.container_init`), the
leader of a new session (``start_new_session``); the init starts the container's main
process as the leader of a new process group, the container's group, so the node signals
the container as a whole: ``SIGTERM`` to the group, then ``SIGKILL`` after the grace period.
The pid file (``<pod-root>/run/<container>.pid``) records the main process's pid, its group
(the same number) and its start time in clock ticks since boot (``/proc/<pid>/stat``
field 22), so a later ``krt dev down`` or node start can kill a group left behind by a
crashed node without ever signalling a reused pid.

A process group does not hold everything a container starts: a descendant may call
``setsid`` (a daemon, or a Runtime Server's task) and leave it. On Kubernetes the
container's PID namespace and cgroup still take it down. Here the init is a child
subreaper outside the container's group: orphaned descendants are re-parented to it, and
when the main process exits (a SIGKILL of the whole group included) it SIGKILLs every
descendant left, whatever its session or environment, then exits like the main process
did. As a second line, every
container run also carries a mark in its environment
(``KRT_CONTAINER_RUN=<pod-dir>/<container>/<run>``), which descendants inherit unless they
clear their environment; ``krt dev down`` after a crashed node (when the init may be gone
too) kills the processes carrying it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from localkube.node import container_init

#: Environment variable marking every process of one container run (inherited).
CONTAINER_MARK_ENV = "KRT_CONTAINER_RUN"


def start_ticks(pid: int) -> int | None:
    """Return the start time of ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def alive(pid: int, ticks: int | None) -> bool:
    """Whether ``pid`` is alive, not a zombie, and (if ``ticks`` given) the same process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] == "Z":
        return False
    return ticks is None or int(fields[19]) == ticks


def group_members(pgid: int) -> list[int]:
    """Return the live (non-zombie) pids whose process group is ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to process group ``pgid``; return False if the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


@dataclass(frozen=True)
class PidRecord:
    """What a pid file holds. ``start_ticks`` guards against pid reuse; ``mark`` is the
    run's :data:`CONTAINER_MARK_ENV` value (None in files of older nodes)."""

    pid: int
    pgid: int
    start_ticks: int | None
    mark: str | None = None

    def write(self, path: Path) -> None:
        """Write the record to ``path`` (atomic rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> PidRecord | None:
        """Read a pid file; None if missing or unreadable."""
        try:
            raw = json.loads(path.read_text())
            mark = raw.get("mark")
            return cls(
                int(raw["pid"]),
                int(raw["pgid"]),
                raw.get("start_ticks"),
                str(mark) if mark is not None else None,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def leader_alive(self) -> bool:
        """Whether the recorded process (same start time) still runs."""
        return alive(self.pid, self.start_ticks)


def marked_processes(mark: str) -> list[int]:
    """Return the live pids whose environment has ``KRT_CONTAINER_RUN=<mark>``.

    Reads ``/proc/<pid>/environ`` of every process (blocking, in-memory procfs reads);
    processes of other users (unreadable) are skipped.
    """
    needle = f"{CONTAINER_MARK_ENV}={mark}".encode()
    out = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and alive(int(entry), None):
            out.append(int(entry))
    return out


def kill_marked(mark: str) -> list[int]:
    """SIGKILL every process carrying the container-run ``mark``; return their pids."""
    killed = []
    for pid in marked_processes(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(pid)
    return killed


def kill_leftover_groups(pod_roots_dir: Path) -> list[int]:
    """SIGKILL every container process group recorded under ``pod_roots_dir`` that is alive.

    Used at node start and by ``krt dev down`` after the node process is gone. A group is
    killed only if its recorded leader is still the same process (start time matches);
    groups whose leader exited but members remain are found by process group id only if
    the leader's pid is not reused by another group leader. Processes carrying a record's
    container-run mark (descendants that left the group) are killed too.

    Returns:
        The process group ids signalled.
    """
    killed: list[int] = []
    if not pod_roots_dir.is_dir():
        return killed
    for pid_file in pod_roots_dir.glob("*/run/*.pid"):
        rec = PidRecord.read(pid_file)
        if rec is None:
            continue
        if rec.leader_alive() or (not alive(rec.pgid, None) and group_members(rec.pgid)):
            if signal_group(rec.pgid, signal.SIGKILL):
                killed.append(rec.pgid)
        if rec.mark:
            kill_marked(rec.mark)  # descendants that left the group (setsid daemons)
        pid_file.unlink(missing_ok=True)
    return killed


@dataclass(frozen=True)
class ContainerProcess:
    """A running container: its init (the process the node waits for) and its main process.

    Attributes:
        init: the init process (:mod:`localkube.node.container_init`), outside the
            container's process group; it exits the way the main process did once every
            other process of the container is gone. Its stdout/stderr are the container's.
        main_pid: the container's main process (what the image runs; ``containerID``),
            leader of the container's process group.
    """

    init: trio.Process
    main_pid: int

    @property
    def pgid(self) -> int:
        """The container's process group (led by the main process)."""
        return self.main_pid

    def kill(self) -> None:
        """SIGKILL the container's process group; the init then takes down the descendants
        that left it (their own sessions) and exits. Synchronous (safe while cancelled)."""
        signal_group(self.pgid, signal.SIGKILL)


async def open_container_process(
    argv: list[str], *, env: Mapping[str, str], cwd: Path
) -> ContainerProcess:
    """Start ``argv`` under a container init, as a new session, with stdout/stderr piped.

    Waits until the init reports the main process started (milliseconds).

    Args:
        argv: program and arguments; a bare program name is looked up on ``env["PATH"]``.
        env: the complete environment of the process.
        cwd: working directory.

    Raises:
        OSError: if the program cannot be executed (FileNotFoundError, PermissionError, with
            the errno the init saw), or the init did not start.
    """
    read_fd, write_fd = os.pipe()
    try:
        init = await trio.lowlevel.open_process(
            [sys.executable, "-I", "-S", container_init.__file__, str(write_fd), *argv],
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(write_fd,),
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    report = b""
    try:
        async with trio.lowlevel.FdStream(read_fd) as stream:
            while chunk := await stream.receive_some(4096):
                report += chunk
    except BaseException:  # cancelled before the report: leave nothing running
        signal_group(init.pid, signal.SIGKILL)
        raise
    words = report.decode(errors="replace").split(maxsplit=2)
    if len(words) >= 2 and words[0] == "pid" and words[1].isdigit():
        return ContainerProcess(init, int(words[1]))
    await init.wait()  # it exits at once: the program could not be started
    for pipe in (init.stdout, init.stderr):
        if pipe is not None:
            await pipe.aclose()
    if len(words) >= 2 and words[0] == "error" and words[1].isdigit():
        code = int(words[1]) or errno.ENOEXEC
        raise OSError(code, words[2] if len(words) > 2 else os.strerror(code), argv[0])
    raise OSError(errno.ECHILD, f"the container init exited without starting {argv[0]!r}")
