"""OpenAPI v3 schemas and CEL rules of the Run and Runtime CRDs: the single source of truth.

``scripts/gen_crds.py`` renders :func:`krt.api.crds.run_crd` / ``runtime_crd`` (built from
these schemas) into ``charts/kruntimes/crds/``; a test fails when the committed YAML drifts,
and another checks the dataclasses in :mod:`krt.api.run` / :mod:`krt.api.runtime` against
these properties. Every bound comes from :mod:`krt.api.limits`.

Validation implemented here (seed 000 Spec Transition Rules and Run Status API, seed 001
Proposed Run Model, issue 5):

* mode exclusivity: exactly one of ``spec.mode.task`` / ``spec.mode.function``;
* immutability: ``runtime``, ``source``, ``mode``, ``env``, ``timeout``, ``retryPolicy`` and
  ``resources`` (capacity accounting depends on it) cannot change or be added/removed after
  creation (transition rules on ``spec`` itself, so adding an absent field is caught too);
  ``cancelRequested`` only goes false -> true; ``ttlSecondsAfterFinished`` stays mutable;
* ``entrypoint`` and ``inlinePath`` are relative paths without ``..`` segments;
* ``handler`` is ``module.function`` (dotted packages allowed) or ``file.function``;
* ``source.repoURL`` requires ``commitSHA`` (40 hex) and the reverse; ``inline`` and
  ``repoURL`` are exclusive; ``inlinePath`` requires ``inline``;
* bounds on every string, list and map (inline source size, args, env, endpoint URL <= 2048
  bytes, caBundle <= 16 KiB, outputs, conditions, message), and on ``spec.env``'s total as
  the Runtime Servers count it (:data:`krt.api.limits.MAX_ENV_TOTAL_BYTES`);
* status: ``assignedPod`` and ``assignedPodUID`` are set and cleared together; the endpoint's
  scheme matches its protocol; a terminal phase never changes again;
* a Runtime that could never work is refused (T2 F14, F6): its ``metadata.name`` is a
  DNS-1123 label (what a Run's ``spec.runtime`` accepts, and what its Service name needs);
  ``spec.port`` is not one of runtimed's own ports (9090 gRPC, 8081 HTTP); no container or
  init container of the template is named ``runtimed`` (the injected sidecar's name).

CEL is limited to what both Kubernetes and the localkube evaluator (cel-python) support:
``has``, ``size``, ``matches``, ``startsWith``, ``in``, ``all``, ``exists``, ``filter``,
equality and ``oldSelf``; no Kubernetes extension libraries. Rules on strings, lists and maps
sit under ``maxLength`` / ``maxItems`` / ``maxProperties`` so a real API server's CEL cost
estimate stays bounded.
"""

from __future__ import annotations

from typing import Any, Final

from krt.api import limits
from krt.api.constants import API_VERSION
from krt.api.naming import RUNTIMED_CONTAINER_NAME, RUNTIMED_GRPC_PORT, RUNTIMED_HTTP_PORT
from krt.api.phases import TERMINAL_PHASES, Phase
from krt.api.retry import RETRYABLE_REASONS
from krt.api.run import EndpointProtocol

Schema = dict[str, Any]


def _cel_str(text: str) -> str:
    """``text`` as a single-quoted CEL string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rule(expression: str, message: str) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry."""
    return {"rule": expression, "message": message}


#: ``spec.env``'s size as the Runtime Servers count it (``servers.common.validation``): UTF-8
#: bytes of each name and value plus 2 (names are ASCII, so ``size`` of a name is its bytes).
_ENV_TOTAL_EXPRESSION: Final = (
    f"self.map(e, size(e.name) + (has(e.value) ? size(bytes(e.value)) : 0) + "
    f"{limits.ENV_ENTRY_OVERHEAD_BYTES}).sum()"
)
_ENV_TOTAL_MESSAGE: Final = (
    f"spec.env must total at most {limits.MAX_ENV_TOTAL_BYTES} bytes (UTF-8 name and value "
    f"+ {limits.ENV_ENTRY_OVERHEAD_BYTES} per variable)"
)


