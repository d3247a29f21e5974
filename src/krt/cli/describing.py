"""``krt describe``: a Run's spec, status, conditions and Events as kubectl describe shows them.

Pure formatting over the Run dict and its Events (``involvedObject.uid`` = the Run's UID).
Secrets are not special here (a Run holds none), but inline source is summarised, not
printed: ``krt get -o yaml`` shows it in full.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from krt.api.errors import InvalidObjectError
from krt.api.times import parse_time
from krt.cli.printing import human_age, render_table, run_mode, run_phase

Obj = Mapping[str, Any]


def _map_text(values: object) -> str:
    if not isinstance(values, Mapping) or not values:
        return "<none>"
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def _ago(stamp: object, now: datetime) -> str:
    if not isinstance(stamp, str):
        return "<unknown>"
    try:
        return human_age((now - parse_time(stamp)).total_seconds())
    except InvalidObjectError:
        return "<unknown>"


def _lines(pairs: Sequence[tuple[str, object]], indent: int) -> list[str]:
    present = [(k, v) for k, v in pairs if v not in (None, "", [], {})]
    if not present:
        return []
    width = max(len(k) for k, _ in present) + 2
    pad = " " * indent
    return [f"{pad}{(k + ':').ljust(width)}{v}" for k, v in present]


def describe_run(run: Obj, events: Sequence[Obj], now: datetime) -> str:
    """The ``krt describe`` text of a Run.

    Args:
        run: the Run object.
        events: Events about it (any order; shown oldest first).
        now: wall-clock time for ages.

    Returns:
        Multi-line text without a trailing newline.
    """
    meta = run.get("metadata") or {}
    spec = run.get("spec") or {}
    status = run.get("status") or {}
    out = _lines(
        [
            ("Name", meta.get("name")),
            ("Namespace", meta.get("namespace")),
            ("UID", meta.get("uid")),
            ("Labels", _map_text(meta.get("labels"))),
            ("Annotations", _map_text(meta.get("annotations"))),
            (
                "Created",
                f"{meta.get('creationTimestamp')} ({_ago(meta.get('creationTimestamp'), now)} ago)",
            ),
            (
                "Deleting",
                f"since {meta['deletionTimestamp']} (finalizers: {', '.join(meta.get('finalizers') or []) or 'none'})"
                if meta.get("deletionTimestamp")
                else None,
            ),
        ],
        0,
    )
    mode = spec.get("mode") or {}
    source = spec.get("source") or {}
    if source.get("inline") is not None:
        source_text = (
            f"inline, {len(str(source['inline']).encode())} bytes, "
            f"written to {source.get('inlinePath') or 'script'}"
        )
    elif source.get("repoURL"):
        source_text = f"{source['repoURL']} at {source.get('commitSHA')}"
    else:
        source_text = "<none>"
    retry = spec.get("retryPolicy") or {}
    out.append("Spec:")
    spec_pairs: list[tuple[str, object]] = [
        ("Runtime", spec.get("runtime")),
        ("Mode", run_mode(run)),
    ]
    if "function" in mode:
        function = mode["function"] or {}
        spec_pairs += [
            ("Handler", function.get("handler")),
            (
                "Idle Timeout",
                f"{function['idleTimeoutSeconds']}s"
                if function.get("idleTimeoutSeconds")
                else None,
            ),
        ]
    else:
        task = mode.get("task") or {}
        spec_pairs += [
            ("Entrypoint", task.get("entrypoint") or None),
            ("Args", " ".join(repr(a) if " " in a else a for a in task.get("args") or []) or None),
        ]
    spec_pairs += [
        ("Source", source_text),
        (
            "Env",
            ", ".join(f"{e.get('name')}={e.get('value', '')}" for e in spec.get("env") or [])
            or None,
        ),
        ("Timeout", spec.get("timeout")),
        (
            "Retry Policy",
            f"max attempts {retry.get('maxAttempts', 1)}, backoff {retry.get('backoff', 'default')}"
            if retry
            else None,
        ),
        (
            "TTL After Finished",
            f"{spec['ttlSecondsAfterFinished']}s"
            if spec.get("ttlSecondsAfterFinished") is not None
            else None,
        ),
        ("Cancel Requested", "true" if spec.get("cancelRequested") else None),
    ]
    out += _lines(spec_pairs, 2)
    out.append("Status:")
    endpoint = status.get("endpoint") or {}
    endpoint_text = None
    if endpoint.get("url"):
        ca = endpoint.get("caBundle")
        endpoint_text = f"{endpoint['url']} ({endpoint.get('protocol', 'HTTPS')}" + (
            ", with CA bundle)" if ca else ")"
        )
    pod = status.get("assignedPod")
    out += _lines(
        [
            ("Phase", run_phase(run)),
            ("Reason", status.get("reason")),
            ("Message", status.get("message")),
            ("Attempt", status.get("attempt")),
            ("Assigned Pod", f"{pod} (uid {status.get('assignedPodUID')})" if pod else None),
            ("Start Time", status.get("startTime")),
            ("Completion Time", status.get("completionTime")),
            ("Retry After", status.get("retryAfter")),
            ("Endpoint", endpoint_text),
        ],
        2,
    )
    outputs = status.get("outputs") or {}
    if outputs:
        out.append("  Outputs:")
        out += [f"    {k}: {v}" for k, v in sorted(outputs.items())]
    conditions = status.get("conditions") or []
    out.append("Conditions:")
    if conditions:
        table = render_table(
            ("Type", "Status", "Reason", "Age", "Message"),
            [
                [
                    str(c.get("type", "")),
                    str(c.get("status", "")),
                    str(c.get("reason", "")),
                    _ago(c.get("lastTransitionTime"), now),
                    str(c.get("message", "")),
                ]
                for c in conditions
            ],
        )
        out += ["  " + line for line in table.splitlines()]
    else:
        out.append("  <none>")
    out.append("Events:")
    if events:
        ordered = sorted(events, key=_event_time)
        table = render_table(
            ("Type", "Reason", "Age", "From", "Message"),
            [
                [
                    str(e.get("type", "")),
                    str(e.get("reason", "")),
                    _event_age(e, now),
                    str(
                        (e.get("source") or {}).get("component")
                        or e.get("reportingComponent")
                        or ""
                    ),
                    " ".join(str(e.get("message", "")).split()),
                ]
                for e in ordered
            ],
        )
        out += ["  " + line for line in table.splitlines()]
    else:
        out.append("  <none>")
    return "\n".join(out)


def _event_time(event: Obj) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def _event_age(event: Obj, now: datetime) -> str:
    count = event.get("count")
    text = _ago(_event_time(event) or None, now)
    if isinstance(count, int) and count > 1:
        first = event.get("firstTimestamp")
        return f"{text} (x{count} over {_ago(first, now)})" if first else f"{text} (x{count})"
    return text
