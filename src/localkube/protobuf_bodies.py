"""Decoding the Kubernetes protobuf request bodies kubectl sends, into the JSON form.

kubectl 1.32's typed clients (``auth can-i``, ``auth whoami``, ``create token``,
``create namespace|configmap|secret|serviceaccount|role|rolebinding|clusterrole|
clusterrolebinding|deployment|service``) send
``Content-Type: application/vnd.kubernetes.protobuf`` and do not fall back to JSON on 415,
while accepting JSON answers. localkube therefore decodes those request bodies, and only
those: the envelope (``k8s\\x00`` + ``runtime.Unknown``) and the messages in
:data:`SCHEMAS`, with field numbers from the upstream ``generated.proto`` files. Any other
kind answers 415. Responses are always JSON. For Deployments, Services and Pods only the
fields those kubectl commands set are decoded (:data:`SCHEMAS`); other fields are dropped.

The wire format is decoded here rather than through generated classes because the
upstream ``.proto`` files are proto2 with gogo extensions and are not shipped in any Python
package; the schema table keeps only the fields these requests carry.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from localkube.errors import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Field = tuple[str, str, bool]
"""``(json name, type, repeated)``; type is ``string``, ``bytes``, ``bool``, ``int``,
``time``, ``intorstr``, ``msg:<Name>``, ``map:string``, ``map:bytes``, ``map:quantity`` or
``map:msg:<Name>``."""

_META = "msg:ObjectMeta"
SCHEMAS: dict[str, dict[int, Field]] = {
    "Unknown": {
        1: ("typeMeta", "msg:TypeMeta", False),
        2: ("raw", "raw", False),
        3: ("contentEncoding", "string", False),
        4: ("contentType", "string", False),
    },
    "TypeMeta": {1: ("apiVersion", "string", False), 2: ("kind", "string", False)},
    "Time": {1: ("seconds", "int", False), 2: ("nanos", "int", False)},
    "ObjectMeta": {
        1: ("name", "string", False),
        2: ("generateName", "string", False),
        3: ("namespace", "string", False),
        5: ("uid", "string", False),
        6: ("resourceVersion", "string", False),
        7: ("generation", "int", False),
        8: ("creationTimestamp", "time", False),
        9: ("deletionTimestamp", "time", False),
        10: ("deletionGracePeriodSeconds", "int", False),
        11: ("labels", "map:string", False),
        12: ("annotations", "map:string", False),
        13: ("ownerReferences", "msg:OwnerReference", True),
        14: ("finalizers", "string", True),
    },
    "OwnerReference": {
        1: ("kind", "string", False),
        3: ("name", "string", False),
        4: ("uid", "string", False),
        5: ("apiVersion", "string", False),
        6: ("controller", "bool", False),
        7: ("blockOwnerDeletion", "bool", False),
    },
    "ExtraValue": {1: ("items", "string", True)},
    "ResourceAttributes": {
        1: ("namespace", "string", False),
        2: ("verb", "string", False),
        3: ("group", "string", False),
        4: ("version", "string", False),
        5: ("resource", "string", False),
        6: ("subresource", "string", False),
        7: ("name", "string", False),
    },
    "NonResourceAttributes": {1: ("path", "string", False), 2: ("verb", "string", False)},
    "SelfSubjectAccessReview": {
        1: ("metadata", _META, False),
        2: ("spec", "msg:SelfSubjectAccessReviewSpec", False),
    },
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "msg:ResourceAttributes", False),
        2: ("nonResourceAttributes", "msg:NonResourceAttributes", False),
    },
    "SubjectAccessReview": {
        1: ("metadata", _META, False),
        2: ("spec", "msg:SubjectAccessReviewSpec", False),
    },
    "LocalSubjectAccessReview": {
        1: ("metadata", _META, False),
        2: ("spec", "msg:SubjectAccessReviewSpec", False),
    },
    "SubjectAccessReviewSpec": {
        1: ("resourceAttributes", "msg:ResourceAttributes", False),
        2: ("nonResourceAttributes", "msg:NonResourceAttributes", False),
        3: ("user", "string", False),
        4: ("groups", "string", True),
        5: ("extra", "map:msg:ExtraValue", False),
        6: ("uid", "string", False),
    },
    "SelfSubjectRulesReview": {
        1: ("metadata", _META, False),
        2: ("spec", "msg:SelfSubjectRulesReviewSpec", False),
    },
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "string", False)},
    "SelfSubjectReview": {1: ("metadata", _META, False)},
    "TokenReview": {1: ("metadata", _META, False), 2: ("spec", "msg:TokenReviewSpec", False)},
    "TokenReviewSpec": {1: ("token", "string", False), 2: ("audiences", "string", True)},
    "TokenRequest": {1: ("metadata", _META, False), 2: ("spec", "msg:TokenRequestSpec", False)},
    "TokenRequestSpec": {
        1: ("audiences", "string", True),
        3: ("boundObjectRef", "msg:BoundObjectReference", False),
        4: ("expirationSeconds", "int", False),
    },
    "BoundObjectReference": {
        1: ("kind", "string", False),
        2: ("apiVersion", "string", False),
        3: ("name", "string", False),
        4: ("uid", "string", False),
    },
    "Namespace": {1: ("metadata", _META, False), 2: ("spec", "msg:NamespaceSpec", False)},
    "NamespaceSpec": {1: ("finalizers", "string", True)},
    "ConfigMap": {
        1: ("metadata", _META, False),
        2: ("data", "map:string", False),
        3: ("binaryData", "map:bytes", False),
        4: ("immutable", "bool", False),
    },
    "Secret": {
        1: ("metadata", _META, False),
        2: ("data", "map:bytes", False),
        3: ("type", "string", False),
        4: ("stringData", "map:string", False),
        5: ("immutable", "bool", False),
    },
    "ServiceAccount": {
        1: ("metadata", _META, False),
        2: ("secrets", "msg:ObjectReference", True),
        3: ("imagePullSecrets", "msg:LocalObjectReference", True),
        4: ("automountServiceAccountToken", "bool", False),
    },
    "ObjectReference": {
        1: ("kind", "string", False),
        2: ("namespace", "string", False),
        3: ("name", "string", False),
        4: ("uid", "string", False),
        5: ("apiVersion", "string", False),
        6: ("resourceVersion", "string", False),
        7: ("fieldPath", "string", False),
    },
    "LocalObjectReference": {1: ("name", "string", False)},
    "PolicyRule": {
        1: ("verbs", "string", True),
        2: ("apiGroups", "string", True),
        3: ("resources", "string", True),
        4: ("resourceNames", "string", True),
        5: ("nonResourceURLs", "string", True),
    },
    "Subject": {
        1: ("kind", "string", False),
        2: ("apiGroup", "string", False),
        3: ("name", "string", False),
        4: ("namespace", "string", False),
    },
    "RoleRef": {
        1: ("apiGroup", "string", False),
        2: ("kind", "string", False),
        3: ("name", "string", False),
    },
    "Role": {1: ("metadata", _META, False), 2: ("rules", "msg:PolicyRule", True)},
    "ClusterRole": {
        1: ("metadata", _META, False),
        2: ("rules", "msg:PolicyRule", True),
        3: ("aggregationRule", "msg:AggregationRule", False),
    },
    "AggregationRule": {1: ("clusterRoleSelectors", "msg:LabelSelector", True)},
    "LabelSelector": {
        1: ("matchLabels", "map:string", False),
        2: ("matchExpressions", "msg:LabelSelectorRequirement", True),
    },
    "LabelSelectorRequirement": {
        1: ("key", "string", False),
        2: ("operator", "string", False),
        3: ("values", "string", True),
    },
    "IntOrString": {
        1: ("type", "int", False),
        2: ("intVal", "int", False),
        3: ("strVal", "string", False),
    },
    "Quantity": {1: ("string", "string", False)},
    "Service": {1: ("metadata", _META, False), 2: ("spec", "msg:ServiceSpec", False)},
    "ServiceSpec": {
        1: ("ports", "msg:ServicePort", True),
        2: ("selector", "map:string", False),
        3: ("clusterIP", "string", False),
        4: ("type", "string", False),
        5: ("externalIPs", "string", True),
        7: ("sessionAffinity", "string", False),
        10: ("externalName", "string", False),
        13: ("publishNotReadyAddresses", "bool", False),
        18: ("clusterIPs", "string", True),
    },
    "ServicePort": {
        1: ("name", "string", False),
        2: ("protocol", "string", False),
        3: ("port", "int", False),
        4: ("targetPort", "intorstr", False),
        5: ("nodePort", "int", False),
        6: ("appProtocol", "string", False),
    },
    "Deployment": {1: ("metadata", _META, False), 2: ("spec", "msg:DeploymentSpec", False)},
    "DeploymentSpec": {
        1: ("replicas", "int", False),
        2: ("selector", "msg:LabelSelector", False),
        3: ("template", "msg:PodTemplateSpec", False),
        4: ("strategy", "msg:DeploymentStrategy", False),
        5: ("minReadySeconds", "int", False),
        6: ("revisionHistoryLimit", "int", False),
        7: ("paused", "bool", False),
        9: ("progressDeadlineSeconds", "int", False),
    },
    "DeploymentStrategy": {1: ("type", "string", False)},
    "PodTemplateSpec": {1: ("metadata", _META, False), 2: ("spec", "msg:PodSpec", False)},
    "Pod": {1: ("metadata", _META, False), 2: ("spec", "msg:PodSpec", False)},
    "PodSpec": {
        2: ("containers", "msg:Container", True),
        3: ("restartPolicy", "string", False),
        4: ("terminationGracePeriodSeconds", "int", False),
        5: ("activeDeadlineSeconds", "int", False),
        6: ("dnsPolicy", "string", False),
        7: ("nodeSelector", "map:string", False),
        8: ("serviceAccountName", "string", False),
        10: ("nodeName", "string", False),
        15: ("imagePullSecrets", "msg:LocalObjectReference", True),
        16: ("hostname", "string", False),
        17: ("subdomain", "string", False),
        19: ("schedulerName", "string", False),
        20: ("initContainers", "msg:Container", True),
        21: ("automountServiceAccountToken", "bool", False),
        24: ("priorityClassName", "string", False),
        30: ("enableServiceLinks", "bool", False),
    },
    "Container": {
        1: ("name", "string", False),
        2: ("image", "string", False),
        3: ("command", "string", True),
        4: ("args", "string", True),
        5: ("workingDir", "string", False),
        6: ("ports", "msg:ContainerPort", True),
        7: ("env", "msg:EnvVar", True),
        8: ("resources", "msg:ResourceRequirements", False),
        13: ("terminationMessagePath", "string", False),
        14: ("imagePullPolicy", "string", False),
        20: ("terminationMessagePolicy", "string", False),
    },
    "ContainerPort": {
        1: ("name", "string", False),
        2: ("hostPort", "int", False),
        3: ("containerPort", "int", False),
        4: ("protocol", "string", False),
        5: ("hostIP", "string", False),
    },
    "EnvVar": {1: ("name", "string", False), 2: ("value", "string", False)},
    "ResourceRequirements": {
        1: ("limits", "map:quantity", False),
        2: ("requests", "map:quantity", False),
    },
    "RoleBinding": {
        1: ("metadata", _META, False),
        2: ("subjects", "msg:Subject", True),
        3: ("roleRef", "msg:RoleRef", False),
    },
    "ClusterRoleBinding": {
        1: ("metadata", _META, False),
        2: ("subjects", "msg:Subject", True),
        3: ("roleRef", "msg:RoleRef", False),
    },
}
"""Decodable messages by name; the top-level kinds are those with a ``metadata`` field."""


POINTER_FIELDS: dict[str, frozenset[str]] = {
    "ObjectMeta": frozenset({"deletionGracePeriodSeconds"}),
    "OwnerReference": frozenset({"controller", "blockOwnerDeletion"}),
    "TokenRequestSpec": frozenset({"expirationSeconds"}),
    "ConfigMap": frozenset({"immutable"}),
    "Secret": frozenset({"immutable"}),
    "ServiceAccount": frozenset({"automountServiceAccountToken"}),
    "DeploymentSpec": frozenset({"replicas", "revisionHistoryLimit", "progressDeadlineSeconds"}),
    "PodSpec": frozenset(
        {
            "terminationGracePeriodSeconds",
            "activeDeadlineSeconds",
            "automountServiceAccountToken",
            "enableServiceLinks",
        }
    ),
}
"""Fields that are pointers in the Go types: a zero or false value there was set on purpose."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        result = 0
        shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 63:
                raise ValueError("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError("truncated field")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk


def _scalar(kind: str, wire: int, value: int | bytes) -> Any:
    if kind == "string":
        return value.decode() if isinstance(value, bytes) else str(value)
    if kind == "bytes":
        return base64.b64encode(value).decode() if isinstance(value, bytes) else ""
    if kind == "raw":
        return value
    if kind == "bool":
        return bool(value)
    if kind == "int":
        number = int(value) if isinstance(value, int) else 0
        return number - (1 << 64) if number >= 1 << 63 else number
    if kind == "time":
        seconds = (
            int(decode_message("Time", value).get("seconds", 0)) if isinstance(value, bytes) else 0
        )
        if seconds == 0:
            return None
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "intorstr":
        parts = decode_message("IntOrString", value if isinstance(value, bytes) else b"")
        return parts.get("strVal", "") if parts.get("type") == 1 else int(parts.get("intVal", 0))
    if kind == "quantity":
        return decode_message("Quantity", value if isinstance(value, bytes) else b"").get(
            "string", ""
        )
    if kind.startswith("msg:"):
        return decode_message(kind[4:], value if isinstance(value, bytes) else b"")
    raise ValueError(f"unknown field type {kind}")


def decode_message(name: str, data: bytes) -> dict[str, Any]:
    """Decode one message of :data:`SCHEMAS` into a JSON-style dict (unknown fields skipped).

    Raises:
        ValueError: malformed wire data.
    """
    schema = SCHEMAS[name]
    reader = _Reader(data)
    result: dict[str, Any] = {}
    while reader.pos < len(data):
        tag = reader.varint()
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value = reader.varint()
        elif wire == 1:
            value = reader.take(8)
        elif wire == 2:
            value = reader.take(reader.varint())
        elif wire == 5:
            value = reader.take(4)
        else:
            raise ValueError(f"unsupported wire type {wire}")
        field = schema.get(number)
        if field is None:
            continue
        key, kind, repeated = field
        if kind.startswith("map:"):
            entry = _map_entry(kind[4:], value if isinstance(value, bytes) else b"")
            result.setdefault(key, {}).update(entry)
        elif repeated:
            result.setdefault(key, []).append(_scalar(kind, wire, value))
        else:
            decoded = _scalar(kind, wire, value)
            # gogo-protobuf writes every non-pointer field, JSON omits empty ones; a zero
            # number or false is kept only for pointer fields, where it was set on purpose
            if decoded == "" or decoded is None:
                continue
            if decoded is False or (type(decoded) is int and decoded == 0):
                if key not in POINTER_FIELDS.get(name, ()):
                    continue
            result[key] = decoded
    return result


def _map_entry(kind: str, data: bytes) -> dict[str, Any]:
    reader = _Reader(data)
    key = ""
    value: Any = "" if kind in ("string", "bytes", "quantity") else {}
    while reader.pos < len(data):
        tag = reader.varint()
        if tag & 7 != 2:
            raise ValueError("map entries must be length-delimited")
        chunk = reader.take(reader.varint())
        if tag >> 3 == 1:
            key = chunk.decode()
        else:
            value = _scalar(kind, 2, chunk)
    if kind == "msg:ExtraValue":
        value = value.get("items", []) if isinstance(value, dict) else []
    return {key: value}


def decode_body(raw: bytes) -> dict[str, Any]:
    """Decode a ``application/vnd.kubernetes.protobuf`` request body to a JSON object.

    Raises:
        ApiError: 415 for a kind localkube does not decode, 400 for malformed data.
    """
    if not raw.startswith(MAGIC):
        raise ApiError(
            400, "BadRequest", "protobuf body does not start with the k8s\\x00 envelope prefix"
        )
    try:
        envelope = decode_message("Unknown", raw[len(MAGIC) :])
        type_meta = envelope.get("typeMeta") or {}
        kind = str(type_meta.get("kind", ""))
        if kind not in SCHEMAS or "metadata" not in {f[0] for f in SCHEMAS[kind].values()}:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"localkube decodes protobuf only for {', '.join(sorted(k for k, v in SCHEMAS.items() if 1 in v and v[1][0] == 'metadata'))}; send {kind or 'this object'} as application/json",
            )
        payload = envelope.get("raw", b"")
        body = decode_message(kind, payload if isinstance(payload, bytes) else b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(
            400, "BadRequest", f"the body of the request could not be decoded as protobuf: {exc}"
        ) from None
    return {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind, **body}