def _env_total_rule() -> dict[str, str]:
    """The ``spec.env`` total bound (F22): the CRD admits only what Execute accepts.

    Without it 128 values of 32 KiB each passed the CRD and every attempt then failed at the
    Runtime Server's 256 KiB bound. The message expression also says how large the list is.
    """
    return {
        "rule": f"self.size() == 0 || {_ENV_TOTAL_EXPRESSION} <= {limits.MAX_ENV_TOTAL_BYTES}",
        "message": _ENV_TOTAL_MESSAGE,
        "messageExpression": (
            f"{_cel_str(_ENV_TOTAL_MESSAGE)} + ', got ' + string({_ENV_TOTAL_EXPRESSION})"
        ),
    }


def _string(
    description: str,
    *,
    max_length: int,
    min_length: int | None = None,
    pattern: str | None = None,
    rules: list[dict[str, str]] | None = None,
    fmt: str | None = None,
) -> Schema:
    schema: Schema = {"type": "string", "description": description, "maxLength": max_length}
    if min_length is not None:
        schema["minLength"] = min_length
    if pattern is not None:
        schema["pattern"] = pattern
    if fmt is not None:
        schema["format"] = fmt
    if rules:
        schema["x-kubernetes-validations"] = rules
    return schema


def _integer(description: str, *, minimum: int, maximum: int, fmt: str = "int32") -> Schema:
    return {
        "type": "integer",
        "format": fmt,
        "description": description,
        "minimum": minimum,
        "maximum": maximum,
    }


def _relative_path(field: str, description: str, *, names_file: bool = False) -> Schema:
    rules = [
        rule("!self.startsWith('/')", f"{field} must be a relative path"),
        rule(
            "!self.matches('(^|/)[.][.](/|$)')",
            f"{field} must not contain a '..' path segment",
        ),
    ]
    if names_file:
        # "dir/" or "a/." names a directory: the file could never be written or run
        rules.append(
            rule(
                "!self.matches('(^|/)[.]?$')",
                f"{field} must name a file: it must not end in '/' or '/.'",
            )
        )
    return _string(description, min_length=1, max_length=limits.MAX_PATH_CHARS, rules=rules)


def _duration(field: str, description: str, *, positive: bool) -> Schema:
    rules = [
        rule(
            f"self.matches({_cel_str(limits.DURATION_PATTERN)})",
            f"{field} must be a Go duration such as '90s', '10m' or '1h30m'",
        )
    ]
    if positive:
        rules.append(rule("self.matches('[1-9]')", f"{field} must be a positive duration"))
    rules.append(
        rule(
            _DURATION_SECONDS_AT_MOST.format(limit=limits.MAX_DURATION_NANOSECONDS / 1e9),
            f"{field} must be at most {limits.MAX_DURATION_TEXT} (Go's longest duration, "
            "about 292 years)",
        )
    )
    return _string(description, max_length=limits.MAX_DURATION_CHARS, rules=rules)


