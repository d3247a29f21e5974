"""Configuration of the node (the kubelet-like Pod runner)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from localkube.images import VENV_BIN, ImageTable
from localkube.node.logrotate import LogLimits


@dataclass
class NodeConfig:
    """How the node runs Pods.

    Attributes:
        state_dir: the cluster state directory (Pod roots go to ``<state_dir>/node/pods``).
        apiserver_host, apiserver_port: where Pods reach the API server
            (``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``).
        ca_pem: the API server's CA certificate (PEM), written to each Pod's ``ca.crt``.
        node_name: the Node object's name.
        host_ip: the node address (``status.hostIP``).
        images: the image table.
        hosts_file: the Service hosts map (``KRT_HOSTS_FILE``), if written.
        backoff_initial, backoff_cap: crash back-off in seconds (10, 300).
        shutdown_grace: seconds containers get between SIGTERM and SIGKILL when the node
            itself stops (``krt dev down``).
        token_seconds: lifetime of projected ServiceAccount tokens (3600).
        log_limits: container log rotation (10 MiB per file, 5 files per run).
        volume_sync_period: seconds between looks at the Secrets and ConfigMaps a running
            Pod's volumes project (changed ones are projected again, as the kubelet's
            periodic sync does; 10 s, the kubelet's is about a minute).
    """

    state_dir: Path
    apiserver_host: str
    apiserver_port: int
    ca_pem: str
    node_name: str = "localkube"
    host_ip: str = "127.0.0.1"
    images: ImageTable = field(default_factory=ImageTable)
    hosts_file: Path | None = None
    backoff_initial: float = 10.0
    backoff_cap: float = 300.0
    shutdown_grace: float = 5.0
    token_seconds: int = 3600
    log_limits: LogLimits = field(default_factory=LogLimits)
    volume_sync_period: float = 10.0

    def base_env(self) -> dict[str, str]:
        """Variables every container gets before its own ``env`` (see docs/localkube.md)."""
        env = {
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
            "KUBERNETES_SERVICE_HOST": self.apiserver_host,
            "KUBERNETES_SERVICE_PORT": str(self.apiserver_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.apiserver_port),
            "KUBERNETES_PORT": f"tcp://{self.apiserver_host}:{self.apiserver_port}",
            "PYTHONUNBUFFERED": "1",
            "KRT_LOCALKUBE": "1",
        }
        for name in ("LANG", "LC_ALL", "TZ", "TMPDIR"):
            if name in os.environ:
                env[name] = os.environ[name]
        if self.hosts_file is not None:
            env["KRT_HOSTS_FILE"] = str(self.hosts_file)
        return env
