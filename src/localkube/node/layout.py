"""The node's on-disk layout under the cluster state directory.

Everything the node writes for a Pod lives under one *Pod root*::

    <state-dir>/node/pods/<namespace>_<name>_<uid>/
        var/run/secrets/kubernetes.io/serviceaccount/{token,namespace,ca.crt}
        volumes/<volume-name>/         emptyDir, secret and configMap volume contents
        workspace/                     shared by the Pod's containers: cwd and HOME
        <mountPath>                    a symlink to the mounted volume (or its subPath)
        logs/<container>/<restartCount>.log    CRI-format container logs
        logs/<container>/<restartCount>.exited written when that container run ended
        run/<container>.pid            {"pid", "pgid", "start_ticks"} of the running process

A container's absolute paths (``mountPath``, the ServiceAccount directory) appear under the
Pod root: ``/etc/config`` is ``$KRT_POD_ROOT/etc/config``. The log layout mirrors the
kubelet's ``/var/log/pods/<ns>_<name>_<uid>/<container>/<restart>.log``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def node_dir(state_dir: Path) -> Path:
    """Return the node's directory (``<state-dir>/node``)."""
    return state_dir / "node"


def pods_dir(state_dir: Path) -> Path:
    """Return the directory holding every Pod root (``<state-dir>/node/pods``)."""
    return node_dir(state_dir) / "pods"


@dataclass(frozen=True)
class PodPaths:
    """Paths of one Pod root.

    Attributes:
        root: the Pod root directory.
    """

    root: Path

    @classmethod
    def for_pod(cls, state_dir: Path, namespace: str, name: str, uid: str) -> PodPaths:
        """Return the paths for the Pod ``namespace/name`` with ``uid``."""
        return cls(pods_dir(state_dir) / f"{namespace}_{name}_{uid}")

    @property
    def sa_dir(self) -> Path:
        """The projected ServiceAccount directory (token, namespace, ca.crt)."""
        return self.in_pod(SA_MOUNT_PATH)

    @property
    def workspace(self) -> Path:
        """The shared per-Pod workspace (every container's cwd and HOME)."""
        return self.root / "workspace"

    @property
    def log_dir(self) -> Path:
        """The Pod's log directory (argument of :func:`localkube.node.logs.read_log`)."""
        return self.root / "logs"

    @property
    def run_dir(self) -> Path:
        """Where pid files of running containers live."""
        return self.root / "run"

    def volume(self, name: str) -> Path:
        """The directory holding volume ``name``."""
        return self.root / "volumes" / name

    def pid_file(self, container: str) -> Path:
        """The pid file of ``container``'s running process."""
        return self.run_dir / f"{container}.pid"

    def in_pod(self, absolute: str) -> Path:
        """Map a container path such as ``/etc/config`` to its place under the Pod root.

        Raises:
            ValueError: if the path is not absolute or climbs out with ``..``.
        """
        if not absolute.startswith("/"):
            raise ValueError(f"path {absolute!r} must be absolute")
        parts = [p for p in absolute.split("/") if p and p != "."]
        if ".." in parts:
            raise ValueError(f"path {absolute!r} must not contain '..'")
        return self.root.joinpath(*parts)
