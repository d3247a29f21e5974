"""Writing the kubeconfig that points kubectl and kr8s at a localkube API server."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "localkube"


def kubeconfig(
    *, server: str, ca_pem: bytes, token: str, namespace: str = "default"
) -> dict[str, Any]:
    """Return a kubeconfig document with one cluster, user and context named ``localkube``.

    Args:
        server: ``https://host:port``. ca_pem: the cluster CA (PEM bytes).
        token: the bearer token of the user. namespace: the context's default namespace.
    """
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": f"{CONTEXT}-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": f"{CONTEXT}-admin", "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, token: str) -> Path:
    """Write a kubeconfig file readable only by its owner (it holds the admin token).

    The file is written to a temporary name and renamed, so a reader never sees half of it.

    Returns:
        ``path``.

    Raises:
        OSError: the directory is not writable.
    """
    text = yaml.safe_dump(kubeconfig(server=server, ca_pem=ca_pem, token=token), sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path
