"""``krt invoke``'s HTTP part: one POST to a function endpoint, and reading the answer.

Seed 000, Invoke Contract, and docs/gateway.md: ``POST <status.endpoint.url>`` with
``Authorization: Bearer``, ``Content-Type: application/json``, ``X-Kruntime-Invocation-ID``
(optional) and ``X-Kruntime-Timeout`` (milliseconds). TLS is verified against the Run's
``status.endpoint.caBundle`` when it has one, else against the system roots. The client never
retries an invocation (seed 000: no retry after dispatch).

``--gateway-url`` replaces the endpoint's host and port (the path stays) to reach the
gateway from outside a cluster, e.g. through ``kubectl port-forward``; TLS still checks the
certificate against the endpoint's own host name (sent as SNI), so the gateway's certificate
needs no extra names.

Only ``https://`` is ever dialled (seed 000, Gateway: "Plaintext HTTP is not supported
because every client request carries a Kubernetes bearer token"): a plain ``http://``
``--gateway-url``/``KRT_GATEWAY_URL`` or ``status.endpoint.url`` is refused before the token
leaves the process, so a typo in an environment variable cannot leak a cluster credential.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import httpx
import trio

from krt.api import limits
from krt.api.invoke_headers import INVOCATION_ID_HEADER, OUTPUTS_HEADER, TIMEOUT_HEADER
from krt.cli.exitcodes import ExitCode, for_http_status
from krt.cli.failures import CommandFailed, one_line
from krt.kube.http11_errors import describe_failure

#: Seed 000: request bodies are limited to 1 MiB.
MAX_BODY_BYTES: Final = limits.MAX_INVOKE_INPUT_BYTES
#: Seed 000: invocation IDs are limited to 128 bytes (visible ASCII per docs/gateway.md).
MAX_INVOCATION_ID_BYTES: Final = limits.MAX_INVOCATION_ID_BYTES
#: Seconds the client waits beyond the invocation timeout for the gateway's own 504.
CLIENT_GRACE_SECONDS: Final = 5.0
#: The gateway's largest invocation timeout (docs/gateway.md ``--max-timeout``, seconds): the
#: client's bound when no ``--timeout`` is given.
GATEWAY_MAX_TIMEOUT_SECONDS: Final = 300.0


@dataclass(frozen=True)
class Invocation:
    """One invoke request.

    Attributes:
        url: where to POST (the endpoint URL, possibly with ``--gateway-url`` applied).
        body: the JSON request body (bytes, already validated).
        token: the bearer token.
        ca_bundle: PEM trust bundle (``status.endpoint.caBundle``), or None for system roots.
        tls_server_name: host name the certificate must match (and SNI), or None for the
            URL's host.
        invocation_id: the caller's ID, or None to let the gateway generate one.
        timeout_seconds: the invocation timeout sent as ``X-Kruntime-Timeout``, or None for
            the gateway's default.
        gateway_url_given: ``url`` comes from ``--gateway-url``/``KRT_GATEWAY_URL`` (error
            messages say so instead of suggesting it).
    """

    url: str
    body: bytes
    token: str
    ca_bundle: bytes | None = None
    tls_server_name: str | None = None
    invocation_id: str | None = None
    timeout_seconds: float | None = None
    gateway_url_given: bool = False


@dataclass(frozen=True)
class InvokeResult:
    """The gateway's answer.

    Attributes:
        status: HTTP status code.
        body: the response body (the function's output on 200).
        invocation_id: ``X-Kruntime-Invocation-ID`` of the response.
        outputs: ``X-Kruntime-Outputs`` decoded, or None.
        latency_seconds: request sent to response read (seconds).
        error: the error body's ``error`` object on a non-200 answer (may be empty).
        retry_after: ``Retry-After`` (seconds) when sent.
    """

    status: int
    body: bytes
    invocation_id: str | None
    outputs: dict[str, Any] | None
    latency_seconds: float
    error: dict[str, Any] = field(default_factory=dict)
    retry_after: str | None = None


def check_invocation_id(value: str) -> str:
    """Check ``--invocation-id`` as the gateway will (<= 128 bytes, visible ASCII).

    Raises:
        ValueError: with what is wrong.
    """
    if not value:
        raise ValueError("must not be empty")
    if len(value.encode()) > MAX_INVOCATION_ID_BYTES:
        raise ValueError(f"is {len(value.encode())} bytes, over the limit of 128")
    if not all(0x21 <= ord(c) <= 0x7E for c in value):
        raise ValueError("must be visible ASCII characters (no spaces)")
    return value


def check_body(data: bytes, source: str) -> bytes:
    """Check an invoke body: valid JSON (RFC 8259, UTF-8) of at most 1 MiB.

    Args:
        data: the bytes to send.
        source: where they came from, for the message (``-d``, ``@file``, ``stdin``).

    Raises:
        ValueError: with a message naming the problem and position.
    """
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(f"{source}: {len(data)} bytes exceed the 1 MiB invoke limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise ValueError(f"{source}: JSON must not start with a byte order mark")

    def reject(constant: str) -> Any:
        raise ValueError(f"{source}: {constant} is not valid JSON")

    try:
        json.loads(text, parse_constant=reject)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{source}: invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise ValueError(f"{source}: JSON nested too deeply") from None
    return data


#: Why only https is dialled (seed 000, Gateway), for the refusal messages.
PLAINTEXT_REFUSED: Final = (
    "plaintext HTTP is not supported because every request carries a Kubernetes bearer token"
)


def check_gateway_url(gateway_url: str) -> None:
    """Check a ``--gateway-url``/``KRT_GATEWAY_URL`` value: ``https://host[:port]`` only.

    Args:
        gateway_url: the value given, e.g. ``https://127.0.0.1:8443``.

    Raises:
        ValueError: the URL is not absolute, is not ``https`` (seed 000: plaintext HTTP is
            not supported), or has a path, query or fragment.
    """
    parts = urlsplit(gateway_url)
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"{gateway_url!r} is not an absolute https:// URL")
    if parts.scheme.lower() != "https":
        raise ValueError(
            f"{gateway_url!r} is not an https:// URL: {PLAINTEXT_REFUSED} "
            "(kubectl port-forward forwards the gateway's TLS port as is: use https://)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{gateway_url!r} must be https://host[:port] only")


def check_endpoint_url(url: str, *, source: str = "status.endpoint.url") -> None:
    """Check that ``url`` may be sent a bearer token: an absolute https URL with a host.

    Args:
        url: the URL to POST to (the Run's ``status.endpoint.url``, possibly with
            ``--gateway-url`` applied).
        source: what to call the URL in the message.

    Raises:
        ValueError: not ``https://`` with a host (seed 000: the public invoke protocol is
            HTTPS; plaintext HTTP is not supported).
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "https" or not parts.hostname:
        shown = one_line(url, 200)
        raise ValueError(f"{source} {shown!r} is not an https:// URL: {PLAINTEXT_REFUSED}")


