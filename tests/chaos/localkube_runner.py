"""A localkube cluster whose API server alone can be restarted (the chaos suite's cluster).

``localkube.cluster.serve_cluster`` runs the API server, controllers, proxy and node in one
nursery: stopping the API server stops everything. The chaos suite needs the fault "the API
server restarts, with its durable state, while Pods keep running", so this runner composes
the same parts with the API server in its own cancel scope:

* ``SIGUSR1``: stop the API server, stay down for ``--down-seconds``, start it again on the
  same address with the same state directory (SQLite, PKI, tokens), so every client's
  kubeconfig stays valid;
* ``SIGTERM`` / ``SIGINT``: stop the whole cluster (Pods get SIGTERM, then SIGKILL).

It writes the same ``krt-dev.pid`` and ``cluster.json`` records as ``krt dev up``, so
``krt dev up --detach --state-dir DIR`` on the running cluster installs kruntimes and
``krt dev down --state-dir DIR`` stops it and kills leftover Pod processes.

Usage: ``python tests/chaos/localkube_runner.py --state-dir DIR [--down-seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from pathlib import Path
from urllib.parse import urlsplit

import trio

from krt.kube.kr8s_auth import private_api
from localkube.apiserver import ApiServerConfig, ApiServerHandle, serve_apiserver
from localkube.controllers import serve_controllers
from localkube.controllers.kubeapi import Kube
from localkube.images import ImageTable
from localkube.names import serve_hosts_file
from localkube.node.config import NodeConfig
from localkube.node.kubelet import serve_node
from localkube.node.process import PidRecord, start_ticks
from localkube.proxy import serve_proxy

PID_FILE = "krt-dev.pid"
READY_FILE = "cluster.json"
#: Written (with the restart count) each time the API server serves again after SIGUSR1.
RESTARTS_FILE = "apiserver-restarts"


async def _apiserver_supervisor(
    config: ApiServerConfig,
    restart: trio.MemoryReceiveChannel[None],
    down_seconds: float,
    state_dir: Path,
    *,
    task_status: trio.TaskStatus[ApiServerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API server; on each ``restart`` message stop it, wait, and serve it again."""
    restarts = 0
    first = True
    while True:
        async with trio.open_nursery() as nursery:
            handle: ApiServerHandle = await nursery.start(serve_apiserver, config)
            if first:
                task_status.started(handle)
                first = False
                port = urlsplit(handle.url).port
                config = ApiServerConfig(
                    state_dir=config.state_dir, host=config.host, port=port or 0
                )
            else:
                restarts += 1
                (state_dir / RESTARTS_FILE).write_text(str(restarts))
            await restart.receive()
            nursery.cancel_scope.cancel()
        await trio.sleep(down_seconds)


async def serve(state_dir: Path, images_file: Path | None, down_seconds: float) -> None:
    """Run the cluster until SIGTERM/SIGINT; SIGUSR1 restarts the API server."""
    images = ImageTable.load(images_file)
    send_restart, receive_restart = trio.open_memory_channel[None](1)
    ready_file = state_dir / READY_FILE
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT) as signals:
        try:
            async with trio.open_nursery() as nursery:
                api: ApiServerHandle = await nursery.start(
                    _apiserver_supervisor,
                    ApiServerConfig(state_dir=state_dir, host="127.0.0.1", port=0),
                    receive_restart,
                    down_seconds,
                    state_dir,
                )
                url = urlsplit(api.url)
                kube = Kube(await private_api(kubeconfig=str(api.kubeconfig_path)))
                hosts_file = state_dir / "hosts"
                await nursery.start(serve_hosts_file, kube, hosts_file)
                await nursery.start(serve_controllers, kube)
                await nursery.start(serve_proxy, kube)
                ca = api.ca_pem.decode() if isinstance(api.ca_pem, bytes) else str(api.ca_pem)
                node_config = NodeConfig(
                    state_dir=state_dir,
                    apiserver_host=url.hostname or "127.0.0.1",
                    apiserver_port=url.port or 443,
                    ca_pem=ca,
                    images=images,
                    hosts_file=hosts_file,
                    # Kubernetes restarts a crashed container at once the first time
                    backoff_initial=1.0,
                    backoff_cap=10.0,
                    shutdown_grace=3.0,
                )
                await nursery.start(serve_node, kube, node_config)
                ready_file.write_text(
                    json.dumps(
                        {"pid": os.getpid(), "url": api.url, "kubeconfig": str(api.kubeconfig_path)}
                    )
                )
                print(f"serving {api.url}", flush=True)
                async for signum in signals:
                    if signum == signal.SIGUSR1:
                        try:
                            send_restart.send_nowait(None)
                        except trio.WouldBlock:
                            pass  # a restart is already pending
                        continue
                    nursery.cancel_scope.cancel()
                    break
        finally:
            ready_file.unlink(missing_ok=True)


def main() -> None:
    """Parse arguments, write the pid record, serve until stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--images", type=Path, default=None)
    parser.add_argument("--down-seconds", type=float, default=2.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    PidRecord(me, os.getpgid(0), start_ticks(me)).write(state_dir / PID_FILE)
    try:
        trio.run(serve, state_dir, args.images, args.down_seconds)
    finally:
        (state_dir / PID_FILE).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