#: CEL: the duration's parts summed in seconds are at most ``{limit}`` (Go's int64
#: nanoseconds; compared as a double, so within a microsecond of the bound either way).
#: ``0`` (and any string the syntax rule rejects) may have no parts: an empty sum is zero.
_DURATION_SECONDS_AT_MOST = (
    "self == '0' || self.findAll("
    + _cel_str(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
    + ").map(p, double(p.find("
    + _cel_str(r"^[0-9]*(\.[0-9]*)?")
    + ")) * (p.endsWith('ns') ? 1e-9 : p.endsWith('ms') ? 1e-3 : "
    "p.endsWith('s') && !p.matches('[0-9.]s$') ? 1e-6 : p.endsWith('s') ? 1.0 : "
    "p.endsWith('m') ? 60.0 : 3600.0)).sum() <= {limit!r}"
)


def _time(description: str) -> Schema:
    return {"type": "string", "format": "date-time", "description": description}


def _resources(field: str, description: str, *, runs_minimum: int) -> Schema:
    schema: Schema = {
        "type": "object",
        "description": description,
        "maxProperties": limits.MAX_RESOURCE_KINDS,
        "additionalProperties": {
            "x-kubernetes-int-or-string": True,
            "minimum": 0,
            "maximum": limits.MAX_RESOURCE_QUANTITY,
            "pattern": limits.RESOURCE_QUANTITY_STRING_PATTERN,
            "x-kubernetes-validations": [
                rule(
                    f"type(self) == int || "
                    f"(self.matches({_cel_str(limits.RESOURCE_QUANTITY_STRING_PATTERN)}) && "
                    f"int(self) <= {limits.MAX_RESOURCE_QUANTITY})",
                    f"{field} quantities must be integers between 0 and "
                    f"{limits.MAX_RESOURCE_QUANTITY}, as a number (2) or a decimal string "
                    '("2"); suffixes such as "500m" or "1k" are not allowed',
                ),
            ],
        },
        "x-kubernetes-validations": [
            rule(
                f"self.all(name, size(name) <= {limits.MAX_RESOURCE_NAME_CHARS} && "
                f"name.matches({_cel_str(limits.RESOURCE_NAME_PATTERN)}))",
                f"{field} names must be resource names such as 'runs' or 'example.com/gpu'",
            ),
        ],
    }
    if runs_minimum > 0:
        pattern = _cel_str(limits.RESOURCE_QUANTITY_STRING_PATTERN)
        schema["x-kubernetes-validations"].append(
            rule(
                f"!has(self.runs) || (type(self.runs) == int ? self.runs >= {runs_minimum} : "
                f"(self.runs.matches({pattern}) && int(self.runs) >= {runs_minimum}))",
                f"{field}.runs must be at least {runs_minimum}",
            )
        )
    return schema


def conditions_schema(owner: str) -> Schema:
    """``status.conditions``: a list-map keyed by ``type`` (Kubernetes condition shape)."""
    return {
        "type": "array",
        "description": f"Observations of the {owner}'s state, at most one per type.",
        "maxItems": limits.MAX_CONDITIONS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "reason", "lastTransitionTime"],
            "properties": {
                "type": _string(
                    "Condition type.",
                    max_length=limits.MAX_CONDITION_TYPE_CHARS,
                    pattern=limits.CONDITION_TYPE_PATTERN,
                ),
                "status": {
                    "type": "string",
                    "description": "True, False or Unknown.",
                    "enum": ["True", "False", "Unknown"],
                },
                "reason": _string(
                    "CamelCase machine reason.",
                    min_length=1,
                    max_length=limits.MAX_REASON_CHARS,
                    pattern=limits.REASON_PATTERN,
                ),
                "message": _string("Human-readable detail.", max_length=limits.MAX_MESSAGE_CHARS),
                "lastTransitionTime": _time("When status last changed."),
                "observedGeneration": _integer(
                    "metadata.generation the writer acted on.",
                    minimum=0,
                    maximum=2**63 - 1,
                    fmt="int64",
                ),
            },
        },
    }


