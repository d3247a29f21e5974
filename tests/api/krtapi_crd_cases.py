"""Admission cases for the Run and Runtime CRDs, shared by the jsonschema+celpy harness tests
and the localkube CRDValidator tests. Each invalid case names a substring the error must contain."""

from __future__ import annotations

from typing import Any, NamedTuple

from krtapi_samples import SHA, full_status, function_run, repo_run, runtime, task_run, with_changes

from krt.api.limits import MAX_ENV_TOTAL_BYTES


class Case(NamedTuple):
    id: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    expect: str  # "a&&b": one error message contains every part; "" means it must be accepted


def _env_of_total(total: int) -> list[dict[str, str]]:
    """``spec.env`` of 8 variables whose size (UTF-8 name + value + 2 each) is ``total``."""
    names = [f"V{i}" for i in range(8)]
    values = total - sum(len(n) + 2 for n in names)
    sizes = [values // 8 + (1 if i < values % 8 else 0) for i in range(8)]
    return [{"name": n, "value": "x" * size} for n, size in zip(names, sizes, strict=True)]


_T = task_run()
_F = function_run()
_LONG = "x" * (256 * 1024 + 1)


def _with_status(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    status = full_status()
    for key, value in fields.items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    return with_changes(obj, status=status)


VALID_RUNS: list[Case] = [
    Case("task-all-fields", _T, None, ""),
    Case("seed-function", _F, None, ""),
    Case("repo-pinned", repo_run(), None, ""),
    Case("mode-absent-is-task", with_changes(_T, spec__mode=None), None, ""),
    Case("minimal", {"spec": {"runtime": "bash"}}, None, ""),
    Case("dotted-package-handler", with_changes(_F, spec__mode={"function": {"handler": "pkg.sub.mod.fn"}}), None, ""),
    Case("entrypoint-nested", with_changes(_T, spec__mode__task__entrypoint="bin/..x/./run.sh"), None, ""),
    Case("inline-path-dotted-names", with_changes(_T, spec__source__inlinePath="./pkg/.env.d/.run.sh"), None, ""),
    Case("backoff-zero", with_changes(_T, spec__retryPolicy__backoff="0"), None, ""),
    Case("timeout-fraction", with_changes(_T, spec__timeout="1.5h"), None, ""),
    Case("timeout-go-max", with_changes(_T, spec__timeout="2562047h47m16.854775807s"), None, ""),
    Case("timeout-go-max-in-parts", with_changes(_T, spec__timeout="2562047h2836.854775807s"), None, ""),
    Case("backoff-micro", with_changes(_T, spec__retryPolicy__backoff="1500\u00b5s"), None, ""),
    Case("seed-string-requests", with_changes(_T, spec__resources__requests={"runs": "1", "gpu": "2"}), None, ""),
    Case("full-status", _with_status(_F), None, ""),
    Case("ttl-mutable", with_changes(_T, spec__ttlSecondsAfterFinished=5), _T, ""),
    Case("cancel-false-to-true", with_changes(_T, spec__cancelRequested=True),
         with_changes(_T, spec__cancelRequested=False), ""),
    Case("cancel-absent-to-true", with_changes(_F, spec__cancelRequested=True), _F, ""),
    Case("cancel-true-stays", with_changes(_T, spec__cancelRequested=True), with_changes(_T, spec__cancelRequested=True), ""),
    Case("status-update-active", _with_status(_F, phase="Running"), _with_status(_F, phase="Scheduled"), ""),
    Case("status-terminal-same", _with_status(_F, phase="Failed", message="x"), _with_status(_F, phase="Failed"), ""),
    Case("status-ready-to-pending", _with_status(_F, phase="Pending", assignedPod=None, assignedPodUID=None), _with_status(_F, phase="Ready"), ""),
    Case("outputs-at-bounds", _with_status(_T, outputs={f"k{i}": "v" for i in range(64)}), None, ""),
    # F22: spec.env total at the bound, counted as the Runtime Servers count it
    Case("env-total-at-bound", with_changes(_T, spec__env=_env_of_total(MAX_ENV_TOTAL_BYTES)), None, ""),
    Case("env-without-values", with_changes(_T, spec__env=[{"name": "A"}, {"name": "B"}]), None, ""),
]  # fmt: skip

INVALID_RUNS: list[Case] = [
    Case("both-modes", with_changes(_T, spec__mode__function={"handler": "main.invoke"}), None,
         "exactly one of spec.mode.task or spec.mode.function must be set"),
    Case("no-mode-in-mode", with_changes(_T, spec__mode={}), None,
         "exactly one of spec.mode.task or spec.mode.function must be set"),
    Case("entrypoint-dotdot", with_changes(_T, spec__mode__task__entrypoint="../etc/passwd"), None,
         "spec.mode.task.entrypoint must not contain a '..' path segment"),
    Case("entrypoint-inner-dotdot", with_changes(_T, spec__mode__task__entrypoint="a/../../b"), None,
         "spec.mode.task.entrypoint must not contain a '..' path segment"),
    Case("entrypoint-trailing-dotdot", with_changes(_T, spec__mode__task__entrypoint="a/.."), None,
         "'..' path segment"),
    Case("entrypoint-absolute", with_changes(_T, spec__mode__task__entrypoint="/bin/sh"), None,
         "spec.mode.task.entrypoint must be a relative path"),
    Case("inline-path-dotdot", with_changes(_T, spec__source__inlinePath=".."), None,
         "spec.source.inlinePath must not contain a '..' path segment"),
    Case("inline-path-absolute", with_changes(_T, spec__source__inlinePath="/tmp/x"), None,
         "spec.source.inlinePath must be a relative path"),
    Case("inline-path-trailing-slash", with_changes(_T, spec__source__inlinePath="dir/"), None,
         "spec.source.inlinePath must name a file: it must not end in '/' or '/.'"),
    Case("inline-path-trailing-dot", with_changes(_T, spec__source__inlinePath="dir/."), None,
         "spec.source.inlinePath must name a file"),
    Case("inline-path-dot", with_changes(_T, spec__source__inlinePath="."), None,
         "spec.source.inlinePath must name a file"),
    Case("runtime-changed", with_changes(_T, spec__runtime="bash"), _T, "spec.runtime is immutable"),
    Case("source-changed", with_changes(_T, spec__source__inline="print(2)"), _T, "spec.source is immutable"),
    Case("source-removed", with_changes(_T, spec__source=None), _T, "spec.source is immutable"),
    Case("mode-changed", with_changes(_T, spec__mode={"function": {"handler": "main.invoke"}}), _T,
         "spec.mode is immutable"),
    Case("mode-added", _T, with_changes(_T, spec__mode=None), "spec.mode is immutable"),
    Case("env-changed", with_changes(_T, spec__env=[{"name": "X", "value": "1"}]), _T, "spec.env is immutable"),
    Case("timeout-changed", with_changes(_T, spec__timeout="2h"), _T, "spec.timeout is immutable"),
    Case("timeout-added", with_changes(_F, spec__timeout="2h"), _F, "spec.timeout is immutable"),
    Case("retry-changed", with_changes(_T, spec__retryPolicy__maxAttempts=5), _T, "spec.retryPolicy is immutable"),
    Case("resources-changed", with_changes(_T, spec__resources__requests={"runs": 2}), _T,
         "spec.resources is immutable"),
    Case("cancel-true-to-false", with_changes(_T, spec__cancelRequested=False),
         with_changes(_T, spec__cancelRequested=True), "spec.cancelRequested may only change from false to true"),
    Case("cancel-true-to-absent", with_changes(_T, spec__cancelRequested=None),
         with_changes(_T, spec__cancelRequested=True), "spec.cancelRequested may only change from false to true"),
    Case("handler-no-dot", with_changes(_F, spec__mode__function__handler="main"), None,
         "spec.mode.function.handler must be module.function"),
    Case("handler-path", with_changes(_F, spec__mode__function__handler="lib/main.invoke"), None,
         "spec.mode.function.handler must be module.function"),
    Case("handler-trailing-dot", with_changes(_F, spec__mode__function__handler="main."), None,
         "spec.mode.function.handler must be module.function"),
    Case("repo-without-sha", with_changes(repo_run(), spec__source__commitSHA=None), None,
         "spec.source.repoURL requires spec.source.commitSHA"),
    Case("sha-without-repo", with_changes(_T, spec__source={"inline": "x", "commitSHA": SHA}), None,
         "spec.source.commitSHA requires spec.source.repoURL"),
    Case("sha-short", with_changes(repo_run(), spec__source__commitSHA="abc123"), None,
         "spec.source.commitSHA must be 40 hexadecimal characters"),
    Case("sha-not-hex", with_changes(repo_run(), spec__source__commitSHA="z" * 40), None,
         "spec.source.commitSHA must be 40 hexadecimal characters"),
    Case("inline-and-repo", with_changes(repo_run(), spec__source__inline="x"), None,
         "spec.source.inline and spec.source.repoURL are mutually exclusive"),
    Case("source-empty", with_changes(_T, spec__source={}), None, "spec.source must set inline or repoURL"),
    Case("inline-path-alone", with_changes(_T, spec__source={"inlinePath": "a.py"}), None,
         "spec.source.inlinePath requires spec.source.inline"),
    Case("inline-oversize", with_changes(_T, spec__source__inline=_LONG), None, "spec.source.inline&&262144"),
    Case("args-too-many", with_changes(_T, spec__mode__task__args=["a"] * 257), None, "spec.mode.task.args&&256"),
    Case("arg-too-long", with_changes(_T, spec__mode__task__args=["a" * 4097]), None, "spec.mode.task.args[0]&&4096"),
    Case("env-too-many", with_changes(_T, spec__env=[{"name": f"V{i}"} for i in range(129)]), None, "spec.env&&128"),
    Case("env-bad-name", with_changes(_T, spec__env=[{"name": "1BAD"}]), None,
         "spec.env[].name must be a C identifier"),
    # F2: the list-map key rejects duplicates in O(n) (an O(n^2) CEL rule cost ~1.4 s at 120)
    Case("env-duplicate", with_changes(_T, spec__env=[{"name": "A"}, {"name": "A", "value": "2"}]), None,
         'spec.env[1]: Duplicate value: {"name":"A"}'),
    Case("env-duplicate-late", with_changes(_T, spec__env=[{"name": f"V{i}"} for i in range(100)] + [{"name": "V7"}]),
         None, 'spec.env[100]: Duplicate value: {"name":"V7"}'),
    # F22: 128 x 32 KiB passed the CRD and then failed every attempt at Execute (256 KiB)
    Case("env-total-over", with_changes(_T, spec__env=_env_of_total(MAX_ENV_TOTAL_BYTES + 1)), None,
         f"spec.env must total at most {MAX_ENV_TOTAL_BYTES} bytes"),
    Case("env-total-f22", with_changes(_T, spec__env=[{"name": f"V{i}", "value": "x" * 32000} for i in range(10)]),
         None, f"spec.env must total at most {MAX_ENV_TOTAL_BYTES} bytes"),
    # bytes, not characters: 8 x 16000 'é' are 128,000 characters but 256,032 bytes
    Case("env-total-utf8-bytes", with_changes(_T, spec__env=[{"name": f"V{i}", "value": "\u00e9" * 16000} for i in range(8)]),
         None, f"spec.env must total at most {MAX_ENV_TOTAL_BYTES} bytes"),
    Case("timeout-zero", with_changes(_T, spec__timeout="0s"), None, "spec.timeout must be a positive duration"),
    Case("timeout-syntax", with_changes(_T, spec__timeout="10 minutes"), None,
         "spec.timeout must be a Go duration"),
    Case("timeout-negative", with_changes(_T, spec__timeout="-5s"), None, "spec.timeout must be a Go duration"),
    Case("backoff-syntax", with_changes(_T, spec__retryPolicy__backoff="PT1S"), None,
         "spec.retryPolicy.backoff must be a Go duration"),
    # F1: values Go's time.ParseDuration rejects (int64 nanoseconds) wedged runtimed.
    Case("timeout-beyond-go", with_changes(_T, spec__timeout="1000000000h"), None,
         "spec.timeout must be at most 2562047h47m16.854775807s"),
    Case("timeout-beyond-go-in-parts", with_changes(_T, spec__timeout="2562047h47m17s"), None,
         "spec.timeout must be at most"),
    Case("timeout-beyond-go-ns", with_changes(_T, spec__timeout="9223372036854777000ns"), None,
         "spec.timeout must be at most"),
    Case("backoff-beyond-go", with_changes(_T, spec__retryPolicy__backoff="2562048h"), None,
         "spec.retryPolicy.backoff must be at most 2562047h47m16.854775807s"),
    Case("max-attempts-zero", with_changes(_T, spec__retryPolicy__maxAttempts=0), None, "spec.retryPolicy.maxAttempts&&1"),
    Case("max-attempts-huge", with_changes(_T, spec__retryPolicy__maxAttempts=101), None, "spec.retryPolicy.maxAttempts&&100"),
    Case("reason-unknown", with_changes(_T, spec__retryPolicy__retryableReasons=["Whatever"]), None, "spec.retryPolicy.retryableReasons[0]&&Whatever"),
    Case("reason-permanent", with_changes(_T, spec__retryPolicy__retryableReasons=["FunctionUnimplemented"]),
         None, "spec.retryPolicy.retryableReasons[0]&&FunctionUnimplemented"),
    Case("requests-runs-zero", with_changes(_T, spec__resources__requests={"runs": 0}), None,
         "spec.resources.requests.runs must be at least 1"),
    Case("requests-suffix", with_changes(_T, spec__resources__requests={"runs": "500m"}), None, "spec.resources.requests.runs"),
    Case("requests-string-zero", with_changes(_T, spec__resources__requests={"runs": "0"}), None,
         "spec.resources.requests.runs must be at least 1"),
    Case("requests-string-huge", with_changes(_T, spec__resources__requests={"gpu": "9999999999"}), None,
         "spec.resources.requests quantities must be integers"),
    Case("requests-bad-name", with_changes(_T, spec__resources__requests={"bad name": 1}), None,
         "spec.resources.requests names must be resource names"),
    Case("idle-timeout-zero", with_changes(_F, spec__mode__function__idleTimeoutSeconds=0), None, "spec.mode.function.idleTimeoutSeconds&&1"),
    Case("runtime-not-label", with_changes(_T, spec__runtime="Python_3"), None,
         "spec.runtime must be a DNS-1123 label"),
    Case("runtime-missing", with_changes(_T, spec__runtime=None), None, "runtime"),
    Case("status-bad-phase", _with_status(_T, phase="Done"), None, "status.phase&&Done"),
    Case("status-pod-without-uid", _with_status(_T, assignedPodUID=None), None,
         "status.assignedPod and status.assignedPodUID are set and cleared together"),
    Case("status-uid-without-pod", _with_status(_T, assignedPod=None), None,
         "status.assignedPod and status.assignedPodUID are set and cleared together"),
    Case("status-terminal-changes", _with_status(_T, phase="Running"), _with_status(_T, phase="Succeeded"),
         "status.phase is terminal"),
    Case("status-cancelled-to-pending", _with_status(_T, phase="Pending", assignedPod=None, assignedPodUID=None),
         _with_status(_T, phase="Cancelled"), "status.phase is terminal"),
    Case("endpoint-url-too-long", _with_status(_F, endpoint={"protocol": "HTTPS", "url": "https://g/" + "a" * 2039}),
         None, "status.endpoint.url&&2048"),
    Case("endpoint-scheme-mismatch", _with_status(_F, endpoint={"protocol": "HTTPS", "url": "http://g/x"}), None,
         "status.endpoint.url scheme must match status.endpoint.protocol"),
    Case("endpoint-non-ascii", _with_status(_F, endpoint={"protocol": "HTTPS", "url": "https://g/é"}), None,
         "status.endpoint.url must be an ASCII http(s) URL"),
    Case("endpoint-bad-protocol", _with_status(_F, endpoint={"protocol": "GRPC", "url": "grpc://g/x"}), None, "status.endpoint.protocol&&GRPC"),
    Case("ca-bundle-too-big", _with_status(_F, endpoint={"protocol": "HTTPS", "url": "https://g/x",
                                                         "caBundle": "QUFB" * 5462 + "QQ=="}), None, "status.endpoint.caBundle&&21848"),
    Case("outputs-bad-key", _with_status(_T, outputs={"bad key": "x"}), None,
         "status.outputs keys must match [A-Za-z0-9_.-]{1,63}"),
    Case("outputs-long-key", _with_status(_T, outputs={"k" * 64: "x"}), None,
         "status.outputs keys must match [A-Za-z0-9_.-]{1,63}"),
    Case("outputs-too-many", _with_status(_T, outputs={f"k{i}": "v" for i in range(65)}), None, "status.outputs&&64"),
    Case("outputs-value-too-long", _with_status(_T, outputs={"k": "v" * 4097}), None, "status.outputs&&4096"),
    Case("message-too-long", _with_status(_T, message="m" * 2049), None, "status.message&&2048"),
    Case("conditions-too-many", _with_status(_T, conditions=[
        {"type": f"C{i}", "status": "True", "reason": "R", "lastTransitionTime": "2026-11-29T08:00:00Z"}
        for i in range(17)]), None, "status.conditions&&16"),
    Case("condition-bad-status", _with_status(_T, conditions=[
        {"type": "Ready", "status": "Yes", "reason": "R", "lastTransitionTime": "2026-11-29T08:00:00Z"}]),
         None, "status.conditions[0].status&&Yes"),
    Case("attempt-negative", _with_status(_T, attempt=-1), None, "status.attempt&&-1"),
]  # fmt: skip

VALID_RUNTIMES: list[Case] = [
    Case("all-fields", runtime(), None, ""),
    Case("minimal", {"spec": {"template": {"spec": {"containers": [{"name": "r", "image": "i"}]}}}}, None, ""),
    Case("extra-resources", with_changes(runtime(), spec__capacity__resources={"runs": 4, "example.com/gpu": 1}),
         None, ""),
    Case("seed-string-capacity", with_changes(runtime(), spec__capacity__resources={"runs": "2"}), None, ""),
    Case("template-labels", with_changes(runtime(), spec__template__metadata={"labels": {"team": "a"}, "annotations": {"x": "y"}, "name": "kept"}), None, ""),
    # T2 F14/F6: the reserved names and ports are refused, their neighbours are not
    Case("name-63-chars", with_changes(runtime(), metadata__name="r" * 63), None, ""),
    Case("name-with-digits-and-dashes", with_changes(runtime(), metadata__name="py-3-12"), None, ""),
    Case("port-next-to-runtimed", with_changes(runtime(), spec__port=9092), None, ""),
    Case("init-containers", with_changes(runtime(), spec__template__spec__initContainers=[{"name": "setup", "image": "i"}]), None, ""),
    Case("containers-at-bound", with_changes(runtime(), spec__template__spec__containers=[{"name": f"c{i}", "image": "i"} for i in range(64)]), None, ""),
]  # fmt: skip

_NAME_RULE = "metadata.name must be a DNS-1123 label"
_PORT_RULE = "spec.port must not be 9090 or 8081: the injected runtimed sidecar listens on them"

INVALID_RUNTIMES: list[Case] = [
    Case("no-template", with_changes(runtime(), spec__template=None), None, "template"),
    Case("no-containers", with_changes(runtime(), spec__template__spec__containers=[]), None, "spec.template.spec.containers"),
    Case("replicas-negative", with_changes(runtime(), spec__replicas=-1), None, "spec.replicas&&-1"),
    Case("port-zero", with_changes(runtime(), spec__port=0), None, "spec.port&&1"),
    Case("capacity-suffix", with_changes(runtime(), spec__capacity__resources={"runs": "1k"}), None, "spec.capacity.resources.runs"),
    Case("capacity-string-huge", with_changes(runtime(), spec__capacity__resources={"runs": "2147483648"}), None,
         "spec.capacity.resources quantities must be integers"),
    Case("capacity-float", with_changes(runtime(), spec__capacity__resources={"runs": 1.5}), None, "spec.capacity.resources"),
    Case("capacity-bad-name", with_changes(runtime(), spec__capacity__resources={"runs": 1, "GPU!": 1}), None,
         "spec.capacity.resources names must be resource names"),
    Case("capacity-negative", with_changes(runtime(), spec__capacity__resources={"runs": -1}), None, "spec.capacity.resources&&-1"),
    # a user test: these were admitted, then the Runtime never got Pods (or a status)
    Case("template-labels-number", with_changes(runtime(), spec__template__metadata={"labels": 5}), None, "spec.template.metadata.labels"),
    Case("template-label-value-number", with_changes(runtime(), spec__template__metadata={"labels": {"a": 1}}), None, "spec.template.metadata.labels.a"),
    Case("template-annotation-value-number", with_changes(runtime(), spec__template__metadata={"annotations": {"a": 1}}), None, "spec.template.metadata.annotations.a"),
    # T2 F14: a dotted name was admitted and reported Available, but its Service name is
    # invalid and no Run can name it (spec.runtime is a DNS-1123 label)
    Case("name-dotted", with_changes(runtime(), metadata__name="dotted.name"), None, _NAME_RULE),
    Case("name-upper-case", with_changes(runtime(), metadata__name="Python"), None, _NAME_RULE),
    Case("name-64-chars", with_changes(runtime(), metadata__name="r" * 64), None, _NAME_RULE),
    # T2 F6: runtimed's own ports crash-looped the sidecar (Address already in use)
    Case("port-runtimed-grpc", with_changes(runtime(), spec__port=9090), None, _PORT_RULE),
    Case("port-runtimed-http", with_changes(runtime(), spec__port=8081), None, _PORT_RULE),
    # T2 F6: a container named runtimed got no Pods and no status, only an Event
    Case("container-named-runtimed", with_changes(runtime(), spec__template__spec__containers=[
        {"name": "runtime", "image": "i"}, {"name": "runtimed", "image": "i"}]), None,
         'spec.template.spec.containers: the name "runtimed" is reserved'),
    Case("init-container-named-runtimed", with_changes(runtime(), spec__template__spec__initContainers=[
        {"name": "runtimed", "image": "i"}]), None,
         'spec.template.spec.initContainers: the name "runtimed" is reserved'),
    Case("containers-too-many", with_changes(runtime(), spec__template__spec__containers=[
        {"name": f"c{i}", "image": "i"} for i in range(65)]), None, "spec.template.spec.containers&&64"),
]  # fmt: skip
