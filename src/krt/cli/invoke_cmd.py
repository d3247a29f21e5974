"""``krt invoke``: call a Ready function Run through the gateway (seed 000, Invoke Contract).

Steps: validate the input (JSON, size, invocation ID) before any request; read the Run and
check it is a function Run in phase Ready; take ``status.endpoint.url`` and ``caBundle``;
choose the bearer token (:mod:`krt.cli.credentials`); POST once (:mod:`krt.cli.invoking`);
print the output on stdout and the invocation ID, outputs and latency on stderr; map an error
answer to its exit code (:mod:`krt.cli.exitcodes`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from krt.api.errors import InvalidObjectError
from krt.api.phases import Phase, is_terminal, phase_of
from krt.api.run import Endpoint
from krt.cli.connection import KubeTarget, kube_options, open_kube
from krt.cli.credentials import ServiceAccountRef, invoke_token, parse_service_account
from krt.cli.exitcodes import ExitCode, epilog
from krt.cli.failures import CommandFailed, run_async
from krt.cli.invoking import (
    Invocation,
    InvokeResult,
    check_body,
    check_endpoint_url,
    check_gateway_url,
    check_invocation_id,
    failure_for,
    override_base,
    post,
)
from krt.cli.lookup import get_object
from krt.cli.params import Duration
from krt.cli.run_refs import run_name
from krt.kube.resources import RUNS

Obj = dict[str, Any]


def read_input(data: str | None, stdin: TextIO) -> tuple[bytes, str]:
    """The request body from ``-d`` (JSON text, ``@file`` or ``-``) or stdin.

    Without ``-d``: stdin when it is not a terminal, else ``{}``; an empty (or blank)
    stdin then also means ``{}``, so ``krt invoke NAME`` from a script, cron job or CI step
    (stdin not a terminal, nothing piped) sends the default body instead of failing on
    "invalid JSON". With ``-d -`` stdin is read as given: empty stdin is an error.

    Returns:
        ``(body, where)``: the bytes and a label for messages.

    Raises:
        click.BadParameter: unreadable file, or ``-d -`` with nothing on stdin.
    """
    if data is None:
        if stdin.isatty():
            return b"{}", "the default body {}"
        piped = _read_all(stdin)
        if not piped.strip():
            return b"{}", "the default body {}"
        return piped, "stdin"
    if data == "-":
        piped = _read_all(stdin)
        if not piped.strip():
            raise click.BadParameter(
                "-d - reads the request JSON from stdin, but stdin was empty "
                "(pipe JSON in, or use -d '{...}' or -d @FILE)",
                param_hint="'-d/--data'",
            )
        return piped, "stdin"
    if data.startswith("@"):
        path = Path(data[1:])
        try:
            return path.read_bytes(), str(path)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path}: {exc.strerror}", param_hint="'-d/--data'"
            ) from None
    return data.encode("utf-8", errors="surrogateescape"), "-d"


def _read_all(stdin: TextIO) -> bytes:
    buffer = getattr(stdin, "buffer", None)
    return buffer.read() if buffer is not None else stdin.read().encode()


@click.command(
    "invoke",
    epilog="""\b
Examples:
  krt invoke summarize -d '{"text": "hello"}'
  krt invoke labeler -d @resourcelist.json > out.json
  cat input.json | krt invoke labeler
  krt invoke summarize -d '{}' --invocation-id job-42 --timeout 10s
\b
From outside the cluster, forward the gateway and point krt at it:
  kubectl -n kruntimes-system port-forward svc/runtime-gateway 8443:443 &
  krt invoke summarize -d '{}' --gateway-url https://127.0.0.1:8443
