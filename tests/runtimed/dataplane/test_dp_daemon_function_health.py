"""serve_daemon hands the Runtime Server's health to the function lifecycle (F4 wiring).

The readiness loop's health changes reach :meth:`FunctionLifecycle.on_server_health`, which
marks the Pod's Ready function Runs ``Ready=False Unavailable`` while the server fails its
health checks (the decision itself is tested in tests/runtimed/functions).
"""

from __future__ import annotations

import functools
from pathlib import Path

import trio
from test_dp_daemon import NS, BaseRuntime, kube_and_token  # noqa: F401 - the fixture

from krt.kube.client import Kube
from krt.kube.resources import PODS
from runtimed.daemon import DaemonConfig, DaemonHandle, serve_daemon
from runtimed.dataplane.server import serve_grpc
from runtimed.functions.settings import FunctionSettings
from runtimed.identity import PodIdentity
from runtimed.sources import Workspace


async def test_the_function_lifecycle_follows_the_servers_health(
    kube_and_token: tuple[Kube, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    kube, _ = kube_and_token
    pod = await kube.create(
        PODS,
        {
            "metadata": {
                "name": "runtime-python-h1",
                "namespace": NS,
                "labels": {"kruntimes.io/runtime": "python"},
            },
            "spec": {"containers": [{"name": "runtime", "image": "kruntimes/python-runtime"}]},
        },
    )
    base = BaseRuntime()
    async with trio.open_nursery() as nursery:
        server_port = await nursery.start(
            lambda task_status: serve_grpc(
                {"executor.v1.Runtime": base.service},
                host="127.0.0.1",
                port=0,
                tls=None,
                task_status=task_status,
            )
        )
        config = DaemonConfig(
            pod=PodIdentity(
                name=pod["metadata"]["name"],
                namespace=NS,
                uid=pod["metadata"]["uid"],
                ip="127.0.0.1",
                runtime="python",
            ),
            server_host="127.0.0.1",
            server_port=server_port,
            workspace=Workspace(root=tmp_path / "ws"),
            http_host="127.0.0.1",
            http_port=0,
            functions=FunctionSettings(gateway_url="https://gw.example:8443"),
        )
        with trio.fail_after(15):
            handle: DaemonHandle = await nursery.start(
                functools.partial(serve_daemon, config, kube=kube)
            )
            assert handle.functions is not None
            assert handle.functions.server_down is None
            base.healthy = False
            while handle.functions.server_down is None:  # noqa: ASYNC110 - 1 s health period
                await trio.sleep(0.05)
            assert handle.functions.server_down == "RuntimeServerUnhealthy: handler pool stuck"
            base.healthy = True
            while handle.functions.server_down is not None:  # noqa: ASYNC110
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
