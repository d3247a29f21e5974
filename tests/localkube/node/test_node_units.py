"""Pure parts of the node: images, env, back-off, probes, status, logs, addresses, volumes."""

from __future__ import annotations

import base64
import ipaddress
import os
import random
import socket
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from localkube.images import (
    VENV_BIN,
    ImageTable,
    ImageTableError,
    UnknownImageError,
    normalize_image,
)
from localkube.node.backoff import CrashBackoff, should_restart
from localkube.node.env import (
    ContainerConfigError,
    container_env,
    expand,
    referenced_objects,
    service_link_env,
)
from localkube.node.ipam import (
    POD_NETWORK,
    SERVICE_NETWORK,
    AddressesExhaustedError,
    allocate_cluster_ip,
    allocate_pod_ip,
)
from localkube.node.layout import PodPaths
from localkube.node.logs import (
    LogNotFoundError,
    encode_records,
    follow_log,
    parse_records,
    read_log,
    render,
)
from localkube.node.podstatus import ContainerObservation, phase, pod_status
from localkube.node.probes import (
    ProbeConfigError,
    ProbeTracker,
    exec_probe,
    grpc_probe,
    http_probe,
    resolve_port,
    run_probe,
    tcp_probe,
)
from localkube.node.recovery import restore_observations
from localkube.node.volumes import VolumeError, mount_volumes, prepare_volumes, write_atomically

# --- images -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "key"),
    [
        ("kruntimes/runtimed", "kruntimes/runtimed"),
        ("docker.io/kruntimes/runtimed:0.1.0", "kruntimes/runtimed"),
        ("kruntimes/gateway@sha256:abcd", "kruntimes/gateway"),
        ("docker.io/library/busybox:1.36", "busybox"),
        ("localhost:5000/x/y:tag", "localhost:5000/x/y"),
    ],
)
def test_normalize_image(ref: str, key: str) -> None:
    assert normalize_image(ref) == key


def test_kruntimes_images_map_to_console_scripts() -> None:
    table = ImageTable()
    for image, script in [
        ("kruntimes/runtimed", "krt-runtimed"),
        ("kruntimes/controlplane", "krt-controlplane"),
        ("kruntimes/gateway", "krt-gateway"),
        ("kruntimes/python-runtime", "krt-python-runtime"),
        ("kruntimes/bash-runtime", "krt-bash-runtime"),
    ]:
        assert table.resolve(image + ":dev").entrypoint == (str(VENV_BIN / script),)


def test_unknown_image_message_lists_the_table() -> None:
    with pytest.raises(UnknownImageError) as info:
        ImageTable().resolve("nginx:1.27")
    assert "localkube runs only the listed images" in str(info.value)
    assert "kruntimes/runtimed" in str(info.value)


def test_command_and_args_follow_entrypoint_rules() -> None:
    entry = ImageTable().resolve("localkube/python")
    assert entry.argv(None, ["-c", "x"]) == [entry.entrypoint[0], "-c", "x"]
    assert entry.argv(["sh"], None) == ["sh"]
    assert entry.argv(["sh"], ["-c", "true"]) == ["sh", "-c", "true"]


def test_image_table_file_overlays_and_validates(tmp_path: Path) -> None:
    good = tmp_path / "images.yaml"
    good.write_text(
        "images:\n  example/worker:2:\n    entrypoint: ['{bin}/worker']\n    args: ['-v']\n"
    )
    table = ImageTable.load(good)
    assert table.resolve("example/worker").argv(None, None) == [str(VENV_BIN / "worker"), "-v"]
    assert table.resolve("kruntimes/runtimed")  # built-ins stay
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": {"x/y": {"entrypoint": "not-a-list"}}}')
    with pytest.raises(ImageTableError, match=r"images.x/y.entrypoint: expected a list"):
        ImageTable.load(bad)
    bad.write_text('{"images": {"x/y": {"entrypoint": ["a"], "cmd": []}}}')
    with pytest.raises(ImageTableError, match=r"unknown field\(s\) \['cmd'\]"):
        ImageTable.load(bad)