def run_spec_schema() -> Schema:
    """``Run.spec`` (seed 001 Proposed Run Model; seed 000 Spec Transition Rules)."""
    immutable = ["source", "mode", "env", "timeout", "retryPolicy", "resources"]
    transition_rules = [rule("self.runtime == oldSelf.runtime", "spec.runtime is immutable")]
    transition_rules += [
        rule(
            f"has(self.{name}) == has(oldSelf.{name}) && "
            f"(!has(self.{name}) || self.{name} == oldSelf.{name})",
            f"spec.{name} is immutable",
        )
        for name in immutable
    ]
    transition_rules.append(
        rule(
            "!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested || "
            "(has(self.cancelRequested) && self.cancelRequested)",
            "spec.cancelRequested may only change from false to true",
        )
    )
    return {
        "type": "object",
        "description": "The execution a Run asks for. Immutable except cancelRequested "
        "(false -> true only) and ttlSecondsAfterFinished.",
        "required": ["runtime"],
        "x-kubernetes-validations": transition_rules,
        "properties": {
            "runtime": _string(
                "Name of the Runtime (in the Run's namespace) whose Pods run this Run.",
                min_length=1,
                max_length=limits.DNS_LABEL_MAX_CHARS,
                rules=[
                    rule(
                        f"self.matches({_cel_str(limits.DNS_LABEL_PATTERN)})",
                        "spec.runtime must be a DNS-1123 label (lowercase letters, digits, '-')",
                    )
                ],
            ),
            "source": {
                "type": "object",
                "description": "Where the code comes from: inline text, or a git repository "
                "at a pinned commit.",
                "x-kubernetes-validations": [
                    rule(
                        "has(self.inline) || has(self.repoURL)",
                        "spec.source must set inline or repoURL",
                    ),
                    rule(
                        "!(has(self.inline) && has(self.repoURL))",
                        "spec.source.inline and spec.source.repoURL are mutually exclusive",
                    ),
                    rule(
                        "!has(self.repoURL) || has(self.commitSHA)",
                        "spec.source.repoURL requires spec.source.commitSHA (40 hex characters)",
                    ),
                    rule(
                        "!has(self.commitSHA) || has(self.repoURL)",
                        "spec.source.commitSHA requires spec.source.repoURL",
                    ),
                    rule(
                        "!has(self.inlinePath) || has(self.inline)",
                        "spec.source.inlinePath requires spec.source.inline",
                    ),
                ],
                "properties": {
                    "inline": _string(
                        "Source text, written to inlinePath (default 'script') in the working "
                        "directory.",
                        min_length=1,
                        max_length=limits.MAX_INLINE_SOURCE_CHARS,
                    ),
                    "inlinePath": _relative_path(
                        "spec.source.inlinePath",
                        "File name (relative, no '..', not ending in '/') the inline source is "
                        "written to.",
                        names_file=True,
                    ),
                    "repoURL": _string(
                        "Git repository to check out.",
                        min_length=1,
                        max_length=limits.MAX_REPO_URL_CHARS,
                    ),
                    "commitSHA": _string(
                        "Commit to check out: 40 hexadecimal characters.",
                        max_length=40,
                        rules=[
                            rule(
                                f"self.matches({_cel_str(limits.COMMIT_SHA_PATTERN)})",
                                "spec.source.commitSHA must be 40 hexadecimal characters",
                            )
                        ],
                    ),
                },
            },
            "mode": {
                "type": "object",
                "description": "Exactly one of task (run once) or function (register a "
                "handler and serve invokes). Absent means a task.",
                "x-kubernetes-validations": [
                    rule(
                        # "function" is a CEL reserved word: Kubernetes escapes it as __function__
                        "has(self.task) != has(self.__function__)",
                        "exactly one of spec.mode.task or spec.mode.function must be set",
                    )
                ],
                "properties": {
                    "task": {
                        "type": "object",
                        "description": "Run a process once.",
                        "properties": {
                            "entrypoint": _relative_path(
                                "spec.mode.task.entrypoint",
                                "File to execute, relative to the working directory.",
                            ),
                            "args": {
                                "type": "array",
                                "description": "Arguments passed to the entrypoint.",
                                "maxItems": limits.MAX_ARGS,
                                "items": {
                                    "type": "string",
                                    "maxLength": limits.MAX_ARG_CHARS,
                                },
                            },
                        },
                    },
                    "function": {
                        "type": "object",
                        "description": "Register a fixed handler and serve invokes until the "
                        "Run ends.",
                        "required": ["handler"],
                        "properties": {
                            "handler": _string(
                                "module.function (dotted packages allowed) or file.function.",
                                min_length=1,
                                max_length=limits.MAX_HANDLER_CHARS,
                                rules=[
                                    rule(
                                        f"self.matches({_cel_str(limits.HANDLER_PATTERN)})",
                                        "spec.mode.function.handler must be module.function "
                                        "(dotted packages allowed) or file.function",
                                    )
                                ],
                            ),
                            "idleTimeoutSeconds": _integer(
                                "End the Run (Timeout, reason IdleTimeout) after this many "
                                "seconds without invocation activity.",
                                minimum=1,
                                maximum=limits.MAX_IDLE_TIMEOUT_SECONDS,
                            ),
                        },
                    },
                },
            },
            "env": {
                "type": "array",
                "description": "Environment variables for the execution: at most "
                f"{limits.MAX_ENV}, {limits.MAX_ENV_TOTAL_BYTES} bytes in all (UTF-8 name and "
                f"value + {limits.ENV_ENTRY_OVERHEAD_BYTES} per variable).",
                "maxItems": limits.MAX_ENV,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                # names are unique through the list-map key (kube-apiserver answers
                # "spec.env[1]: Duplicate value"), in O(n); a CEL rule would be O(n^2)
                "x-kubernetes-validations": [_env_total_rule()],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": _string(
                            "Variable name.",
                            min_length=1,
                            max_length=limits.MAX_ENV_NAME_CHARS,
                            rules=[
                                rule(
                                    f"self.matches({_cel_str(limits.ENV_NAME_PATTERN)})",
                                    "spec.env[].name must be a C identifier "
                                    "([A-Za-z_][A-Za-z0-9_]*)",
                                )
                            ],
                        ),
                        "value": _string("Variable value.", max_length=limits.MAX_ENV_VALUE_CHARS),
                    },
                },
            },
            "timeout": _duration(
                "spec.timeout",
                "Task: maximum run time from startTime. Function: maximum reservation "
                "lifetime from startTime. Go duration, e.g. 90s, 10m, 1h30m.",
                positive=True,
            ),
            "retryPolicy": {
                "type": "object",
                "description": "Retries of failed attempts (shared retry engine).",
                "properties": {
                    "maxAttempts": _integer(
                        "Attempts including the first; 1 (default) means no retry.",
                        minimum=1,
                        maximum=limits.MAX_ATTEMPTS,
                    ),
                    "backoff": _duration(
                        "spec.retryPolicy.backoff",
                        "Wait before the second attempt, doubling for each later one (capped "
                        "at 5m). Default 1s.",
                        positive=False,
                    ),
                    "retryableReasons": {
                        "type": "array",
                        "description": "Failure reasons that may retry (default: all "
                        "retryable reasons).",
                        "maxItems": len(RETRYABLE_REASONS),
                        "x-kubernetes-list-type": "set",
                        "items": {
                            "type": "string",
                            "enum": sorted(reason.value for reason in RETRYABLE_REASONS),
                        },
                    },
                },
            },
            "cancelRequested": {
                "type": "boolean",
                "description": "Set to true to cancel the Run; cannot be set back to false.",
            },
            "ttlSecondsAfterFinished": _integer(
                "Delete the Run this many seconds after it becomes terminal (mutable).",
                minimum=0,
                maximum=limits.MAX_TTL_SECONDS,
            ),
            "resources": {
                "type": "object",
                "description": "Logical resources the Run occupies on its Runtime Pod.",
                "properties": {
                    "requests": _resources(
                        "spec.resources.requests",
                        "Integer logical resources; runs defaults to 1.",
                        runs_minimum=1,
                    )
                },
            },
        },
    }


