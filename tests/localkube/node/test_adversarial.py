"""Problems found by reviewing localkube part 2 as a user and an adversary (issue 4).

Each test here failed before its fix:

- a crash-looping container made its Pod ``Failed`` for a moment, so its ReplicaSet
  created a surplus Pod (phase must follow the restart policy);
- container logs grew without bound (880 MB in 8 s) and every crash-loop run kept its
  file (rotation by size, only the current and previous run kept);
- every repeated Event was a new object (a failing probe: one per second, forever);
- ``localkube/tcp-echo`` without a POD_IP fieldRef bound 127.0.0.1:8080, so a user's
  first Deployment crash-looped on port conflicts (``KRT_POD_IP``);
- a second dev cluster could pick an address the first listens on;
- running out of Pod addresses crashed the whole cluster;
- a ``setsid`` daemon outlived its Pod, and a descendant holding the output pipe blocked
  the Pod's deletion forever.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from lk_node_helpers import DEPLOYMENTS, PODS, SERVICES, deployment, eventually, pod, ready_pods

from localkube.cluster import ClusterConfig, ClusterHandle, serve_cluster
from localkube.controllers.events import EventRecorder
from localkube.controllers.kubeapi import ApiStatusError, Kube
from localkube.node import ipam, logs
from localkube.node.ipam import listening_addresses, parse_listening
from localkube.node.layout import PodPaths
from localkube.node.logrotate import LogLimits, RotatingLog, prune_runs
from localkube.node.logs import encode_records, follow_log
from localkube.node.process import CONTAINER_MARK_ENV, PidRecord, alive, kill_leftover_groups

CRASH = {
    "name": "main",
    "image": "localkube/python",
    "args": ["-c", "raise SystemExit(3)"],
}


async def watch_until(
    kube: Kube,
    params: dict[str, str],
    done: Any,
    *,
    create: tuple[str, dict[str, Any]],
    seconds: float = 8.0,
) -> list[dict[str, Any]]:
    """Create ``create`` and collect every Pod version a watch sees until ``done(pod)``."""
    listed = await kube.list(PODS, params)
    seen: list[dict[str, Any]] = []
    await kube.create(*create)
    with trio.fail_after(seconds):
        async for event in kube.watch(
            PODS, resource_version=listed["metadata"]["resourceVersion"], params=params
        ):
            if event["type"] in ("ADDED", "MODIFIED"):
                seen.append(event["object"])
                if done(event["object"]):
                    return seen
    raise AssertionError("watch ended")


def listing(directory: Path) -> dict[str, int]:
    """File name -> size in bytes."""
    return {p.name: p.stat().st_size for p in directory.iterdir()}


def restarts(p: dict[str, Any]) -> int:
    statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


async def test_crash_looping_pod_with_restart_always_never_turns_terminal(kube: Kube) -> None:
    """kubelet: with restartPolicy Always (or OnFailure and a failure) a Pod whose
    containers all exited stays Running; Failed/Succeeded are terminal phases."""
    seen = await watch_until(
        kube,
        {"fieldSelector": "metadata.name=crashy"},
        lambda p: restarts(p) >= 3,
        create=(PODS, pod("crashy", CRASH)),
    )
    phases = [(p.get("status") or {}).get("phase") for p in seen]
    assert "Failed" not in phases, phases
    assert "Succeeded" not in phases, phases
    assert phases[-1] == "Running"


async def test_replicaset_of_a_crash_looping_pod_creates_no_surplus_pods(kube: Kube) -> None:
    seen = await watch_until(
        kube,
        {"labelSelector": "app=crashdep"},
        lambda p: restarts(p) >= 3,
        create=(DEPLOYMENTS, deployment("crashdep", 1, CRASH)),
    )
    assert len({p["metadata"]["name"] for p in seen}) == 1


# --- bounded logs ---------------------------------------------------------------------


async def test_rotating_log_bounds_one_runs_files(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    record = b"x" * 99 + b"\n"
    async with RotatingLog(path, max_bytes=1000, max_files=3) as log:
        for _ in range(100):
            await log.write(record)
    assert listing(tmp_path) == {"0.log": 1000, "0.log.1": 1000, "0.log.2": 1000}
    # the newest records are in the current file, whole
    assert path.read_bytes().endswith(record)
    assert path.stat().st_size == 1000


async def test_rotating_log_with_one_file_truncates_and_rejects_bad_limits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "0.log"
    async with RotatingLog(path, max_bytes=10, max_files=1) as log:
        await log.write(b"123456789\n")
        await log.write(b"abc\n")
    assert listing(tmp_path) == {"0.log": 4}
    assert path.read_bytes() == b"abc\n"
    with pytest.raises(ValueError, match="max_bytes must be >= 1, got 0"):
        RotatingLog(path, max_bytes=0, max_files=1)
    with pytest.raises(ValueError, match="max_files must be >= 1, got 0"):
        LogLimits(max_files=0)


def test_prune_runs_keeps_the_current_and_previous_run(tmp_path: Path) -> None:
    for name in ("0.log", "0.log.1", "0.exited", "1.log", "1.exited", "2.log", "2.log.1"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")
    removed = prune_runs(tmp_path, keep_from=1)
    assert [p.name for p in removed] == ["0.exited", "0.log", "0.log.1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "1.exited",
        "1.log",
        "2.log",
        "2.log.1",
        "notes.txt",
    ]
    assert prune_runs(tmp_path / "missing", keep_from=5) == []


async def test_follow_log_continues_across_a_rotation(tmp_path: Path) -> None:
    container_dir = tmp_path / "c"
    container_dir.mkdir()
    path = container_dir / "0.log"
    lines = [f"line {i}".encode() for i in range(30)]
    got: list[bytes] = []

    async def follow() -> None:
        async for chunk in follow_log(tmp_path, "c", poll_interval=0.01):
            got.append(chunk)

    path.write_bytes(b"")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        async with RotatingLog(path, max_bytes=200, max_files=2) as log:
            for ln in lines:
                await log.write(encode_records("stdout", ln + b"\n", now=1.0))
                await trio.sleep(0.02)
        path.with_suffix(".exited").touch()
    assert b"".join(got) == b"".join(ln + b"\n" for ln in lines)


async def test_a_chatty_container_cannot_fill_the_disk(tmp_path: Path) -> None:
    """kubelet: container logs rotate at containerLogMaxSize, containerLogMaxFiles kept."""
    limits = LogLimits(max_bytes=64 * 1024, max_files=2)
    async with trio.open_nursery() as nursery:
        handle: ClusterHandle = await nursery.start(
            serve_cluster,
            ClusterConfig(
                state_dir=tmp_path / "state",
                backoff_initial=0.2,
                shutdown_grace=1.0,
                log_limits=limits,
            ),
        )
        kube = handle.kube
        chatty = {
            "name": "main",
            "image": "localkube/python",
            "args": [
                "-c",
                "import sys\nfor i in range(20000): sys.stdout.write(f'line {i} ' + 'x' * 100 + '\\n')\n"
                "sys.stdout.flush()\nimport time; time.sleep(60)",
            ],
        }
        p = await kube.create(PODS, pod("chatty", chatty))
        paths = PodPaths.for_pod(handle.state_dir, "default", "chatty", p["metadata"]["uid"])

        # the log exists but the rotated file count stays bounded
        async def wrote_everything() -> bool:
            try:
                data = (paths.log_dir / "main" / "0.log").read_bytes()
            except OSError:
                return False
            return b"line 19999 " in data

        await eventually(wrote_everything, what="last line logged")
        files = list((paths.log_dir / "main").iterdir())
        assert sorted(f.name for f in files) == ["0.log", "0.log.1"]
        assert sum(f.stat().st_size for f in files) <= 2 * limits.max_bytes
        # served logs: the current file, whole lines, newest last
        tail = logs.read_log(paths.log_dir, "main", tail_lines=1)
        assert tail.startswith(b"line 19999 ")
        nursery.cancel_scope.cancel()


async def test_a_crash_looping_container_keeps_only_two_runs_of_logs(
    kube: Kube, cluster: ClusterHandle
) -> None:
    seen = await watch_until(
        kube,
        {"fieldSelector": "metadata.name=crashlogs"},
        lambda p: restarts(p) >= 4,
        create=(PODS, pod("crashlogs", CRASH)),
    )
    paths = PodPaths.for_pod(cluster.state_dir, "default", "crashlogs", seen[-1]["metadata"]["uid"])
    names = {f.name for f in (paths.log_dir / "main").iterdir()}
    assert {"0.log", "1.log", "2.log"}.isdisjoint(names), names
    assert "4.log" in names or "3.log" in names
    assert len([n for n in names if n.endswith(".log")]) <= 2


# --- events -------------------------------------------------------------------------------


async def test_repeated_events_are_aggregated_into_one_object(kube: Kube) -> None:
    """client-go's EventCorrelator: a repeated Event bumps ``count`` and ``lastTimestamp``
    of the first instead of adding an object per occurrence (a failing probe every second
    would otherwise grow the store without bound)."""
    target = await kube.create(PODS, pod("evented", {"name": "c", "image": "nope/nope"}))
    recorder = EventRecorder(kube, "tester")
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        for _ in range(5):
            recorder.record(target, "Warning", "Unhealthy", "Readiness probe failed")
        recorder.record(target, "Warning", "Unhealthy", "Liveness probe failed")

        async def aggregated() -> list[dict[str, Any]] | None:
            items = (await kube.list("/api/v1/namespaces/default/events"))["items"]
            mine = [
                e
                for e in items
                if e["involvedObject"]["name"] == "evented"
                and e["reason"] == "Unhealthy"
                and e["source"].get("host") == "tester"
            ]
            counts = sorted(e.get("count") for e in mine)
            return mine if counts == [1, 5] else None

        events = await eventually(aggregated, what="two aggregated Events")
        nursery.cancel_scope.cancel()
    readiness = next(e for e in events if e["message"] == "Readiness probe failed")
    assert readiness["lastTimestamp"] >= readiness["firstTimestamp"]


# --- the test image -------------------------------------------------------------------------


async def test_tcp_echo_without_env_serves_on_its_own_pod_ip(kube: Kube) -> None:
    """A new user's first Deployment: no POD_IP fieldRef. Every replica must bind its own
    Pod address (localkube's ``KRT_POD_IP``), not all fight over 127.0.0.1:8080."""
    bare = {
        "name": "echo",
        "image": "localkube/tcp-echo",
        "ports": [{"containerPort": 8080}],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    }
    await kube.create(DEPLOYMENTS, deployment("bare", 2, bare))
    pods = await ready_pods(kube, "bare", 2)
    for p in pods:
        stream = await trio.open_tcp_stream(p["status"]["podIP"], 8080)
        async with stream:
            # greets with its Pod name (HOSTNAME) without a POD_NAME fieldRef either
            assert await stream.receive_some(100) == p["metadata"]["name"].encode() + b"\n"
        assert restarts(p) == 0


# --- two clusters side by side ----------------------------------------------------------


def test_parse_listening_reads_proc_net_tcp() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: F4C9007F:01BB 00000000:0000 0A 00000000:00000000\n"  # 127.0.201.244:443 LISTEN
        "   1: 0100007F:1F90 0200007F:C350 01 00000000:00000000\n"  # established: ignored
        "   2: 2A15007F:1B58 00000000:0000 0A 00000000:00000000\n"  # 127.0.21.42:7000 LISTEN
        "   3: garbage\n"
    )
    assert parse_listening(text) == {"127.0.201.244", "127.0.21.42"}