(TLS is still checked against the endpoint's host name and caBundle.)
"""
    + "\n"
    + epilog(),
)
@click.argument("name")
@click.option(
    "-d",
    "--data",
    help="Request JSON, @FILE to read it from a file, or - for stdin (default: what is "
    "piped to stdin; {} when nothing is).",
)
@click.option("--invocation-id", help="Your ID for this invocation (<= 128 visible ASCII bytes).")
@click.option(
    "--timeout",
    type=Duration(),
    default=None,
    help="Invocation timeout, e.g. 30s (gateway default 30s).",
)
@click.option(
    "--gateway-url",
    envvar="KRT_GATEWAY_URL",
    help="Reach the gateway here instead (https://host:port; the endpoint's path is kept; "
    "plain http:// is refused: every request carries a bearer token).",
)
@click.option(
    "--service-account",
    envvar="KRT_SERVICE_ACCOUNT",
    help="[NAMESPACE/]NAME: invoke as this ServiceAccount, with a TokenRequest token "
    "(instead of the kubeconfig's credentials; NAMESPACE defaults to the command's).",
)
@kube_options
def invoke_cmd(
    target: KubeTarget,
    name: str,
    data: str | None,
    invocation_id: str | None,
    timeout: float | None,
    gateway_url: str | None,
    service_account: str | None,
) -> None:
    """Invoke a function Run: print its output on stdout, metadata on stderr."""
    name = run_name(name)
    if invocation_id is not None:
        try:
            check_invocation_id(invocation_id)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--invocation-id'") from None
    if gateway_url:
        try:
            check_gateway_url(gateway_url)
        except ValueError as exc:
            raise click.BadParameter(
                str(exc), param_hint="'--gateway-url' (env KRT_GATEWAY_URL)"
            ) from None
    account: ServiceAccountRef | None = None
    if service_account:
        try:
            account = parse_service_account(service_account, target.namespace or "")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--service-account'") from None
    raw, where = read_input(data, sys.stdin)
    try:
        body = check_body(raw, where)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'-d/--data'") from None

    async def main() -> InvokeResult:
        async with open_kube(target) as kube:
            run = await get_object(kube, RUNS, name, kube.namespace)
            endpoint = ready_endpoint(run)
            token = await invoke_token(kube, service_account=account)
        url, server_name = endpoint.url, None
        if gateway_url:
            url, server_name = override_base(endpoint.url, gateway_url)
        return await post(
            Invocation(
                url=url,
                body=body,
                token=token,
                ca_bundle=endpoint.ca_bundle,
                tls_server_name=server_name,
                invocation_id=invocation_id,
                timeout_seconds=timeout,
                gateway_url_given=bool(gateway_url),
            )
        )

    result = run_async(main)
    if result.status != 200:
        failure = failure_for(result, name=name)
        click.echo(f"error: {failure.message}", err=True)
        sys.exit(int(failure.code))
    click.echo(result.body, nl=not result.body.endswith(b"\n"))
    click.echo(metadata_line(result), err=True)


def metadata_line(result: InvokeResult) -> str:
    """``invocation <id>  latency 12.3 ms  outputs {...}`` for stderr."""
    parts = [
        f"invocation {result.invocation_id or '-'}",
        f"latency {result.latency_seconds * 1000:.1f} ms",
    ]
    if result.outputs:
        parts.append(
            "outputs " + json.dumps(result.outputs, ensure_ascii=False, separators=(",", ":"))
        )
    return "  ".join(parts)


def ready_endpoint(run: Obj) -> Endpoint:
    """The endpoint of a Ready function Run.

    Raises:
        CommandFailed: a task Run (exit 10), a function that ended (exit 1), one not Ready
            yet (exit 8), a Ready Run without an endpoint yet (exit 8), or one whose
            endpoint is malformed or not ``https://`` (exit 13: the bearer token is never
            sent in plaintext, seed 000).
    """
    name = run["metadata"]["name"]
    spec, status = run.get("spec") or {}, run.get("status") or {}
    if "function" not in (spec.get("mode") or {}):
        raise CommandFailed(
            ExitCode.INVALID,
            f"Run {name} is a task Run; only function Runs (krt function create) can be invoked",
        )
    phase = phase_of(status.get("phase"))
    why = "; ".join(str(status[k]) for k in ("reason", "message") if status.get(k))
    if is_terminal(phase):
        raise CommandFailed(
            ExitCode.RUN_UNSUCCESSFUL,
            f"function {name} has ended ({phase.value}{': ' + why if why else ''}); "
            "create it again to invoke it",
        )
    ready_conditions = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    ready = all(c.get("status") == "True" for c in ready_conditions)
    if phase is not Phase.READY or not ready:
        raise CommandFailed(
            ExitCode.UNAVAILABLE,
            f"function {name} is not Ready (phase {phase.value}{', ' + why if why else ''}); "
            f"wait with: krt wait {name} --for ready",
        )
    raw = status.get("endpoint")
    try:
        endpoint = Endpoint.from_dict(raw) if isinstance(raw, dict) else None
    except InvalidObjectError as exc:
        raise CommandFailed(ExitCode.SERVER_ERROR, f"function {name}: {exc}") from exc
    if endpoint is None or not endpoint.url:
        raise CommandFailed(
            ExitCode.UNAVAILABLE, f"function {name} is Ready but publishes no status.endpoint yet"
        )
    try:
        check_endpoint_url(endpoint.url)
    except ValueError as exc:
        raise CommandFailed(
            ExitCode.SERVER_ERROR, f"function {name}: refusing to send the bearer token: {exc}"
        ) from None
    return endpoint