# --- env ----------------------------------------------------------------------------------

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"}},
    "spec": {"nodeName": "localkube", "serviceAccountName": "sa"},
    "status": {"podIP": "127.0.3.4", "podIPs": [{"ip": "127.0.3.4"}], "hostIP": "127.0.0.1"},
}


def test_expand_rules() -> None:
    env = {"A": "1"}
    assert expand("$(A)-$(B)-$$(A)-$$", env) == "1-$(B)-$(A)-$"


def test_env_sources_and_override_order() -> None:
    secret = {
        "data": {"k": base64.b64encode(b"v").decode(), "other": base64.b64encode(b"o").decode()}
    }
    cm = {"data": {"c": "cv"}}
    container = {
        "name": "c",
        "envFrom": [
            {"configMapRef": {"name": "cm"}, "prefix": "CM_"},
            {"secretRef": {"name": "s"}},
        ],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "c"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "missing", "key": "x", "optional": True}},
            },
            {"name": "BASE", "value": "over-$(NAME)"},
        ],
    }
    env = container_env(
        POD, container, secrets={"s": secret}, configmaps={"cm": cm}, base={"BASE": "b"}
    )
    assert env["CM_c"] == "cv"
    assert (env["k"], env["other"]) == ("v", "o")
    assert (env["NAME"], env["IP"], env["LABEL"], env["SA"]) == ("p", "127.0.3.4", "a", "sa")
    assert (env["S"], env["C"]) == ("v", "cv")
    assert "OPT" not in env
    assert env["BASE"] == "over-p"
    assert referenced_objects({"spec": {"containers": [container]}}) == ({"s", "missing"}, {"cm"})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}},
            'env[0] (X): secret "nope" not found',
        ),
        (
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "zz"}}},
            'couldn\'t find key zz in secret "s"',
        ),
        (
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}},
            'configmap "nope" not found',
        ),
        (
            {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}},
            'unsupported fieldRef fieldPath "spec.bogus"',
        ),
        (
            {"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            "unsupported valueFrom ['resourceFieldRef']",
        ),
    ],
)
def test_env_errors_name_the_entry(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ContainerConfigError) as info:
        container_env(
            POD, {"name": "c", "env": [entry]}, secrets={"s": {"data": {}}}, configmaps={}
        )
    assert message in str(info.value)


def test_service_links() -> None:
    svc = {
        "metadata": {"name": "my-svc"},
        "spec": {"clusterIP": "127.0.200.9", "ports": [{"name": "grpc-api", "port": 81}]},
    }
    headless = {"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}}
    assert service_link_env([svc, headless]) == {
        "MY_SVC_SERVICE_HOST": "127.0.200.9",
        "MY_SVC_SERVICE_PORT": "81",
        "MY_SVC_SERVICE_PORT_GRPC_API": "81",
    }


# --- restart policy and back-off ----------------------------------------------------------


def test_restart_policy() -> None:
    assert should_restart("Always", 0)
    assert should_restart("OnFailure", 1)
    assert not should_restart("OnFailure", 0)
    assert not should_restart("Never", 1)
    with pytest.raises(ValueError, match="restartPolicy"):
        should_restart("Sometimes", 1)


def test_backoff_sequence_caps_and_resets() -> None:
    b = CrashBackoff()
    delays = [b.next_delay(1.0) for _ in range(8)]
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300]
    assert b.next_delay(600.0) == 0  # a long healthy run starts over
    assert b.next_delay(1.0) == 10


async def test_backoff_delays_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    b = CrashBackoff(initial=10, cap=40)
    start = trio.current_time()
    for _ in range(5):  # 0 + 10 + 20 + 40 + 40
        await trio.sleep(b.next_delay(0.5))
    assert trio.current_time() - start == pytest.approx(110)