async def test_addresses_another_cluster_listens_on_are_not_allocated(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another dev cluster's Pod or Service proxy holds an address: ours must not take it,
    or its port binds fail (Pod crash loop, Service proxy never listening)."""
    monkeypatch.setattr(ipam, "_POD_ADDRESSES", ["127.0.5.5", "127.0.5.6"])
    monkeypatch.setattr(ipam, "_SERVICE_ADDRESSES", ["127.0.205.5", "127.0.205.6"])
    busy = []
    for ip in ("127.0.5.5", "127.0.205.5"):
        sock = trio.socket.socket()
        await sock.bind((ip, 0))
        sock.listen()
        busy.append(sock)
    try:
        assert {"127.0.5.5", "127.0.205.5"} <= listening_addresses()
        await kube.create(PODS, pod("neighbour", {"name": "c", "image": "localkube/tcp-echo"}))
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "neighbour", "namespace": "default"},
            "spec": {"selector": {"app": "neighbour"}, "ports": [{"port": 80}]},
        }
        await kube.create(SERVICES, svc)

        async def addresses() -> tuple[str, str] | None:
            p = await kube.get(f"{PODS}/neighbour")
            s = await kube.get(f"{SERVICES}/neighbour")
            pod_ip = ((p or {}).get("status") or {}).get("podIP")
            cluster_ip = ((s or {}).get("spec") or {}).get("clusterIP")
            return (pod_ip, cluster_ip) if pod_ip and cluster_ip else None

        assert await eventually(addresses, what="addresses") == ("127.0.5.6", "127.0.205.6")
    finally:
        for sock in busy:
            sock.close()


# --- processes that leave their process group -------------------------------------------

DAEMONIZE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()  # a new session: out of the container's process group
    if os.fork() == 0:
        with open("daemon.pid", "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(1)
    os._exit(0)
print("started", flush=True)
time.sleep(600)
"""


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


async def test_a_daemonized_descendant_dies_with_its_pod(
    kube: Kube, cluster: ClusterHandle
) -> None:
    """On Kubernetes a container's cgroup takes every descendant with it; here a process
    that left the container's process group (setsid) must still be killed."""
    created = await kube.create(
        PODS,
        pod(
            "daemonizer",
            {"name": "main", "image": "localkube/python", "args": ["-c", DAEMONIZE]},
            terminationGracePeriodSeconds=1,
        ),
    )
    paths = PodPaths.for_pod(cluster.state_dir, "default", "daemonizer", created["metadata"]["uid"])
    pid_file = paths.workspace / "daemon.pid"

    async def daemon_pid() -> int | None:
        return read_pid(pid_file)

    daemon = await eventually(daemon_pid, what="daemon started")
    assert alive(daemon, None)
    await kube.delete(f"{PODS}/daemonizer")
    await eventually(lambda: _gone(kube, "daemonizer"), what="Pod deleted")
    await eventually(lambda: _dead(daemon), seconds=3, what="daemon killed")


async def _gone(kube: Kube, name: str) -> bool:
    return await kube.get(f"{PODS}/{name}") is None


async def _dead(pid: int) -> bool:
    return not alive(pid, None)


async def test_leftover_cleanup_also_kills_descendants_that_left_the_group(
    tmp_path: Path,
) -> None:
    """``krt dev down`` after a crashed node: the pid file's leader is gone, but a
    daemonized descendant of the container (its own session) still runs."""
    mark = "default_x_uid/main/0"
    env = {"PATH": "/usr/bin:/bin", CONTAINER_MARK_ENV: mark}
    proc = await trio.lowlevel.open_process(["sleep", "300"], env=env, start_new_session=True)
    try:
        record = PidRecord(999_999, 999_999, 1, mark=mark)  # a leader long gone
        record.write(tmp_path / "pod" / "run" / "main.pid")
        assert read_record(tmp_path / "pod" / "run" / "main.pid") == record
        kill_leftover_groups(tmp_path)
        with trio.fail_after(3):
            await proc.wait()
        assert proc.returncode == -9
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def read_record(path: Path) -> PidRecord | None:
    return PidRecord.read(path)


async def test_rotating_log_splits_a_large_write_between_records(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    records = b"".join(f"{i:09d}\n".encode() for i in range(25))  # 25 records of 10 bytes
    async with RotatingLog(path, max_bytes=100, max_files=3) as log:
        await log.write(records)
        await log.write(b"y" * 150 + b"\n")  # longer than a file: alone in a fresh one
    assert listing(tmp_path) == {"0.log": 151, "0.log.1": 50, "0.log.2": 100}
    assert (tmp_path / "0.log.1").read_bytes() == records[200:]


# --- Pod address exhaustion and reuse -----------------------------------------------------


async def test_pod_ip_exhaustion_leaves_the_pod_pending_and_reuses_a_freed_address(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every Pod address in use a new Pod waits (the node keeps running the others)
    and starts on the address a deleted Pod frees."""
    monkeypatch.setattr(ipam, "_POD_ADDRESSES", ["127.0.6.1"])
    sleeper = {
        "name": "c",
        "image": "localkube/python",
        "args": ["-c", "import time; time.sleep(600)"],
    }
    await kube.create(PODS, pod("first", sleeper, terminationGracePeriodSeconds=0))
    await ready_pods(kube, "first", 1)
    await kube.create(PODS, pod("second", sleeper))

    async def sandbox_event() -> dict[str, Any] | None:
        items = (await kube.list("/api/v1/namespaces/default/events"))["items"]
        return next(
            (
                e
                for e in items
                if e["involvedObject"]["name"] == "second"
                and e["reason"] == "FailedCreatePodSandBox"
            ),
            None,
        )

    event = await eventually(sandbox_event, what="second Pod waiting for an address")
    assert "all 1 Pod addresses are in use" in event["message"]
    second = await kube.get(f"{PODS}/second")
    assert second is not None
    assert second["spec"]["nodeName"] == "localkube"
    assert second["status"].get("phase", "Pending") == "Pending"
    assert not second["status"].get("podIP")
    # the node survived: the first Pod is still served and can be deleted
    await kube.delete(f"{PODS}/first")
    await eventually(lambda: _gone(kube, "first"), what="first deleted")
    started = await ready_pods(kube, "second", 1)
    assert started[0]["status"]["podIP"] == "127.0.6.1"
    # a Pod deleted while it waits for an address has no processes: deleted at once
    await kube.create(PODS, pod("third", sleeper))

    async def bound() -> bool:
        p = await kube.get(f"{PODS}/third")
        return bool((p or {}).get("spec", {}).get("nodeName"))

    await eventually(bound, what="third bound")
    await kube.delete(f"{PODS}/third")
    await eventually(lambda: _gone(kube, "third"), what="waiting Pod deleted")


ESCAPE = (
    "import subprocess, time\n"
    "subprocess.Popen(['/usr/bin/env', '-i', '/usr/bin/setsid', '/bin/sh', '-c',"
    " 'echo $$$$ > daemon.pid; exec /bin/sleep 300'])\n"  # $$ -> $ (Kubernetes args)
    "time.sleep(600)\n"
)


async def test_a_descendant_holding_the_log_pipe_cannot_block_pod_deletion(
    kube: Kube, cluster: ClusterHandle
) -> None:
    """A descendant that escapes both the process group and the mark (clean environment)
    keeps the container's stdout open: the node must not wait for end of file forever, and
    the container's init takes it down with the container (issue 6)."""
    created = await kube.create(
        PODS,
        pod(
            "escaper",
            {"name": "main", "image": "localkube/python", "args": ["-c", ESCAPE]},
            terminationGracePeriodSeconds=1,
        ),
    )
    paths = PodPaths.for_pod(cluster.state_dir, "default", "escaper", created["metadata"]["uid"])

    async def daemon_pid() -> int | None:
        return read_pid(paths.workspace / "daemon.pid")

    daemon = await eventually(daemon_pid, what="escaped daemon started")
    try:
        await kube.delete(f"{PODS}/escaper")
        await eventually(lambda: _gone(kube, "escaper"), seconds=5, what="Pod deleted")
        await eventually(lambda: _dead(daemon), seconds=3, what="escaped daemon killed")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)


# --- one 403 must not cut every other request ---------------------------------------------


async def test_a_forbidden_answer_does_not_cut_the_other_watches(kube: Kube) -> None:
    """kr8s re-authenticates on 401/403 by closing its HTTP session, which cut every
    watch and in-flight request of the node and the controllers. A 403 is routine (an
    Event or Pod written into a terminating namespace): the pods of a deleted namespace
    then stayed Terminating forever, their final delete cut mid-flight."""
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "held"}},
    )
    held_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hold", "namespace": "held", "finalizers": ["test.io/hold"]},
    }
    await kube.create("/api/v1/namespaces/held/configmaps", held_cm)
    await kube.delete("/api/v1/namespaces/held")
    listed = await kube.list(PODS)
    seen: list[str] = []
    ended: list[str] = []

    async def watch_pods() -> None:
        try:
            async for event in kube.watch(
                PODS, resource_version=listed["metadata"]["resourceVersion"]
            ):
                seen.append(event["object"]["metadata"]["name"])
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            ended.append(repr(exc))
        else:
            ended.append("stream ended")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_pods)
        await trio.sleep(0.2)
        with pytest.raises(ApiStatusError) as info:
            await kube.create(
                "/api/v1/namespaces/held/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}},
            )
        assert info.value.code == 403
        await kube.create(PODS, pod("after403", {"name": "c", "image": "nope/nope"}))

        async def saw_it() -> bool:
            return "after403" in seen

        await eventually(saw_it, seconds=3, what="the watch still running")
        assert ended == []
        nursery.cancel_scope.cancel()
    await kube.merge_patch(
        "/api/v1/namespaces/held/configmaps/hold", {"metadata": {"finalizers": []}}
    )
