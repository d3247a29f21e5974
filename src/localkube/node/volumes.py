"""Pod volumes and mounts under the Pod root (blocking file I/O; call in a thread).

Supported volume types: ``emptyDir`` (a directory, kept across container restarts, removed
with the Pod), ``secret`` and ``configMap`` (files per key, or per ``items`` entry with
``path``; ``defaultMode``/``mode`` honoured; ``optional`` honoured, a missing optional
object projected as empty; projected again by the Pod worker when the object changes, each
file replaced atomically and files of keys that are gone removed) and the *workspace*: a
volume named ``workspace`` of any emptyDir kind is the Pod's shared workspace directory
(``<pod-root>/workspace``, also every container's cwd and HOME). Other volume types are
rejected with :class:`VolumeError` naming the volume, and the container reports
``CreateContainerConfigError``.

A ``volumeMount`` becomes a symlink at ``<pod-root>/<mountPath>`` to the volume directory
(or its ``subPath``); ``readOnly`` is not enforced. The projected ServiceAccount volume is
written by :func:`write_service_account` to ``<pod-root>/var/run/secrets/kubernetes.io/
serviceaccount/`` (token, namespace, ca.crt).
"""

from __future__ import annotations

import base64
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from localkube.node.layout import PodPaths

WORKSPACE_VOLUME = "workspace"


class VolumeError(ValueError):
    """A volume or mount that cannot be set up; the message names it."""


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``path`` atomically (a new file renamed into place), unless it already holds
    exactly ``data`` with ``mode``: a container start or a sync of an unchanged object
    leaves the file, its inode and mtime alone, so a process watching it sees no change."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode:
            if st.st_size == len(data) and path.read_bytes() == data:
                return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def _key_bytes(obj: Mapping[str, Any], kind: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if kind == "secret":
        for k, v in (obj.get("data") or {}).items():
            out[k] = base64.b64decode(v)
        for k, v in (obj.get("stringData") or {}).items():
            out[k] = str(v).encode()
    else:
        for k, v in (obj.get("data") or {}).items():
            out[k] = str(v).encode()
        for k, v in (obj.get("binaryData") or {}).items():
            out[k] = base64.b64decode(v)
    return out


def _project(
    target: Path, volume: Mapping[str, Any], source: Mapping[str, Any] | None, kind: str
) -> None:
    name = volume["name"]
    ref = volume[kind]
    default_mode = int(ref.get("defaultMode", 0o644))
    if source is None:
        if not ref.get("optional"):
            obj_name = ref.get("secretName") if kind == "secret" else ref.get("name")
            raise VolumeError(f'volume "{name}": {kind.lower()} "{obj_name}" not found')
        # the kubelet projects a missing optional object as empty: an optional Secret
        # deleted while the Pod runs takes its files with it
        source = {}
    keys = _key_bytes(source, kind)
    target.mkdir(parents=True, exist_ok=True)
    items = ref.get("items")
    if items:
        wanted = set()
        for item in items:
            if item["key"] not in keys:
                if ref.get("optional"):
                    continue
                raise VolumeError(f'volume "{name}": key "{item["key"]}" not found')
            rel = item.get("path", item["key"])
            if rel.startswith("/") or ".." in rel.split("/"):
                raise VolumeError(f'volume "{name}": item path "{rel}" must be relative')
            _write_file(target / rel, keys[item["key"]], int(item.get("mode", default_mode)))
            wanted.add(rel.split("/")[0])
    else:
        for k, data in keys.items():
            _write_file(target / k, data, default_mode)
        wanted = set(keys)
    # projected again after a change (the kubelet's sync): a key that is gone goes too
    for entry in os.scandir(target):
        if entry.name not in wanted and not entry.name.startswith("."):
            if entry.is_file(follow_symlinks=False) or entry.is_symlink():
                os.unlink(entry.path)


def volume_dir(paths: PodPaths, name: str) -> Path:
    """Return where volume ``name`` lives (the workspace for the workspace volume)."""
    return paths.workspace if name == WORKSPACE_VOLUME else paths.volume(name)


def prepare_volumes(
    paths: PodPaths,
    pod: Mapping[str, Any],
    *,
    secrets: Mapping[str, Mapping[str, Any]],
    configmaps: Mapping[str, Mapping[str, Any]],
) -> None:
    """Create the Pod's volumes (idempotent: re-run after a Secret/ConfigMap change).

    Raises:
        VolumeError: for an unsupported volume type or a missing required Secret/ConfigMap.
    """
    paths.workspace.mkdir(parents=True, exist_ok=True)
    for v in pod.get("spec", {}).get("volumes", []) or []:
        name = v["name"]
        target = volume_dir(paths, name)
        if "emptyDir" in v:
            target.mkdir(parents=True, exist_ok=True)
        elif "secret" in v:
            _project(target, v, secrets.get(v["secret"].get("secretName", "")), "secret")
        elif "configMap" in v:
            _project(target, v, configmaps.get(v["configMap"].get("name", "")), "configMap")
        else:
            kinds = sorted(k for k in v if k != "name")
            raise VolumeError(
                f'volume "{name}": type {kinds} is not supported by localkube '
                "(emptyDir, secret, configMap and the workspace volume are)"
            )


def mount_volumes(paths: PodPaths, pod: Mapping[str, Any], container: Mapping[str, Any]) -> None:
    """Create the container's ``volumeMounts`` as symlinks under the Pod root.

    Raises:
        VolumeError: for a mount of an undeclared volume, or a mountPath/subPath that is
            not allowed.
    """
    declared = {v["name"] for v in pod.get("spec", {}).get("volumes", []) or []}
    for i, m in enumerate(container.get("volumeMounts", []) or []):
        where = f'container "{container.get("name")}" volumeMounts[{i}]'
        if m["name"] not in declared:
            raise VolumeError(f'{where}: volume "{m["name"]}" is not declared in spec.volumes')
        try:
            link = paths.in_pod(m["mountPath"])
        except ValueError as exc:
            raise VolumeError(f"{where}.mountPath: {exc}") from None
        source = volume_dir(paths, m["name"])
        sub = m.get("subPath", "")
        if sub:
            if sub.startswith("/") or ".." in sub.split("/"):
                raise VolumeError(f'{where}.subPath: "{sub}" must be a relative path without ..')
            source = source / sub
            if not source.exists():
                source.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            if Path(os.readlink(link)) == source:
                continue
            link.unlink()
        elif link.exists():
            raise VolumeError(f"{where}.mountPath: {m['mountPath']} collides with another path")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source)


def write_service_account(paths: PodPaths, *, token: str, namespace: str, ca_pem: str) -> None:
    """Write the projected ServiceAccount files (token, namespace, ca.crt), mode 0644."""
    for name, data in (("token", token), ("namespace", namespace), ("ca.crt", ca_pem)):
        _write_file(paths.sa_dir / name, data.encode(), 0o644)
