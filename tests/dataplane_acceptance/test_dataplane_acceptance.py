"""Issue 8 acceptance on localkube: the invoke dataplane as `krt dev up` installs it.

One cluster per module (``krt dev up --detach``: the charts' control plane and gateway as
Pods, the built-in Runtimes; the control plane wires every runtimed to the gateway CA
ConfigMap and the peer mTLS Secret). The python Runtime is scaled to two Pods and one
function Run is created. Clients go the way users go: HTTPS to the ``runtime-gateway``
Service (its ClusterIP, TLS checked against the Run's published ``caBundle`` only, for the
host name in ``status.endpoint.url``), bearer tokens from the cluster. The hop test dials the
non-owner runtimed directly with the gateway's own client certificate and host-name check.

Order matters only for the last test (it deletes the owner Pod); the others leave the Run
Ready and idle.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio
from cryptography.hazmat.primitives import serialization

from krt.api.naming import RUNTIMED_GRPC_PORT, RUNTIMED_HTTP_PORT
from krt.cli.invoking import Invocation, override_base, post
from krt.grpc.client import GrpcConnection
from krt.kube.client import Kube, connect
from krt.kube.resources import PODS, ROLEBINDINGS, ROLES, RUNS, RUNTIMES, SERVICEACCOUNTS
from krt.proto.executor.v1 import runtime_pb2 as pb
from localkube.auth.tokens import TokenAuthority
from localkube.pki import ISSUER

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KRT = str(Path(sys.executable).parent / "krt")
NS = "default"
RUN = "acceptance"
MIB = 1024 * 1024
HANDLER = """\
import os
import pathlib
import time


def invoke(request):
    if request.get("mark"):
        pathlib.Path(request["mark"]).write_text(str(os.getpid()))
    if request.get("sleep"):
        time.sleep(request["sleep"])
    pad = request.get("pad") or ""
    return {"n": request.get("n"), "pid": os.getpid(), "cwd": os.getcwd(), "pad": len(pad)}