# --- probes -------------------------------------------------------------------------------


def test_probe_tracker_thresholds() -> None:
    readiness = ProbeTracker(success_threshold=2, failure_threshold=3)
    assert not readiness.observe(True)
    assert readiness.observe(True)  # second success flips to ready
    assert readiness.ok
    assert not readiness.observe(False)
    assert not readiness.observe(False)
    assert not readiness.observe(True)  # resets the failure count
    assert [readiness.observe(False) for _ in range(3)] == [False, False, True]
    assert not readiness.ok


def test_named_probe_port() -> None:
    c = {"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port("http", c) == 8080
    assert resolve_port(9, c) == 9
    with pytest.raises(ProbeConfigError, match='no port named "grpc"'):
        resolve_port("grpc", c)


async def test_tcp_http_exec_probes(tmp_path: Path) -> None:
    async def http_handler(stream: trio.SocketStream) -> None:
        request = await stream.receive_some(4096)
        status = b"200 OK" if b"GET /ok" in request else b"500 Oops"
        await stream.send_all(
            b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, http_handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        assert await tcp_probe("127.0.0.1", port)
        assert await http_probe(f"http://127.0.0.1:{port}/ok")
        assert not await http_probe(f"http://127.0.0.1:{port}/bad")
        spec = {"httpGet": {"path": "ok", "port": "web"}, "timeoutSeconds": 1}
        assert await run_probe(
            spec,
            host="127.0.0.1",
            container={"ports": [{"name": "web", "containerPort": port}]},
            env={},
            cwd=tmp_path,
        )
        nursery.cancel_scope.cancel()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert not await tcp_probe("127.0.0.1", closed)
    assert not await grpc_probe("127.0.0.1", closed)
    env = {"PATH": os.environ["PATH"], "FLAG": "1"}
    assert await exec_probe(["sh", "-c", 'test "$FLAG" = 1'], env=env, cwd=tmp_path)
    assert not await exec_probe(["sh", "-c", "exit 3"], env=env, cwd=tmp_path)
    assert not await exec_probe(["/nonexistent"], env=env, cwd=tmp_path)
    slow = {"exec": {"command": ["sleep", "5"]}, "timeoutSeconds": 0.2}
    assert not await run_probe(slow, host="127.0.0.1", container={}, env=env, cwd=tmp_path)
    with pytest.raises(ProbeConfigError, match="no tcpSocket, httpGet, grpc or exec"):
        await run_probe({"periodSeconds": 1}, host="127.0.0.1", container={}, env=env, cwd=tmp_path)


# --- pod status ---------------------------------------------------------------------------


def obs(state: str, **kw: object) -> ContainerObservation:
    o = ContainerObservation("c", "img", state=state)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def test_phase_rules() -> None:
    for policy in ("Always", "OnFailure", "Never"):
        assert phase([obs("waiting")], restart_policy=policy) == "Pending"
        running = [obs("running", ever_started=True), obs("waiting")]
        assert phase(running, restart_policy=policy) == "Pending"
        assert phase([obs("running", ever_started=True)], restart_policy=policy) == "Running"
        backoff = [obs("waiting", ever_started=True, reason="CrashLoopBackOff")]
        assert phase(backoff, restart_policy=policy) == "Running"
    ok = [obs("terminated", exit_code=0, ever_started=True)]
    bad = [obs("terminated", exit_code=0), obs("terminated", exit_code=2)]
    assert phase(ok, restart_policy="Never") == "Succeeded"
    assert phase(bad, restart_policy="Never") == "Failed"
    assert phase(ok, restart_policy="OnFailure") == "Succeeded"
    # the failed container restarts: not terminal
    assert phase(bad, restart_policy="OnFailure") == "Running"
    # every exit restarts: a crash loop is Running, never Failed
    assert phase(ok, restart_policy="Always") == "Running"
    assert phase(bad, restart_policy="Always") == "Running"
    # stopped for good (deletion): terminal whatever the policy
    assert phase(ok, restart_policy="Always", final=True) == "Succeeded"
    assert phase(bad, restart_policy="Always", final=True) == "Failed"


def test_status_keeps_foreign_conditions_and_honours_readiness_gates() -> None:
    pod = {
        "spec": {"readinessGates": [{"conditionType": "kruntimes.io/RuntimedReady"}]},
        "status": {
            "conditions": [
                {
                    "type": "kruntimes.io/RuntimedReady",
                    "status": "False",
                    "lastTransitionTime": "t0",
                },
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ]
        },
    }
    running = [obs("running", ready=True, started=True, ever_started=True, started_at=1.0, pid=7)]
    st = pod_status(
        pod, running, pod_ip="127.0.1.2", host_ip="127.0.0.1", start_time=1.0, now=100.0
    )
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["ContainersReady"]["status"] == "True"
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert conds["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged status
    assert conds["kruntimes.io/RuntimedReady"] == pod["status"]["conditions"][0]
    pod["status"]["conditions"][0]["status"] = "True"
    st = pod_status(
        pod, running, pod_ip="127.0.1.2", host_ip="127.0.0.1", start_time=1.0, now=100.0
    )
    assert {c["type"]: c["status"] for c in st["conditions"]}["Ready"] == "True"
    assert st["podIP"] == "127.0.1.2"
    assert st["containerStatuses"][0]["containerID"] == "localkube://7"


def test_container_status_shapes() -> None:
    o = obs(
        "terminated",
        exit_code=137,
        signal=9,
        reason="Error",
        started_at=1.0,
        finished_at=2.0,
        restart_count=2,
    )
    s = o.status()
    assert s["state"]["terminated"]["exitCode"] == 137
    assert s["state"]["terminated"]["signal"] == 9
    assert not s["ready"]
    assert s["restartCount"] == 2
    w = obs("waiting", reason="ErrImagePull", message="m").status()
    assert w["state"] == {"waiting": {"reason": "ErrImagePull", "message": "m"}}


def test_node_restart_rule() -> None:
    def pod(policy: str, state: dict[str, object]) -> dict[str, object]:
        return {
            "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "i"}]},
            "status": {"containerStatuses": [{"name": "c", "restartCount": 2, "state": state}]},
        }

    running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    (o,) = restore_observations(pod("Always", running))
    assert o.restart_count == 3
    assert o.last_terminated is not None
    assert o.last_terminated["reason"] == "Unknown"
    assert o.state == "waiting"
    (o,) = restore_observations(pod("Never", running))
    assert (o.state, o.exit_code, o.restart_count) == ("terminated", 255, 2)
    done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    (o,) = restore_observations(pod("OnFailure", done))
    assert (o.state, o.exit_code) == ("terminated", 0)


# --- logs ---------------------------------------------------------------------------------


def test_log_records_round_trip_with_partial_lines() -> None:
    long = b"x" * (16 * 1024 + 10)
    data = encode_records("stdout", b"one\n" + long + b"\n", now=1_000_000.5)
    assert data.count(b" P ") == 1
    lines = parse_records(data + encode_records("stderr", b"two\n", now=1_000_010.0))
    assert [ln.text for ln in lines] == [b"one\n", long + b"\n", b"two\n"]
    assert lines[0].timestamp == pytest.approx(1_000_000.5)
    assert render(lines, tail_lines=1) == b"two\n"
    assert render(lines, tail_lines=0) == b""
    assert render(lines, since_seconds=5, now=1_000_012.0) == b"two\n"
    assert render(lines, timestamps=True, tail_lines=1).startswith(
        b"1970-01-12T13:46:50.000000000Z two"
    )
    assert render(lines, limit_bytes=2) == b"on"
    with pytest.raises(ValueError, match="tailLines"):
        render(lines, tail_lines=-1)


def test_read_log_picks_current_or_previous_run(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "0.log").write_bytes(encode_records("stdout", b"first\n", now=1.0))
    with pytest.raises(LogNotFoundError, match="previous"):
        read_log(tmp_path, "c", previous=True)
    (d / "1.log").write_bytes(encode_records("stdout", b"second\n", now=2.0))
    assert read_log(tmp_path, "c") == b"second\n"
    assert read_log(tmp_path, "c", previous=True) == b"first\n"
    with pytest.raises(LogNotFoundError):
        read_log(tmp_path, "other")


async def test_follow_log_streams_until_the_run_ends(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    log = d / "0.log"
    log.write_bytes(encode_records("stdout", b"a\n", now=1.0))
    got: list[bytes] = []

    async def follow() -> None:
        async for chunk in follow_log(tmp_path, "c", poll_interval=0.01):
            got.append(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.sleep(0.05)
        with log.open("ab") as f:
            f.write(encode_records("stdout", b"b\n", now=2.0))
        await trio.sleep(0.05)
        (d / "0.exited").touch()
    assert b"".join(got) == b"a\nb\n"


# --- addresses ----------------------------------------------------------------------------


def test_pod_and_service_ranges_do_not_collide() -> None:
    rng = random.Random(1)
    used: set[str] = set()
    for _ in range(200):
        ip = allocate_pod_ip(used, rng)
        assert ip not in used
        addr = ipaddress.ip_address(ip)
        assert addr in POD_NETWORK
        assert addr not in SERVICE_NETWORK
        assert ip != "127.0.0.1"
        assert not ip.startswith("127.0.0.")
        used.add(ip)
    assert ipaddress.ip_address(allocate_cluster_ip(set(), rng)) in SERVICE_NETWORK
    everything = {str(a) for a in SERVICE_NETWORK.hosts()}
    with pytest.raises(AddressesExhaustedError):
        allocate_cluster_ip(everything, rng)


def test_pod_addresses_bind_without_setup() -> None:
    ip = allocate_pod_ip(set())
    with socket.socket() as s:
        s.bind((ip, 0))
        s.listen()
        assert s.getsockname()[0] == ip


# --- volumes ------------------------------------------------------------------------------


def test_volumes_and_mounts(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path / "pod")
    pod = {
        "spec": {
            "volumes": [
                {"name": "e", "emptyDir": {}},
                {"name": "workspace", "emptyDir": {}},
                {
                    "name": "s",
                    "secret": {
                        "secretName": "sec",
                        "items": [{"key": "k", "path": "sub/file", "mode": 0o600}],
                    },
                },
                {"name": "c", "configMap": {"name": "cm"}},
                {"name": "o", "configMap": {"name": "absent", "optional": True}},
            ]
        }
    }
    prepare_volumes(
        paths,
        pod,
        secrets={"sec": {"data": {"k": base64.b64encode(b"v").decode()}}},
        configmaps={
            "cm": {"data": {"a": "1"}, "binaryData": {"b": base64.b64encode(b"\x00").decode()}}
        },
    )
    assert (paths.volume("s") / "sub/file").read_bytes() == b"v"
    assert oct((paths.volume("s") / "sub/file").stat().st_mode & 0o777) == "0o600"
    assert (paths.volume("c") / "b").read_bytes() == b"\x00"
    container = {
        "name": "x",
        "volumeMounts": [
            {"name": "c", "mountPath": "/etc/conf"},
            {"name": "workspace", "mountPath": "/work"},
            {"name": "e", "mountPath": "/data/one", "subPath": "one"},
        ],
    }
    mount_volumes(paths, pod, container)
    mount_volumes(paths, pod, container)  # idempotent
    assert (paths.root / "etc/conf/a").read_text() == "1"
    assert (paths.root / "work").resolve() == paths.workspace.resolve()
    assert (paths.root / "data/one").resolve() == (paths.volume("e") / "one").resolve()
    with pytest.raises(VolumeError, match='volume "nope" is not declared'):
        mount_volumes(
            paths, pod, {"name": "x", "volumeMounts": [{"name": "nope", "mountPath": "/n"}]}
        )
    with pytest.raises(VolumeError, match="must not contain"):
        mount_volumes(
            paths, pod, {"name": "x", "volumeMounts": [{"name": "e", "mountPath": "/../x"}]}
        )
    with pytest.raises(VolumeError, match=r"type \['hostPath'\] is not supported"):
        prepare_volumes(
            paths,
            {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}},
            secrets={},
            configmaps={},
        )
    with pytest.raises(VolumeError, match='secret "gone" not found'):
        prepare_volumes(
            paths,
            {"spec": {"volumes": [{"name": "g", "secret": {"secretName": "gone"}}]}},
            secrets={},
            configmaps={},
        )


def _shown(directory: Path) -> list[str]:
    """The names a reader of the volume sees (the kubelet's hidden ``..`` entries left out)."""
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def test_projecting_again_swaps_the_whole_set_only_when_it_changed(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path / "pod")
    pod = {"spec": {"volumes": [{"name": "s", "secret": {"secretName": "tls"}}]}}

    def project(**data: bytes) -> None:
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        prepare_volumes(paths, pod, secrets={"tls": {"data": encoded}}, configmaps={})

    project(crt=b"one", key=b"k")
    volume = paths.volume("s")
    crt, key = volume / "crt", volume / "key"
    before = (crt.stat().st_ino, key.stat().st_ino, os.readlink(volume / "..data"))
    project(crt=b"one", key=b"k")  # a container start: an unchanged set stays as it is
    assert (crt.stat().st_ino, key.stat().st_ino, os.readlink(volume / "..data")) == before
    project(crt=b"two", new=b"n")  # the Secret changed: a new set, one swap
    assert crt.read_bytes() == b"two"
    assert crt.stat().st_ino != before[0]
    assert _shown(volume) == ["crt", "new"]
    # the files are symlinks through ..data; only the current payload directory is kept
    assert os.readlink(crt) == "..data/crt"
    hidden = sorted(p.name for p in volume.iterdir() if p.name.startswith(".."))
    assert hidden == sorted(["..data", os.readlink(volume / "..data")])


def test_a_reader_never_sees_a_mix_of_two_payloads(tmp_path: Path) -> None:
    target = tmp_path / "v"
    write_atomically(target, {"tls.crt": (b"cert-1", 0o644), "tls.key": (b"key-1", 0o600)})
    # what a reader resolves before the swap stays a consistent old set, and after it a
    # consistent new set: both names go through the one ..data link
    old_dir = (target / "..data").resolve()
    write_atomically(target, {"tls.crt": (b"cert-2", 0o644), "tls.key": (b"key-2", 0o600)})
    new_dir = (target / "..data").resolve()
    assert new_dir != old_dir
    assert (target / "tls.crt").resolve().parent == (target / "tls.key").resolve().parent
    assert (target / "tls.crt").read_bytes() == b"cert-2"
    assert oct((target / "tls.key").stat().st_mode & 0o777) == "0o600"
    assert not old_dir.exists()


def test_an_older_layout_of_plain_files_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / "v"
    target.mkdir()
    (target / "tls.crt").write_bytes(b"old")  # a Pod root written by an earlier localkube
    (target / "stale").write_bytes(b"x")
    write_atomically(target, {"tls.crt": (b"new", 0o644)})
    assert (target / "tls.crt").is_symlink()
    assert (target / "tls.crt").read_bytes() == b"new"
    assert _shown(target) == ["tls.crt"]


async def test_grpc_probe_speaks_grpc_health_v1() -> None:
    import purerpc

    from localkube.node.probes import _health_messages

    request_cls, response_cls = _health_messages()
    statuses = {"": 1, "down": 2}
    service = purerpc.Service("grpc.health.v1.Health")

    async def check(request: object) -> object:
        return response_cls(status=statuses.get(request.service, 3))  # type: ignore[attr-defined]

    service.add_method(
        "Check",
        check,
        purerpc.RPCSignature(purerpc.Cardinality.UNARY_UNARY, request_cls, response_cls),
    )
    server = purerpc.Server(port=0)
    server.add_service(service)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve_async)
        assert await grpc_probe("127.0.0.1", port)
        assert not await grpc_probe("127.0.0.1", port, "down")
        nursery.cancel_scope.cancel()


def test_init_containers_gate_initialized_and_phase() -> None:
    main = [obs("waiting", reason="PodInitializing")]
    pending_init = [obs("terminated", exit_code=0), ContainerObservation("second", "img")]
    st = pod_status(
        {"spec": {}},
        main,
        init_observations=pending_init,
        pod_ip="127.0.1.1",
        host_ip="127.0.0.1",
        start_time=1.0,
        now=2.0,
    )
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Initialized"]["status"] == "False"
    assert conds["Initialized"]["message"] == "containers with incomplete status: [second]"
    assert st["phase"] == "Pending"
    assert [s["ready"] for s in st["initContainerStatuses"]] == [True, False]
    failed = [obs("terminated", exit_code=1)]
    st = pod_status(
        {"spec": {"restartPolicy": "Never"}},
        main,
        init_observations=failed,
        pod_ip="127.0.1.1",
        host_ip="127.0.0.1",
        start_time=1.0,
        now=2.0,
    )
    assert st["phase"] == "Failed"
    st = pod_status(
        {"spec": {"restartPolicy": "Always"}},
        main,
        init_observations=failed,
        pod_ip="127.0.1.1",
        host_ip="127.0.0.1",
        start_time=1.0,
        now=2.0,
    )
    assert st["phase"] == "Pending"  # it will be retried


def test_an_optional_object_that_goes_away_takes_its_files(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path / "pod")
    pod = {
        "spec": {
            "volumes": [
                {"name": "s", "secret": {"secretName": "tls", "optional": True}},
                {
                    "name": "c",
                    "configMap": {
                        "name": "cm",
                        "optional": True,
                        "items": [{"key": "a", "path": "x"}, {"key": "b", "path": "y"}],
                    },
                },
            ]
        }
    }
    prepare_volumes(
        paths,
        pod,
        secrets={"tls": {"data": {"crt": base64.b64encode(b"one").decode()}}},
        configmaps={"cm": {"data": {"a": "1", "b": "2"}}},
    )
    assert (paths.volume("s") / "crt").read_bytes() == b"one"
    assert _shown(paths.volume("c")) == ["x", "y"]
    # an optional item key that is gone takes its file with it
    prepare_volumes(
        paths,
        pod,
        secrets={"tls": {"data": {"crt": base64.b64encode(b"one").decode()}}},
        configmaps={"cm": {"data": {"a": "1"}}},
    )
    assert _shown(paths.volume("c")) == ["x"]
    # both objects deleted: the volumes stay, empty (as the kubelet projects them)
    prepare_volumes(paths, pod, secrets={}, configmaps={})
    assert _shown(paths.volume("s")) == []
    assert _shown(paths.volume("c")) == []


def test_overlapping_projections_leave_a_whole_volume(tmp_path: Path) -> None:
    # two containers of a Pod start together: both project the same volumes at once
    import threading

    for round_ in range(30):
        target = tmp_path / f"v{round_}"
        payload = {"tls.crt": (b"c" * 1000, 0o644), "tls.key": (b"k" * 1000, 0o600)}
        threads = [
            threading.Thread(target=write_atomically, args=(target, payload)) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (target / "..data").resolve().is_dir()
        assert (target / "tls.crt").read_bytes() == b"c" * 1000
        assert (target / "tls.key").read_bytes() == b"k" * 1000