def override_base(url: str, gateway_url: str) -> tuple[str, str | None]:
    """Apply ``--gateway-url``: its host and port with the endpoint's path.

    Args:
        url: the endpoint URL.
        gateway_url: e.g. ``https://127.0.0.1:8443``.

    Returns:
        ``(new_url, tls_server_name)``: the host the certificate must match (the endpoint's),
        or None when the host did not change.

    Raises:
        ValueError: ``gateway_url`` fails :func:`check_gateway_url`.
    """
    check_gateway_url(gateway_url)
    parts = urlsplit(gateway_url)
    original = urlsplit(url)
    new = urlunsplit(("https", parts.netloc, original.path, original.query, ""))
    server_name = original.hostname if original.hostname != parts.hostname else None
    return new, server_name


def _ssl_context(ca_bundle: bytes | None) -> ssl.SSLContext:
    if ca_bundle:
        try:
            return ssl.create_default_context(cadata=ca_bundle.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            raise CommandFailed(
                ExitCode.SERVER_ERROR, f"status.endpoint.caBundle is not a usable PEM bundle: {exc}"
            ) from exc
    return ssl.create_default_context()


async def post(invocation: Invocation) -> InvokeResult:
    """Send one invocation and read the answer (never retried).

    The call is bounded by the invocation timeout (default: the gateway's largest, 300 s)
    plus :data:`CLIENT_GRACE_SECONDS`, so the gateway's own 504 normally arrives first.

    Raises:
        CommandFailed: the URL is not https (exit 13: the bearer token is never sent in
            plaintext, seed 000), the gateway could not be reached or TLS failed (exit 6),
            or the client-side deadline passed (exit 7).
    """
    try:
        check_endpoint_url(invocation.url, source="the invoke URL")
    except ValueError as exc:
        raise CommandFailed(
            ExitCode.SERVER_ERROR, f"refusing to send the bearer token: {exc}"
        ) from None
    headers = {
        "Authorization": f"Bearer {invocation.token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    if invocation.invocation_id:
        headers[INVOCATION_ID_HEADER] = invocation.invocation_id
    if invocation.timeout_seconds is not None:
        headers[TIMEOUT_HEADER] = str(max(1, round(invocation.timeout_seconds * 1000)))
    extensions = {}
    if invocation.tls_server_name:
        extensions["sni_hostname"] = invocation.tls_server_name
    verify = _ssl_context(invocation.ca_bundle)
    deadline = (
        invocation.timeout_seconds
        if invocation.timeout_seconds is not None
        else GATEWAY_MAX_TIMEOUT_SECONDS
    ) + CLIENT_GRACE_SECONDS
    where = urlsplit(invocation.url).netloc
    # httpx's own timeouts are off (timeout=None): trio.move_on_after bounds the call.
    async with httpx.AsyncClient(verify=verify, timeout=None, trust_env=False) as client:
        started = trio.current_time()
        with trio.move_on_after(deadline) as scope:
            try:
                response = await client.post(
                    invocation.url, content=invocation.body, headers=headers, extensions=extensions
                )
            except httpx.ConnectError as exc:
                raise CommandFailed(
                    ExitCode.UNREACHABLE, connect_failure(exc, where=where, invocation=invocation)
                ) from exc
            except httpx.TransportError as exc:
                raise CommandFailed(
                    ExitCode.UNREACHABLE,
                    f"the connection to the gateway at {where} failed: "
                    f"{_reason(exc, invocation.ca_bundle is not None)} "
                    "(the invocation may or may not have run; it is not retried)",
                ) from exc
        if scope.cancelled_caught:
            raise CommandFailed(
                ExitCode.TIMED_OUT,
                f"no answer from the gateway within {deadline:g}s (the invocation may still "
                "be running; it is not retried)",
            )
        latency = trio.current_time() - started
    return _result(response, latency)


#: Why a connection closed before the request went out (TLS handshake cut short): the
#: gateway accepted TCP, so the address is right; it is restarting or shedding load.
_CLOSED_EARLY: Final = ("the server closed the connection", "the server reset the connection")

#: Where the gateway address comes from when it is not the endpoint's own (cluster) host.
_OUTSIDE_HINT: Final = (
    " (outside the cluster? use --gateway-url with kubectl port-forward;"
    " on krt dev: source ~/.krt/dev/env, which sets KRT_GATEWAY_URL)"
)


def connect_failure(exc: BaseException, *, where: str, invocation: Invocation) -> str:
    """The one-line message for a gateway connection that failed before the request was sent.

    Args:
        exc: what httpx raised (``httpx.ConnectError``, its cause chain is read).
        where: ``host:port`` of the gateway tried.
        invocation: the invocation; ``gateway_url_given`` decides the hint.

    Returns:
        ``cannot connect to the gateway at HOST:PORT: REASON`` plus, for a connection
        closed during the handshake, ``(restarting?); nothing was sent, retry``; for other
        failures the "outside the cluster?" hint only when the address is the endpoint's
        own (not ``--gateway-url``/``KRT_GATEWAY_URL``, which the message names instead).
    """
    reason = _reason(exc, invocation.ca_bundle is not None)
    source = " (from --gateway-url/KRT_GATEWAY_URL)" if invocation.gateway_url_given else ""
    if reason in _CLOSED_EARLY:
        return (
            f"the gateway at {where}{source} closed the connection before the request was "
            "sent (restarting?); nothing was invoked, retry"
        )
    hint = (
        ""
        if invocation.gateway_url_given or "CERTIFICATE_VERIFY_FAILED" in reason
        else _OUTSIDE_HINT
    )
    return f"cannot connect to the gateway at {where}{source}: {reason}{hint}"


def _reason(exc: BaseException, with_bundle: bool) -> str:
    """The most telling text in an exception chain (TLS verification named as such).

    ``with_bundle``: the Run published ``status.endpoint.caBundle`` (else the system trust
    roots were used, and the message says so).
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for item in chain:
        if isinstance(item, ssl.SSLCertVerificationError):
            trusted = (
                "status.endpoint.caBundle"
                if with_bundle
                else "the system trust roots (the Run publishes no status.endpoint.caBundle: "
                "runtimed found no gateway CA in its namespace when it started)"
            )
            return one_line(
                f"TLS certificate verification failed: CERTIFICATE_VERIFY_FAILED "
                f"({item.verify_message}); the gateway's certificate does not chain to "
                f"{trusted} or does not name the endpoint host",
                500,
            )
    for item in chain:  # under httpx's wrappers: the socket's or TLS layer's own error
        if isinstance(item, OSError):
            return one_line(describe_failure(item), 300)
    texts = [str(item) for item in chain if str(item)]
    return one_line(texts[-1] if texts else describe_failure(exc), 300)


def _result(response: httpx.Response, latency: float) -> InvokeResult:
    outputs: dict[str, Any] | None = None
    raw_outputs = response.headers.get(OUTPUTS_HEADER)
    if raw_outputs:
        try:
            decoded = json.loads(raw_outputs)
            outputs = decoded if isinstance(decoded, dict) else None
        except ValueError:
            outputs = None
    error: dict[str, Any] = {}
    if response.status_code != 200:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            error = payload["error"]
        elif response.text:
            error = {"message": one_line(response.text, 300)}
    return InvokeResult(
        status=response.status_code,
        body=response.content,
        invocation_id=response.headers.get(INVOCATION_ID_HEADER),
        outputs=outputs,
        latency_seconds=latency,
        error=error,
        retry_after=response.headers.get("Retry-After"),
    )


#: What to do about each error status (appended to the one-line message).
_ADVICE: Final[dict[int, str]] = {
    400: "the gateway rejected the request",
    401: "the token was rejected: check the kubeconfig's credentials (or --service-account)",
    403: "RBAC does not allow you to get this Run: ask for 'get' on runs.kruntimes.io",
    404: "the function no longer exists (deleted or re-created): check krt get",
    413: "the request body exceeds 1 MiB",
    415: "the gateway only accepts application/json",
    429: "another invocation of this function is in flight; retry when it finishes",
    503: "the function is not available right now; retry later",
    504: "the invocation timed out; raise --timeout or make the handler faster",
}


#: ``reason`` of an invocation cut off after it was sent (HTTP 502; it may have run).
INTERRUPTED_REASON: Final = "InvocationInterrupted"
#: Advice for :data:`INTERRUPTED_REASON` (exit 13, not the 503's "retry later", exit 8).
_INTERRUPTED_ADVICE: Final = "retry only if the handler is idempotent"


#: HandlerError messages that are not the handler raising, by their leading error type.
_HANDLER_RESULT_ADVICE: dict[str, str] = {
    "OutputTooLarge": "the handler returned more than the 1 MiB invoke output limit",
    "InvalidOutputs": "the handler's outputs break the output rules (key, count or size)",
}


def _handler_advice(message: str, name: str) -> str:
    kind = message.split(":", 1)[0].strip()
    return _HANDLER_RESULT_ADVICE.get(
        kind, f"the function's handler raised; what it printed: krt logs {name or 'NAME'}"
    )


def failure_for(result: InvokeResult, *, name: str = "") -> CommandFailed:
    """The exit code and one-line message for a non-200 answer.

    Args:
        result: the gateway's answer.
        name: the function Run's name, for the ``krt logs NAME`` pointer of a HandlerError.
    """
    reason = str(result.error.get("reason") or "")
    message = one_line(str(result.error.get("message") or ""), 600)
    code = for_http_status(result.status, reason)
    parts = [f"HTTP {result.status}"]
    if reason:
        parts.append(reason)
    text = " ".join(parts)
    if message:
        text += f": {message}"
    advice = _ADVICE.get(result.status)
    if reason == INTERRUPTED_REASON:
        # dispatched, then cut off (docs/gateway.md): not "retry later" like a 503
        advice = (
            _INTERRUPTED_ADVICE
            if "may have run" in message
            else f"the invocation may have run; {_INTERRUPTED_ADVICE}"
        )
    elif result.status == 504 and "lifetime (spec.timeout" in message:
        # runtimed bounded the call by the Run's remaining lifetime: the Run has ended
        advice = (
            "the function's lifetime ended, so the Run has ended too (Timeout); create it "
            "again with a longer --timeout"
        )
    elif result.status == 503 and not result.retry_after:
        # runtimed sends no Retry-After for a Run that has ended (docs/gateway.md)
        advice = "it will not become Ready again; create it again to invoke it"
    elif result.status == 500:
        advice = (
            _handler_advice(message, name)
            if code is ExitCode.HANDLER_ERROR
            else "the gateway or runtime failed; see the gateway and runtimed logs"
        )
    if advice:
        text += f" ({advice}"
        if result.retry_after and result.status in (429, 503):
            text += f"; Retry-After {result.retry_after}s"
        text += ")"
    if result.invocation_id:
        text += f" [invocation {result.invocation_id}]"
    return CommandFailed(code, text)