def run_status_schema() -> Schema:
    """``Run.status`` (seed 000 Run Status API)."""
    terminal = ", ".join(f"'{phase.value}'" for phase in Phase if phase in TERMINAL_PHASES)
    return {
        "type": "object",
        "description": "Observed lifecycle state, written by the control plane and runtimed.",
        "x-kubernetes-validations": [
            rule(
                "has(self.assignedPod) == has(self.assignedPodUID)",
                "status.assignedPod and status.assignedPodUID are set and cleared together",
            ),
            rule(
                f"!has(oldSelf.phase) || !(oldSelf.phase in [{terminal}]) || "
                "(has(self.phase) && self.phase == oldSelf.phase)",
                "status.phase is terminal (Succeeded, Failed, Timeout or Cancelled) and cannot "
                "change",
            ),
        ],
        "properties": {
            "phase": {
                "type": "string",
                "description": "Pending, Scheduled, Running, Ready (function, active), "
                "Succeeded, Failed, Timeout or Cancelled.",
                "enum": [phase.value for phase in Phase],
            },
            "reason": _string(
                "Machine reason of the latest failure, retry or outcome.",
                max_length=limits.MAX_REASON_CHARS,
                pattern=limits.REASON_PATTERN,
            ),
            "message": _string("Human-readable summary.", max_length=limits.MAX_MESSAGE_CHARS),
            "assignedPod": _string(
                "Runtime Pod the Run is bound to.", max_length=limits.DNS_SUBDOMAIN_MAX_CHARS
            ),
            "assignedPodUID": _string("UID of the assigned Pod.", max_length=128),
            "endpoint": {
                "type": "object",
                "description": "Where a function Run is invoked.",
                "required": ["protocol", "url"],
                "x-kubernetes-validations": [
                    rule(
                        "(self.protocol == 'HTTPS') == self.url.startsWith('https://')",
                        "status.endpoint.url scheme must match status.endpoint.protocol",
                    )
                ],
                "properties": {
                    "protocol": {
                        "type": "string",
                        "description": "HTTPS (HTTP for local development only).",
                        "enum": [protocol.value for protocol in EndpointProtocol],
                    },
                    "url": _string(
                        "Invoke URL (ASCII, at most 2048 bytes).",
                        min_length=1,
                        max_length=limits.MAX_ENDPOINT_URL_BYTES,
                        rules=[
                            rule(
                                "self.matches('^https?://[!-~]+$')",
                                "status.endpoint.url must be an ASCII http(s) URL",
                            )
                        ],
                    ),
                    "caBundle": _string(
                        "Base64 PEM trust bundle for the gateway (at most 16 KiB decoded).",
                        max_length=limits.MAX_CA_BUNDLE_BASE64_CHARS,
                        fmt="byte",
                    ),
                },
            },
            "startTime": _time("When runtimed claimed the Run."),
            "completionTime": _time("When the Run became terminal."),
            "retryAfter": _time("In retry backoff: when the next attempt may start."),
            "attempt": _integer(
                "Current attempt, 1-based (task: execution; function: registration).",
                minimum=0,
                maximum=limits.MAX_ATTEMPTS,
            ),
            "outputs": {
                "type": "object",
                "description": (
                    "Bounded outputs of a succeeded task, read from the $KRUNTIME_OUTPUTS file "
                    "(at most 1 MiB; 64 keys, 4 KiB per value, 16 KiB in all)."
                ),
                "maxProperties": limits.MAX_OUTPUTS,
                "additionalProperties": {
                    "type": "string",
                    "maxLength": limits.MAX_OUTPUT_VALUE_BYTES,
                },
                "x-kubernetes-validations": [
                    rule(
                        f"self.all(k, k.matches({_cel_str(limits.OUTPUT_KEY_PATTERN)}))",
                        "status.outputs keys must match [A-Za-z0-9_.-]{1,63}",
                    )
                ],
            },
            "conditions": conditions_schema("Run"),
            "observedGeneration": _integer(
                "metadata.generation last acted on.", minimum=0, maximum=2**63 - 1, fmt="int64"
            ),
        },
    }


