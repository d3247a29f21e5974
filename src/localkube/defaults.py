"""Field defaults of built-in kinds, as kube-apiserver applies them on every write (pure).

The subset of Kubernetes' ``SetDefaults_*`` functions (and the ServiceAccount admission
plugin's ``spec.serviceAccountName``) that clients and controllers read back:

* Pod (and Pod templates): ``restartPolicy: Always``, ``terminationGracePeriodSeconds: 30``,
  ``dnsPolicy: ClusterFirst``, ``schedulerName: default-scheduler``,
  ``securityContext: {}``, ``enableServiceLinks: true``; containers get
  ``terminationMessagePath``, ``terminationMessagePolicy: File``, ``imagePullPolicy``
  (``Always`` for ``:latest`` or untagged images, else ``IfNotPresent``), ``resources: {}``
  and ``protocol: TCP`` on ports. A created Pod runs as ServiceAccount ``default`` unless
  it names one.
* Deployment: ``replicas: 1``, ``RollingUpdate`` strategy with 25%/25%,
  ``revisionHistoryLimit: 10``, ``progressDeadlineSeconds: 600``; ReplicaSet:
  ``replicas: 1``.
* Service: ``type: ClusterIP``, ``sessionAffinity: None``, ports ``protocol: TCP`` and
  ``targetPort`` = ``port``; Secret: ``type: Opaque``.

Each function changes the object in place and only fills fields that are absent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from localkube import config_data


def _image_pull_policy(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if "@" in image:
        return "IfNotPresent"
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    """Default a PodSpec (a Pod's or a template's)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    # the deprecated serviceAccount mirrors serviceAccountName (v1 conversion)
    if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    elif spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
            if isinstance(container.get("image"), str):
                container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
            for port in container.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def pod_defaults(pod: dict[str, Any], *, creating: bool) -> None:
    """Default a Pod; on create also ``spec.serviceAccountName: default``."""
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    pod_spec_defaults(spec)
    if creating:
        name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = name
        spec["serviceAccount"] = name


def _template_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return {}
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        pod_spec_defaults(template["spec"])
    return spec


def deployment_defaults(obj: dict[str, Any], *, creating: bool) -> None:
    """Default an apps/v1 Deployment."""
    spec = _template_defaults(obj)
    if not spec and not isinstance(obj.get("spec"), dict):
        return
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    if isinstance(strategy, dict):
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            if isinstance(rolling, dict):
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)


def replicaset_defaults(obj: dict[str, Any], *, creating: bool) -> None:
    """Default an apps/v1 ReplicaSet."""
    spec = _template_defaults(obj)
    if isinstance(obj.get("spec"), dict):
        spec.setdefault("replicas", 1)


def service_defaults(obj: dict[str, Any], *, creating: bool) -> None:
    """Default a Service."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def secret_defaults(obj: dict[str, Any], *, creating: bool) -> None:
    """Default a Secret; ``stringData`` is folded into ``data`` (never stored)."""
    obj.setdefault("type", "Opaque")
    config_data.fold_string_data(obj)


DEFAULTERS: dict[str, Callable[..., None]] = {
    "/pods": pod_defaults,
    "apps/deployments": deployment_defaults,
    "apps/replicasets": replicaset_defaults,
    "/services": service_defaults,
    "/secrets": secret_defaults,
}
"""Storage key -> defaulting function ``(obj, *, creating)``."""
