"""Pod volumes and mounts under the Pod root (blocking file I/O; call in a thread).

Supported volume types: ``emptyDir`` (a directory, kept across container restarts, removed
with the Pod), ``secret`` and ``configMap`` (files per key, or per ``items`` entry with
``path``; ``defaultMode``/``mode`` honoured; ``optional`` honoured, a missing optional
object projected as empty; projected again by the Pod worker when the object changes, the
whole set swapped at once as the kubelet does (:func:`write_atomically`), so keys that are
gone disappear with it) and the *workspace*: a
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
import shutil
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from localkube.node.layout import PodPaths

WORKSPACE_VOLUME = "workspace"


class VolumeError(ValueError):
    """A volume or mount that cannot be set up; the message names it."""


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


#: The symlink naming the current payload directory (the kubelet's ``..data``).
DATA_LINK = "..data"


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
    payload: dict[str, tuple[bytes, int]] = {}
    items = ref.get("items")
    if items:
        for item in items:
            if item["key"] not in keys:
                if ref.get("optional"):
                    continue
                raise VolumeError(f'volume "{name}": key "{item["key"]}" not found')
            rel = item.get("path", item["key"])
            if rel.startswith("/") or ".." in rel.split("/") or rel.startswith(".."):
                raise VolumeError(f'volume "{name}": item path "{rel}" must be relative')
            payload[rel] = (keys[item["key"]], int(item.get("mode", default_mode)))
    else:
        payload = {k: (data, default_mode) for k, data in keys.items()}
    write_atomically(target, payload)


def write_atomically(target: Path, payload: Mapping[str, tuple[bytes, int]]) -> None:
    """Make ``target`` show exactly ``payload`` (relative path -> (bytes, mode)), atomically.

    The kubelet's AtomicWriter layout: the files live in a hidden directory
    ``..<timestamp>.<random>``, the symlink ``..data`` names the current one, and each
    top-level name is a symlink through ``..data``. A change writes a whole new directory
    and swaps ``..data`` with one rename, so a reader never sees some files of the new
    payload with others of the old one (a renewed ``tls.crt`` with the old ``tls.key``).
    A payload equal to what is shown changes nothing (files keep their inodes and
    times). Names that are gone from the payload disappear; regular files at the top level
    (an older layout) are replaced by the symlinks.
    """
    # each container start and the periodic sync project the Pod's volumes, from threads
    # that may overlap: one writer at a time (a few small files each; no contention worth
    # a lock per volume)
    with _WRITE_LOCK:
        _write_atomically(target, payload)


_WRITE_LOCK = threading.Lock()


def _write_atomically(target: Path, payload: Mapping[str, tuple[bytes, int]]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    current = target / DATA_LINK
    if _shows(current, payload):
        return
    directory = target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{secrets.token_hex(4)}"
    directory.mkdir()
    for rel, (data, mode) in payload.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, mode)
    swap = target / f"..data_tmp.{secrets.token_hex(4)}"
    os.symlink(directory.name, swap)
    os.replace(swap, current)  # the one atomic step
    tops = {rel.split("/")[0] for rel in payload}
    for top in tops:
        link = target / top
        want = f"{DATA_LINK}/{top}"
        if link.is_symlink() and os.readlink(link) == want:
            continue
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        temporary = target / f"..{top}.{secrets.token_hex(4)}.link"
        os.symlink(want, temporary)
        os.replace(temporary, link)
    for entry in os.scandir(target):
        if entry.name.startswith("."):
            if entry.name.startswith("..") and entry.name not in (DATA_LINK, directory.name):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
            continue
        if entry.name not in tops:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)


def _shows(current: Path, payload: Mapping[str, tuple[bytes, int]]) -> bool:
    """Whether the ``..data`` directory holds exactly ``payload`` (files, bytes, modes)."""
    if not current.is_symlink():
        return False
    root = current.resolve()
    found: dict[str, os.stat_result] = {}
    for dirpath, _dirs, files in os.walk(root):
        for file in files:
            path = os.path.join(dirpath, file)
            found[os.path.relpath(path, root)] = os.lstat(path)
    if set(found) != set(payload):
        return False
    for rel, (data, mode) in payload.items():
        st = found[rel]
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode:
            return False
        if st.st_size != len(data) or (root / rel).read_bytes() != data:
            return False
    return True


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
    """Write the projected ServiceAccount files (token, namespace, ca.crt), mode 0644.

    Swapped as one set (:func:`write_atomically`), as the kubelet projects the token.
    """
    write_atomically(
        paths.sa_dir,
        {
            "token": (token.encode(), 0o644),
            "namespace": (namespace.encode(), 0o644),
            "ca.crt": (ca_pem.encode(), 0o644),
        },
    )