def _type_meta(kind: str) -> dict[str, Schema]:
    """``apiVersion``, ``kind`` and ``metadata`` of a kind, described for ``kubectl explain``."""
    return {
        "apiVersion": {
            "type": "string",
            "description": f"The API group and version of this object: {API_VERSION}.",
        },
        "kind": {"type": "string", "description": f"The object's kind: {kind}."},
        "metadata": {
            "type": "object",
            "description": "Standard Kubernetes object metadata: name, namespace, labels, "
            "annotations, ownerReferences, finalizers.",
        },
    }


def run_schema() -> Schema:
    """The full ``openAPIV3Schema`` of the Run CRD."""
    return {
        "type": "object",
        "description": "A Run executes a task once, or registers a function, on a warm "
        "Runtime Pod.",
        "required": ["spec"],
        "properties": {
            **_type_meta("Run"),
            "spec": run_spec_schema(),
            "status": run_status_schema(),
        },
    }


#: The most containers (and, separately, init containers) a Runtime's Pod template may
#: have; it bounds the CEL cost of the reserved-name rule.
MAX_TEMPLATE_CONTAINERS: Final = 64


def _template_containers(field: str, *, min_items: int) -> Schema:
    """A template's ``containers``/``initContainers``: the name ``runtimed`` is reserved."""
    schema: Schema = {
        "type": "array",
        "maxItems": MAX_TEMPLATE_CONTAINERS,
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "name": {"type": "string", "maxLength": limits.DNS_LABEL_MAX_CHARS},
            },
        },
        "x-kubernetes-validations": [
            rule(
                f"self.all(c, !has(c.name) || c.name != {_cel_str(RUNTIMED_CONTAINER_NAME)})",
                f'{field}: the name "{RUNTIMED_CONTAINER_NAME}" is reserved for the injected '
                "runtimed sidecar",
            )
        ],
    }
    if min_items:
        schema["minItems"] = min_items
    return schema


