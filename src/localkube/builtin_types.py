"""The Go types of built-in kinds, as far as localkube type-checks their bodies.

kube-apiserver decodes a built-in body into its Go struct, so a wrong-typed field anywhere in
it, not only in the top-level ``metadata``, is a 400 BadRequest decoding error
(:mod:`localkube.go_json`), never a 422 or a stored object a controller later trips over.
localkube checks the parts its controllers and validation read:

* every ObjectMeta: the top-level ``metadata`` of every built-in kind (all its fields:
  :func:`localkube.object_meta.meta_problem`), and the ObjectMeta embedded in pod
  templates (``spec.template.metadata`` of Deployment, ReplicaSet, StatefulSet, DaemonSet
  and Job; CronJob's ``spec.jobTemplate.metadata`` and
  ``spec.jobTemplate.spec.template.metadata``): labels, annotations, finalizers,
  ownerReferences;
* PodSpec ``nodeSelector`` (map[string]string), in Pods and pod templates;
* the workloads' ``replicas`` and ``minReadySeconds`` (int32) and label ``selector``
  (metav1.LabelSelector);
* ClusterRole ``aggregationRule`` (``clusterRoleSelectors``, a list of LabelSelectors) and
  the string lists of Role/ClusterRole ``rules``.

Other fields are left to validation (a documented simplification). Fields a kind does not
declare at all are a separate rule, field validation (``fieldValidation``), checked against
Kubernetes' published schemas by :mod:`localkube.field_validation`. StatefulSet, DaemonSet,
Job and CronJob are listed although localkube does not serve them yet, so that serving one
brings its decoding along.
"""

from __future__ import annotations

from typing import Any, Final

from localkube import object_meta
from localkube.errors import ApiError
from localkube.go_json import (
    INT32,
    STRING,
    STRING_MAP,
    STRING_SLICE,
    GoScalar,
    GoSlice,
    GoStruct,
    type_problem,
)
from localkube.object_meta import OBJECT_META

LABEL_SELECTOR: Final = GoStruct(
    "v1.LabelSelector",
    {
        "matchLabels": STRING_MAP,
        "matchExpressions": GoSlice(
            "[]v1.LabelSelectorRequirement",
            GoStruct(
                "v1.LabelSelectorRequirement",
                {
                    "key": STRING,
                    "operator": GoScalar("v1.LabelSelectorOperator", "string"),
                    "values": STRING_SLICE,
                },
            ),
        ),
    },
)
POD_SPEC: Final = GoStruct("v1.PodSpec", {"nodeSelector": STRING_MAP})
POD_TEMPLATE_SPEC: Final = GoStruct(
    "v1.PodTemplateSpec", {"metadata": OBJECT_META, "spec": POD_SPEC}
)


def _workload_spec(name: str) -> GoStruct:
    return GoStruct(
        name,
        {
            "replicas": INT32,
            "minReadySeconds": INT32,
            "selector": LABEL_SELECTOR,
            "template": POD_TEMPLATE_SPEC,
        },
    )


JOB_SPEC: Final = GoStruct(
    "v1.JobSpec", {"selector": LABEL_SELECTOR, "template": POD_TEMPLATE_SPEC}
)
POLICY_RULE: Final = GoStruct(
    "v1.PolicyRule",
    {
        "verbs": STRING_SLICE,
        "apiGroups": STRING_SLICE,
        "resources": STRING_SLICE,
        "resourceNames": STRING_SLICE,
        "nonResourceURLs": STRING_SLICE,
    },
)
RULES: Final = GoSlice("[]v1.PolicyRule", POLICY_RULE)


def _kind(name: str, **fields: Any) -> GoStruct:
    # (the top-level ``metadata`` is checked by object_meta.meta_problem, scalars included)
    return GoStruct(name, fields)


#: Storage key (``group/plural``) -> the Go type of the kind's body.
BUILTIN_TYPES: Final[dict[str, GoStruct]] = {
    "/pods": _kind("v1.Pod", spec=POD_SPEC),
    "apps/deployments": _kind("v1.Deployment", spec=_workload_spec("v1.DeploymentSpec")),
    "apps/replicasets": _kind("v1.ReplicaSet", spec=_workload_spec("v1.ReplicaSetSpec")),
    "apps/statefulsets": _kind("v1.StatefulSet", spec=_workload_spec("v1.StatefulSetSpec")),
    "apps/daemonsets": _kind("v1.DaemonSet", spec=_workload_spec("v1.DaemonSetSpec")),
    "batch/jobs": _kind("v1.Job", spec=JOB_SPEC),
    "batch/cronjobs": _kind(
        "v1.CronJob",
        spec=GoStruct(
            "v1.CronJobSpec",
            {
                "jobTemplate": GoStruct(
                    "v1.JobTemplateSpec", {"metadata": OBJECT_META, "spec": JOB_SPEC}
                )
            },
        ),
    ),
    "rbac.authorization.k8s.io/roles": _kind("v1.Role", rules=RULES),
    "rbac.authorization.k8s.io/clusterroles": _kind(
        "v1.ClusterRole",
        rules=RULES,
        aggregationRule=GoStruct(
            "v1.AggregationRule",
            {"clusterRoleSelectors": GoSlice("[]v1.LabelSelector", LABEL_SELECTOR)},
        ),
    ),
}
#: The Go type of any other built-in kind (only its ObjectMeta is checked).
OTHER_KIND: Final = _kind("v1.Object")


def check_builtin_types(obj: dict[str, Any], *, storage_key: str, kind: str, version: str) -> None:
    """Refuse a built-in body with a wrong-typed field, as kube-apiserver's decoding does.

    Args:
        obj: the request body (a JSON object; not changed).
        storage_key: the kind's storage key (``apps/deployments``), choosing its Go type.
        kind: the resource kind (``Deployment``). version: the API version served (``v1``);
            both only word the error.

    Raises:
        ApiError: 400 BadRequest ``<Kind> in version "<version>" cannot be handled as a
            <Kind>: json: cannot unmarshal <json kind> into Go struct field
            <Struct>.<path> of type <go type>`` for the first wrong-typed field in body
            order (``ObjectMeta.spec.template.metadata.labels of type
            map[string]string``; ``ObjectMeta.metadata.name of type string``).
    """
    go_type = BUILTIN_TYPES.get(storage_key, OTHER_KIND)
    problem = None
    for key, value in obj.items():  # body order: Go reports the first problem
        if key == "metadata" and isinstance(value, dict):
            problem = object_meta.meta_problem(value, prefix="metadata.")
        elif key in go_type.fields:
            problem = type_problem(value, go_type.fields[key], struct=go_type.struct_name, path=key)
        if problem is not None:
            break
    if problem is not None:
        raise ApiError(
            400,
            "BadRequest",
            f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}',
        )
