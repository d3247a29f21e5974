"""Container environment resolution (pure): ``env``, ``envFrom``, ``$(VAR)`` expansion.

Implements the kubelet's rules for the container environment: ``envFrom`` first (in order,
with ``prefix``), then ``env`` in order, where later names override earlier ones; ``value``
strings expand ``$(NAME)`` references to variables defined before them (``$$`` escapes a
``$``; unknown references stay as written); ``valueFrom`` reads ``fieldRef``
(``metadata.name``, ``metadata.namespace``, ``metadata.uid``, ``metadata.labels['k']``,
``metadata.annotations['k']``, ``spec.nodeName``, ``spec.serviceAccountName``,
``status.podIP``, ``status.podIPs``, ``status.hostIP``, ``status.hostIPs``),
``secretKeyRef`` and ``configMapKeyRef`` (``optional`` honoured).

The caller fetches the Secrets and ConfigMaps named by :func:`referenced_objects` first; a
missing required one raises :class:`ContainerConfigError`, which the node reports as the
container's waiting reason ``CreateContainerConfigError``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

_FIELD_INDEX = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


class ContainerConfigError(ValueError):
    """The container's configuration cannot be resolved (missing Secret/key, bad fieldRef).

    The message says which env entry and which object or key.
    """


def expand(value: str, env: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` references in ``value`` from ``env`` (Kubernetes rules)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, value)


def referenced_objects(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Return the names of Secrets and ConfigMaps the Pod's containers and volumes read."""
    secrets: set[str] = set()
    configmaps: set[str] = set()
    spec = pod.get("spec", {})
    for c in list(spec.get("initContainers", [])) + list(spec.get("containers", [])):
        for e in c.get("env", []) or []:
            vf = e.get("valueFrom") or {}
            if "secretKeyRef" in vf:
                secrets.add(vf["secretKeyRef"]["name"])
            if "configMapKeyRef" in vf:
                configmaps.add(vf["configMapKeyRef"]["name"])
        for ef in c.get("envFrom", []) or []:
            if "secretRef" in ef:
                secrets.add(ef["secretRef"]["name"])
            if "configMapRef" in ef:
                configmaps.add(ef["configMapRef"]["name"])
    for v in spec.get("volumes", []) or []:
        if "secret" in v:
            secrets.add(v["secret"]["secretName"])
        if "configMap" in v:
            configmaps.add(v["configMap"]["name"])
    return secrets, configmaps


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """Return the value of a ``fieldRef.fieldPath`` for the Pod.

    Raises:
        ContainerConfigError: for an unsupported field path.
    """
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", []) or []),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", []) or []),
    }
    if path in simple:
        return str(simple[path] or "")
    m = _FIELD_INDEX.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ContainerConfigError(f'unsupported fieldRef fieldPath "{path}"')


def _secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    if key in (secret.get("data") or {}):
        return base64.b64decode(secret["data"][key]).decode("utf-8", "replace")
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    return None


def _configmap_value(cm: Mapping[str, Any], key: str) -> str | None:
    if key in (cm.get("data") or {}):
        return str(cm["data"][key])
    if key in (cm.get("binaryData") or {}):
        return base64.b64decode(cm["binaryData"][key]).decode("utf-8", "replace")
    return None


def _keys(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    out: dict[str, str] = {}
    fields = ("data", "stringData") if kind == "Secret" else ("data", "binaryData")
    for f in fields:
        for k in obj.get(f) or {}:
            value = _secret_value(obj, k) if kind == "Secret" else _configmap_value(obj, k)
            if value is not None:
                out[k] = value
    return out


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    secrets: Mapping[str, Mapping[str, Any]],
    configmaps: Mapping[str, Mapping[str, Any]],
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the container's environment.

    Args:
        pod: the Pod object (``status.podIP`` already set).
        container: one entry of ``spec.containers``.
        secrets: Secret name -> Secret object, for the Pod's namespace.
        configmaps: ConfigMap name -> ConfigMap object, for the Pod's namespace.
        base: variables set before the Pod's own (service links, KUBERNETES_SERVICE_HOST);
            the container's ``env`` and ``envFrom`` override them.

    Raises:
        ContainerConfigError: naming the env entry and the missing object or key.
    """
    cname = container.get("name", "")
    env: dict[str, str] = dict(base or {})
    for i, ef in enumerate(container.get("envFrom", []) or []):
        prefix = ef.get("prefix", "")
        for kind, field, source in (
            ("Secret", "secretRef", secrets),
            ("ConfigMap", "configMapRef", configmaps),
        ):
            if field not in ef:
                continue
            ref = ef[field]
            obj = source.get(ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(
                    f'container "{cname}" envFrom[{i}]: {kind.lower()} "{ref["name"]}" not found'
                )
            for k, v in _keys(obj, kind).items():
                env[prefix + k] = v
    for i, e in enumerate(container.get("env", []) or []):
        name = e["name"]
        where = f'container "{cname}" env[{i}] ({name})'
        if "valueFrom" not in e:
            env[name] = expand(str(e.get("value", "")), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            try:
                env[name] = field_value(pod, vf["fieldRef"]["fieldPath"])
            except ContainerConfigError as exc:
                raise ContainerConfigError(f"{where}: {exc}") from None
        elif "secretKeyRef" in vf or "configMapKeyRef" in vf:
            is_secret = "secretKeyRef" in vf
            ref = vf["secretKeyRef" if is_secret else "configMapKeyRef"]
            kind = "secret" if is_secret else "configmap"
            obj = (secrets if is_secret else configmaps).get(ref["name"])
            value: str | None = None
            if obj is not None:
                value = (
                    _secret_value(obj, ref["key"])
                    if is_secret
                    else _configmap_value(obj, ref["key"])
                )
            if value is None:
                if ref.get("optional"):
                    continue
                if obj is None:
                    raise ContainerConfigError(f'{where}: {kind} "{ref["name"]}" not found')
                raise ContainerConfigError(
                    f'{where}: couldn\'t find key {ref["key"]} in {kind} "{ref["name"]}"'
                )
            env[name] = value
        else:
            raise ContainerConfigError(
                f"{where}: unsupported valueFrom {sorted(vf)} (localkube supports fieldRef, "
                "secretKeyRef and configMapKeyRef)"
            )
    return env


def service_link_env(services: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Return the Docker-link-style variables Kubernetes sets for a namespace's Services.

    For Service ``my-svc`` with clusterIP 127.0.200.7 and first port 80:
    ``MY_SVC_SERVICE_HOST=127.0.200.7``, ``MY_SVC_SERVICE_PORT=80`` and
    ``MY_SVC_SERVICE_PORT_<PORTNAME>=...`` per named port.
    """
    env: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec", {})
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                env[f"{prefix}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
    return env