def runtime_schema() -> Schema:
    """The full ``openAPIV3Schema`` of the Runtime CRD."""
    name = "self.metadata.name"
    return {
        "type": "object",
        "description": "A Runtime is a pool of warm Runtime Pods that Runs are placed on.",
        "required": ["spec"],
        # metadata.name is readable from the root (Kubernetes exposes name/generateName)
        "x-kubernetes-validations": [
            rule(
                f"!has(self.metadata) || !has({name}) || (size({name}) <= "
                f"{limits.DNS_LABEL_MAX_CHARS} && "
                f"{name}.matches({_cel_str(limits.DNS_LABEL_PATTERN)}))",
                "metadata.name must be a DNS-1123 label (at most "
                f"{limits.DNS_LABEL_MAX_CHARS} lowercase letters, digits and '-', starting "
                "and ending with a letter or digit): it names the Runtime's Service, and Runs "
                "refer to it in spec.runtime",
            )
        ],
        "properties": {
            **_type_meta("Runtime"),
            "spec": {
                "type": "object",
                "description": "The pool: size, per-Pod capacity and Pod template.",
                "required": ["template"],
                "properties": {
                    "replicas": {
                        **_integer("Number of Runtime Pods.", minimum=0, maximum=10000),
                        "default": 1,
                    },
                    "capacity": {
                        "type": "object",
                        "description": "What each Runtime Pod offers to Runs.",
                        "default": {},
                        "properties": {
                            "resources": {
                                **_resources(
                                    "spec.capacity.resources",
                                    "Integer logical resources per Pod; runs defaults to 2.",
                                    runs_minimum=0,
                                ),
                                "default": {"runs": 2},
                            }
                        },
                    },
                    "template": {
                        "type": "object",
                        "description": "PodTemplateSpec; its runtime container runs the "
                        "Runtime Server. The runtimed sidecar is injected.",
                        "required": ["spec"],
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {
                            "metadata": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                                # typed where the controller reads them (a Pod's labels and
                                # annotations): a wrong type is refused at admission
                                "properties": {
                                    "labels": {
                                        "type": "object",
                                        "description": "Labels of the Runtime Pods.",
                                        "additionalProperties": {"type": "string"},
                                    },
                                    "annotations": {
                                        "type": "object",
                                        "description": "Annotations of the Runtime Pods.",
                                        "additionalProperties": {"type": "string"},
                                    },
                                },
                            },
                            "spec": {
                                "type": "object",
                                "required": ["containers"],
                                "x-kubernetes-preserve-unknown-fields": True,
                                "properties": {
                                    "containers": _template_containers(
                                        "spec.template.spec.containers", min_items=1
                                    ),
                                    "initContainers": _template_containers(
                                        "spec.template.spec.initContainers", min_items=0
                                    ),
                                },
                            },
                        },
                    },
                    "daemonImage": _string(
                        "runtimed sidecar image (default: the control plane's).",
                        min_length=1,
                        max_length=1024,
                    ),
                    "port": {
                        **_integer(
                            "gRPC port of the Runtime Server in the Pod (not 9090 or 8081: "
                            "the runtimed sidecar's own ports).",
                            minimum=1,
                            maximum=65535,
                        ),
                        "default": 9091,
                        "x-kubernetes-validations": [
                            rule(
                                f"self != {RUNTIMED_GRPC_PORT} && self != {RUNTIMED_HTTP_PORT}",
                                f"spec.port must not be {RUNTIMED_GRPC_PORT} or "
                                f"{RUNTIMED_HTTP_PORT}: the injected runtimed sidecar listens "
                                "on them in every Runtime Pod",
                            )
                        ],
                    },
                },
            },
            "status": {
                "type": "object",
                "description": "Observed state of the pool.",
                "properties": {
                    "readyReplicas": _integer(
                        "Runtime Pods ready for Runs.", minimum=0, maximum=2**31 - 1
                    ),
                    "replicas": _integer("Runtime Pods that exist.", minimum=0, maximum=2**31 - 1),
                    "observedGeneration": _integer(
                        "metadata.generation last reconciled.",
                        minimum=0,
                        maximum=2**63 - 1,
                        fmt="int64",
                    ),
                    "conditions": conditions_schema("Runtime"),
                },
            },
        },
    }
