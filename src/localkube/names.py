"""Service name resolution for Pod processes: a hosts-style map localkube writes.

There is no cluster DNS. localkube keeps ``<state-dir>/hosts`` in hosts(5) format, one line
per Service with a ClusterIP::

    127.0.200.7 gateway.kruntimes.svc gateway.kruntimes.svc.cluster.local

and passes its path to every container as ``KRT_HOSTS_FILE``. Every container also gets the
Kubernetes service-link variables (``GATEWAY_SERVICE_HOST``/``_PORT``) for the Services of
its namespace that existed when it started. A process that must resolve a
``<svc>.<ns>.svc[.cluster.local]`` name reads the file (:func:`resolve`) or takes the
address through its configuration; outside localkube the same names resolve through the
cluster DNS, so components should only consult the file when ``KRT_HOSTS_FILE`` is set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from localkube.controllers.informer import Informer
from localkube.controllers.kubeapi import Kube, collection_path

log = logging.getLogger(__name__)

HOSTS_ENV = "KRT_HOSTS_FILE"


def hosts_lines(services: Sequence[Mapping[str, Any]]) -> str:
    """The hosts file text for these Services (sorted, stable)."""
    lines = []
    for svc in services:
        ip = svc.get("spec", {}).get("clusterIP")
        if not ip or ip == "None":
            continue
        name = svc["metadata"]["name"]
        ns = svc["metadata"].get("namespace", "default")
        lines.append(f"{ip} {name}.{ns}.svc {name}.{ns}.svc.cluster.local")
    header = "# written by localkube: Service ClusterIPs (do not edit)\n"
    return header + "".join(f"{line}\n" for line in sorted(lines))


def write_hosts(path: Path, services: Sequence[Mapping[str, Any]]) -> None:
    """Atomically replace the hosts file (blocking I/O)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(hosts_lines(services))
    tmp.replace(path)


def resolve(name: str, hosts_file: Path | None = None) -> str | None:
    """Resolve ``<svc>.<ns>.svc[.cluster.local]`` through the hosts file.

    Args:
        name: the host name (a trailing dot is ignored).
        hosts_file: the map; default ``$KRT_HOSTS_FILE``.

    Returns:
        The ClusterIP, or None if the name is not listed (or there is no file).
    """
    path = hosts_file or (Path(os.environ[HOSTS_ENV]) if os.environ.get(HOSTS_ENV) else None)
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError:
        return None
    wanted = name.rstrip(".").lower()
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and wanted in (f.lower() for f in fields[1:]):
            return fields[0]
    return None


async def serve_hosts_file(
    kube: Kube, path: Path, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Keep ``path`` in sync with the Services; never returns unless cancelled."""
    services = Informer(kube, collection_path("v1", "services"), name="names/services")
    changed = trio.Event()

    def on_event(_t: str, _o: dict[str, Any]) -> None:
        changed.set()

    services.add_handler(on_event)
    async with trio.open_nursery() as nursery:
        await nursery.start(services.run)
        started = False
        while True:
            changed = trio.Event()
            await trio.to_thread.run_sync(write_hosts, path, services.items())
            if not started:
                task_status.started()
                started = True
            await changed.wait()