"""


@dataclass(frozen=True)
class Setup:
    """What the module's cluster offers the tests.

    Attributes:
        state: the dev cluster's state directory.
        kubeconfig: its admin kubeconfig.
        gateway: ``https://<ClusterIP>:443`` of the runtime-gateway Service.
        endpoint_url, ca_bundle: the function Run's ``status.endpoint`` (``caBundle`` as
            PEM bytes).
        uid: the Run's UID.
        owner, other: the owning and the other python Runtime Pod (name, uid, ip).
        tokens: ``admin``, ``restricted`` (may ``get`` another Run only), ``expired`` (the
            restricted account's, signed by the cluster, expired an hour ago).
    """

    state: Path
    kubeconfig: Path
    gateway: str
    endpoint_url: str
    ca_bundle: bytes
    uid: str
    owner: dict[str, str]
    other: dict[str, str]
    tokens: dict[str, str]


def _krt(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KRT_", "KUBECONFIG", "SSL_"))}
    return subprocess.run(
        [KRT, *args], env=env, text=True, capture_output=True, timeout=timeout, check=False
    )


def _pod(pod: dict[str, Any]) -> dict[str, str]:
    return {
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
        "ip": pod["status"]["podIP"],
    }


async def _ready_pods(kube: Kube, runtime: str) -> list[dict[str, Any]]:
    pods, _ = await kube.list(PODS, NS, label_selector=f"kruntimes.io/runtime={runtime}")
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]


async def _wait_ready_run(kube: Kube, name: str) -> dict[str, Any]:
    while True:
        run = await kube.get(RUNS, name, NS)
        status = run.get("status") or {}
        assert status.get("phase") not in ("Failed", "Cancelled", "Timeout"), status
        if status.get("phase") == "Ready" and status.get("endpoint"):
            return run
        await trio.sleep(0.1)


async def _prepare(state: Path) -> Setup:
    kubeconfig = state / "kubeconfig"
    kube = await connect(kubeconfig=kubeconfig)
    async with kube:
        with trio.fail_after(90):
            await kube.patch(RUNTIMES, "python", NS, {"spec": {"replicas": 2}})
            while len(pods := await _ready_pods(kube, "python")) < 2:  # noqa: ASYNC110 - polling the API
                await trio.sleep(0.1)
            await kube.create(
                RUNS,
                {
                    "apiVersion": "kruntimes.io/v1alpha1",
                    "kind": "Run",
                    "metadata": {"name": RUN, "namespace": NS},
                    "spec": {
                        "runtime": "python",
                        "source": {"inline": HANDLER},
                        "mode": {"function": {"handler": "main.invoke"}},
                        # Pod loss is retried (the recovery test): attempt 2 elsewhere
                        "retryPolicy": {"maxAttempts": 3},
                    },
                },
            )
            run = await _wait_ready_run(kube, RUN)
            account = await kube.create(
                SERVICEACCOUNTS, {"metadata": {"name": "restricted", "namespace": NS}}
            )
            # restricted: may get one other Run only, not this one
            await kube.create(
                ROLES,
                {
                    "metadata": {"name": "get-other-run", "namespace": NS},
                    "rules": [
                        {
                            "apiGroups": ["kruntimes.io"],
                            "resources": ["runs"],
                            "resourceNames": ["some-other-run"],
                            "verbs": ["get"],
                        }
                    ],
                },
            )
            await kube.create(
                ROLEBINDINGS,
                {
                    "metadata": {"name": "get-other-run", "namespace": NS},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "get-other-run",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "restricted", "namespace": NS}],
                },
            )
            answer = await kube.request(
                "POST",
                SERVICEACCOUNTS,
                namespace=NS,
                name="restricted",
                subresource="token",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            )
    key = serialization.load_pem_private_key((state / "pki" / "sa.key").read_bytes(), password=None)
    # a token the cluster signed for an existing account, expired an hour ago
    expired, _ = TokenAuthority(key, ISSUER).issue(  # type: ignore[arg-type]
        NS,
        "restricted",
        account["metadata"]["uid"],
        audiences=[],
        expiration_seconds=600,
        now=time.time() - 3600,
    )
    owner_uid = run["status"]["assignedPodUID"]
    endpoint = run["status"]["endpoint"]
    return Setup(
        state=state,
        kubeconfig=kubeconfig,
        gateway=_gateway_url(state),
        endpoint_url=endpoint["url"],
        ca_bundle=base64.b64decode(endpoint["caBundle"]),
        uid=run["metadata"]["uid"],
        owner=next(_pod(p) for p in pods if p["metadata"]["uid"] == owner_uid),
        other=next(_pod(p) for p in pods if p["metadata"]["uid"] != owner_uid),
        tokens={
            "admin": (state / "pki" / "admin-token").read_text().strip(),
            "restricted": str(answer["status"]["token"]),
            "expired": expired,
        },
    )


def _gateway_url(state: Path) -> str:
    for line in (state / "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        if key == "KRT_GATEWAY_URL":
            return value
    raise AssertionError(f"no KRT_GATEWAY_URL in {state / 'env'}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """`krt dev up` once for the module, a 2-Pod python Runtime and a Ready function Run."""
    state = tmp_path_factory.mktemp("acceptance") / "dev"
    try:
        up = _krt("dev", "up", "--detach", "--state-dir", str(state), "--timeout", "120")
        assert up.returncode == 0, up.stdout + up.stderr
        yield trio.run(_prepare, state)
    finally:
        down = _krt("dev", "down", "--state-dir", str(state), timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr


# ----------------------------------------------------------------------------- clients


def _host(setup: Setup) -> str:
    return urlsplit(setup.endpoint_url).hostname or ""


def _path(setup: Setup, uid: str | None = None) -> str:
    path = urlsplit(setup.endpoint_url).path
    return path if uid is None else path.replace(setup.uid, uid)


@asynccontextmanager
async def gateway_client(setup: Setup) -> AsyncIterator[httpx.AsyncClient]:
    """A keep-alive HTTPS client of the gateway Service trusting only the Run's caBundle,
    checking the certificate for the endpoint URL's host (as `krt invoke --gateway-url`)."""
    context = ssl.create_default_context(cadata=setup.ca_bundle.decode("ascii"))
    async with httpx.AsyncClient(
        base_url=setup.gateway, verify=context, trust_env=False, timeout=None
    ) as client:
        yield client


async def call(
    client: httpx.AsyncClient,
    setup: Setup,
    body: bytes | dict[str, Any],
    *,
    token: str | None = "admin",
    invocation_id: str | None = None,
    uid: str | None = None,
) -> httpx.Response:
    headers = {"content-type": "application/json", "host": _host(setup)}
    if token is not None:
        headers["authorization"] = f"Bearer {setup.tokens.get(token, token)}"
    if invocation_id is not None:
        headers["x-kruntime-invocation-id"] = invocation_id
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(
        _path(setup, uid),
        content=content,
        headers=headers,
        extensions={"sni_hostname": _host(setup)},
    )


async def scrape(address: str) -> dict[str, float]:
    """runtimed's /metrics as ``{"name{labels}": value}``."""
    async with httpx.AsyncClient(trust_env=False) as http:
        text = (await http.get(f"http://{address}:{RUNTIMED_HTTP_PORT}/metrics")).text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def wait_for_file(path: Path, *, within: float = 20) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written within {within} s")


# ----------------------------------------------------------------------------- tests


async def test_published_endpoint_and_ca_bundle_alone_reach_the_function(setup: Setup) -> None:
    # the chart's control plane gave runtimed the gateway URL and the dev gateway CA
    assert setup.endpoint_url.startswith(
        "https://runtime-gateway.kruntimes-system.svc.cluster.local/v1/namespaces/default/"
    )
    assert setup.ca_bundle == (setup.state / "kruntimes" / "gateway-ca" / "ca.crt").read_bytes()
    url, server_name = override_base(setup.endpoint_url, setup.gateway)
    invocation = Invocation(
        url=url,
        body=b'{"n": 1}',
        token=setup.tokens["admin"],
        ca_bundle=setup.ca_bundle,
        tls_server_name=server_name,
        invocation_id="acceptance-1",
    )
    result = await post(invocation)
    assert result.status == 200, result
    assert json.loads(result.body)["n"] == 1
    assert result.invocation_id == "acceptance-1"  # the caller's ID round-trips
    # `krt invoke` itself, with no trust root but the caBundle (no SSL_CERT_FILE)
    done = await trio.to_thread.run_sync(
        lambda: _krt(
            "invoke",
            RUN,
            "-d",
            '{"n": 2}',
            "--kubeconfig",
            str(setup.kubeconfig),
            "--gateway-url",
            setup.gateway,
            timeout=60,
        )
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n"] == 2
    assert done.stderr.startswith("invocation ")


async def test_generated_invocation_ids_come_back_on_success_and_error(setup: Setup) -> None:
    async with gateway_client(setup) as client:
        ok = await call(client, setup, {"n": 3})
        refused = await call(client, setup, {"n": 3}, token=None)
        mine = await call(client, setup, {"n": 3}, token=None, invocation_id="mine-401")
    assert ok.status_code == 200
    assert len(ok.headers["x-kruntime-invocation-id"]) >= 8  # generated
    assert refused.status_code == 401
    assert refused.headers["x-kruntime-invocation-id"]
    assert mine.headers["x-kruntime-invocation-id"] == "mine-401"


async def test_non_owner_proxies_one_hop_to_the_owner_over_mtls(setup: Setup) -> None:
    """Dial the non-owner's runtimed as the gateway does: its client certificate, the peer CA,
    and the Runtime Service's name checked against runtimed's certificate."""
    tls_dir = setup.state / "kruntimes"
    context = ssl.create_default_context(cafile=str(tls_dir / "peer-ca" / "ca.crt"))
    context.load_cert_chain(tls_dir / "peer-tls" / "tls.crt", tls_dir / "peer-tls" / "tls.key")
    context.set_alpn_protocols(["h2"])
    assert context.check_hostname
    before_other = await scrape(setup.other["ip"])
    before_owner = await scrape(setup.owner["ip"])
    stream: trio.abc.Stream = await trio.open_tcp_stream(setup.other["ip"], RUNTIMED_GRPC_PORT)
    tls = trio.SSLStream(stream, context, server_hostname=f"runtime-python.{NS}.svc")
    await tls.do_handshake()  # raises if runtimed's certificate does not name the Service
    conn = GrpcConnection(
        tls, authority=f"runtime-python.{NS}.svc:{RUNTIMED_GRPC_PORT}", scheme="https"
    )
    outputs = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            for index in range(3):
                request = pb.InvokeFunctionRequest(
                    registration=pb.FunctionRegistration(run_uid=setup.uid),
                    invocation_id=f"hop-{index}",
                    input=json.dumps({"n": index}).encode(),
                    content_type="application/json",
                    timeout_millis=10_000,
                )
                payload = await conn.unary_call(
                    "executor.v1.FunctionRuntime",
                    "InvokeFunction",
                    request.SerializeToString(),
                    metadata=[
                        ("authorization", f"Bearer {setup.tokens['admin']}"),
                        ("x-kruntime-namespace", NS),
                        ("x-kruntime-runtime", "python"),
                    ],
                    timeout_seconds=10,
                )
                response = pb.InvokeFunctionResponse.FromString(payload)
                assert response.invocation_id == f"hop-{index}"
                outputs.append(json.loads(response.output))
            conn.close()
    # the owner's Runtime Server answered (its Pod's workspace), not the non-owner's
    assert all(setup.owner["uid"] in out["cwd"] for out in outputs), outputs
    after_other = await scrape(setup.other["ip"])
    after_owner = await scrape(setup.owner["ip"])
    hops_out = 'runtimed_proxied_hops_total{direction="out"}'
    hops_in = 'runtimed_proxied_hops_total{direction="in"}'
    assert after_other[hops_out] - before_other.get(hops_out, 0) == 3
    assert after_owner[hops_in] - before_owner.get(hops_in, 0) == 3
    assert after_owner.get(hops_out, 0) == before_owner.get(hops_out, 0)  # no second hop


async def test_authorization_outcomes(setup: Setup) -> None:
    async with gateway_client(setup) as client:
        restricted = await call(client, setup, {"n": 4}, token="restricted")
        missing = await call(client, setup, {"n": 4}, token=None)
        expired = await call(client, setup, {"n": 4}, token="expired")
        garbage = await call(client, setup, {"n": 4}, token="not-a-token")
        allowed = await call(client, setup, {"n": 4})
    assert restricted.status_code == 403, restricted.text
    assert missing.status_code == 401, missing.text
    assert expired.status_code == 401, expired.text
    assert garbage.status_code == 401, garbage.text
    assert allowed.status_code == 200, allowed.text


async def test_overlapping_invokes_get_one_200_and_immediate_429s(
    setup: Setup, tmp_path: Path
) -> None:
    mark = tmp_path / "slow.pid"
    statuses: list[int] = []
    async with gateway_client(setup) as slow_client, gateway_client(setup) as others:
        async with trio.open_nursery() as nursery:

            async def slow() -> None:
                answer = await call(slow_client, setup, {"n": 5, "sleep": 3, "mark": str(mark)})
                statuses.append(answer.status_code)

            nursery.start_soon(slow)
            await trio.to_thread.run_sync(wait_for_file, mark)
            started = time.monotonic()
            with trio.fail_after(10):
                async with trio.open_nursery() as burst:
                    for index in range(3):

                        async def overlap(index: int = index) -> None:
                            answer = await call(others, setup, {"n": 50 + index})
                            statuses.append(answer.status_code)
                            assert answer.headers["x-kruntime-invocation-id"]

                        burst.start_soon(overlap)
            rejected_within = time.monotonic() - started
    assert sorted(statuses) == [200, 429, 429, 429], statuses
    assert statuses[-1] == 200  # the slow one finished last: the 429s did not wait for it
    assert rejected_within < 2, rejected_within  # no queue: refused at once


async def test_fifty_sequential_invokes_all_succeed(setup: Setup) -> None:
    async with gateway_client(setup) as client:
        for index in range(50):
            answer = await call(client, setup, {"n": index}, invocation_id=f"seq-{index}")
            assert answer.status_code == 200, (index, answer.text)
            assert answer.json()["n"] == index
            assert answer.headers["x-kruntime-invocation-id"] == f"seq-{index}"


def _body_of_size(size: int) -> bytes:
    shell = b'{"pad": ""}'
    body = b'{"pad": "' + b"x" * (size - len(shell)) + b'"}'
    assert len(body) == size
    return body


async def test_body_limit_is_one_mebibyte(setup: Setup) -> None:
    async with gateway_client(setup) as client:
        fits = await call(client, setup, _body_of_size(MIB - 1))
        too_big = await call(client, setup, _body_of_size(MIB + 1))
    assert fits.status_code == 200, fits.text
    assert fits.json()["pad"] == MIB - 1 - len(b'{"pad": ""}')
    assert too_big.status_code == 413, too_big.text
    assert "1048576" in too_big.text or "1 MiB" in too_big.text


async def test_unknown_run_uid_is_404(setup: Setup) -> None:
    async with gateway_client(setup) as client:
        answer = await call(client, setup, {"n": 6}, uid=str(uuid.uuid4()))
    assert answer.status_code == 404, answer.text


async def test_client_disconnect_cancels_the_handler_and_frees_the_slot(
    setup: Setup, tmp_path: Path
) -> None:
    mark = tmp_path / "abandoned.pid"
    async with gateway_client(setup) as client:
        with trio.move_on_after(30) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, client, setup, {"sleep": 60, "mark": str(mark)})
                pid = int(await trio.to_thread.run_sync(wait_for_file, mark))
                nursery.cancel_scope.cancel()  # the client goes away mid-invocation
        assert not scope.cancelled_caught
    started = time.monotonic()
    async with gateway_client(setup) as client:
        answer = await call(client, setup, {"n": 7})
    assert answer.status_code == 200, answer.text  # the slot is free: no 429
    assert time.monotonic() - started < 5
    assert answer.json()["pid"] != pid
    # the abandoned handler's process was killed, not left to sleep out its 60 s
    with trio.fail_after(5):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await trio.sleep(0.05)


async def test_recovering_run_answers_503_and_never_from_the_old_owner(setup: Setup) -> None:
    """Last: deletes the owner Pod at once (no grace); the Run is fenced and registered again
    (attempt 2) on a remaining Pod under the same endpoint URL. Meanwhile the gateway
    answers 503 with Retry-After, and no answer comes from the old owner."""
    kube = await connect(kubeconfig=setup.kubeconfig)
    async with kube:
        await kube.delete(PODS, setup.owner["name"], NS, grace_period_seconds=0)
        seen: list[tuple[int, str]] = []
        async with gateway_client(setup) as client:
            with trio.fail_after(90):
                while True:
                    answer = await call(client, setup, {"n": 8})
                    if answer.status_code == 200:
                        cwd = answer.json()["cwd"]
                        assert setup.owner["uid"] not in cwd, "answered by the deleted owner"
                        seen.append((200, cwd))
                        break
                    if answer.status_code == 502:  # sent to the dying owner, then cut off
                        assert answer.json()["error"]["reason"] == "InvocationInterrupted"
                        assert "retry-after" not in answer.headers
                        seen.append((502, answer.headers["x-kruntime-invocation-id"]))
                        await trio.sleep(0.05)
                        continue
                    assert answer.status_code == 503, answer.text
                    assert int(answer.headers["retry-after"]) >= 1
                    seen.append((503, answer.headers["x-kruntime-invocation-id"]))
                    await trio.sleep(0.05)
        assert seen[0][0] in (502, 503), seen  # recovery takes a moment: refused, not misrouted
        run = await kube.get(RUNS, RUN, NS)
    status = run["status"]
    assert status["attempt"] == 2, status
    assert status["assignedPodUID"] != setup.owner["uid"]
    assert status["assignedPodUID"] in seen[-1][1]
    assert status["endpoint"]["url"] == setup.endpoint_url  # the same endpoint, new owner
