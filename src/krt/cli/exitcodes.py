"""The exit codes of ``krt``: one per kind of outcome, so scripts can branch on them.

The table is printed in ``krt --help`` (:func:`epilog`) and in docs/cli.md; a test checks
that both list every code. API server answers and gateway answers with the same meaning
share a code (a 404 is "not found" wherever it comes from); every gateway answer a caller
handles differently (docs/gateway.md) has its own code. 400 and 415 share :attr:`INVALID`:
both mean "fix the request", and ``krt`` itself always sends valid JSON.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of every ``krt`` command."""

    OK = 0
    """Success (``krt run --wait``: the Run Succeeded; ``krt invoke``: HTTP 200)."""
    RUN_UNSUCCESSFUL = 1
    """The Run ended Failed, Timeout or Cancelled, or a function never became Ready."""
    USAGE = 2
    """Bad command line or input (flag value, file, JSON): nothing was sent."""
    NOT_FOUND = 3
    """No such Run, Runtime or function (HTTP 404 from the API server or the gateway)."""
    UNAUTHENTICATED = 4
    """Credentials missing, invalid or expired (HTTP 401)."""
    FORBIDDEN = 5
    """Authenticated but not allowed (HTTP 403: RBAC)."""
    UNREACHABLE = 6
    """No usable kubeconfig, or the API server or gateway could not be reached (TLS, DNS,
    connection refused)."""
    TIMED_OUT = 7
    """A ``--timeout`` expired while waiting, or the invocation timed out (HTTP 504)."""
    UNAVAILABLE = 8
    """The function exists but cannot be invoked now: not Ready (HTTP 503); retry later."""
    TOO_MANY_REQUESTS = 9
    """An invocation of this function is already in flight (HTTP 429); retry later."""
    INVALID = 10
    """The server rejected the request: invalid Run (HTTP 422), bad request (400) or
    unsupported media type (415)."""
    TOO_LARGE = 11
    """The invoke body exceeds the gateway's 1 MiB limit (HTTP 413)."""
    HANDLER_ERROR = 12
    """The function's handler raised (HTTP 500, reason HandlerError)."""
    SERVER_ERROR = 13
    """Another server-side failure (HTTP 500 other than HandlerError, other 5xx)."""
    CONFLICT = 14
    """The name is taken (AlreadyExists) or the object changed meanwhile (HTTP 409)."""
    INTERRUPTED = 130
    """Interrupted (Ctrl-C)."""


#: One-line descriptions for the ``--help`` epilog and docs/cli.md, in code order.
DESCRIPTIONS: dict[ExitCode, str] = {
    ExitCode.OK: "success (run --wait: Succeeded; invoke: 200)",
    ExitCode.RUN_UNSUCCESSFUL: "Run ended Failed/Timeout/Cancelled (function: before Ready)",
    ExitCode.USAGE: "usage error: bad flag, file or JSON (nothing was sent)",
    ExitCode.NOT_FOUND: "not found: Run, Runtime or function (404)",
    ExitCode.UNAUTHENTICATED: "unauthenticated: missing/invalid/expired token (401)",
    ExitCode.FORBIDDEN: "forbidden by RBAC (403)",
    ExitCode.UNREACHABLE: "no kubeconfig, or API server/gateway unreachable",
    ExitCode.TIMED_OUT: "timed out: --timeout expired, or invocation timeout (504)",
    ExitCode.UNAVAILABLE: "function not Ready / unavailable (503); retry later",
    ExitCode.TOO_MANY_REQUESTS: "an invocation is already in flight (429); retry later",
    ExitCode.INVALID: "rejected as invalid (422, 400, 415)",
    ExitCode.TOO_LARGE: "invoke body over 1 MiB (413)",
    ExitCode.HANDLER_ERROR: "the function handler raised (500 HandlerError)",
    ExitCode.SERVER_ERROR: "other server error (500, 502, ...)",
    ExitCode.CONFLICT: "name taken or object changed (409)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def epilog() -> str:
    """The exit-code table as a ``--help`` epilog (click keeps ``\\b`` blocks verbatim)."""
    lines = ["\b", "Exit codes:"]
    lines += [f"  {int(code):>3}  {text}" for code, text in DESCRIPTIONS.items()]
    return "\n".join(lines)


def for_http_status(status: int, reason: str = "") -> ExitCode:
    """Map an HTTP error status (API server or gateway) to an exit code.

    Args:
        status: the HTTP status code (>= 400).
        reason: the error body's ``reason`` (``HandlerError`` picks
            :attr:`ExitCode.HANDLER_ERROR` for a 500).

    Returns:
        The exit code for that answer (:attr:`ExitCode.SERVER_ERROR` for any unlisted
        5xx, :attr:`ExitCode.INVALID` for any unlisted 4xx).
    """
    table = {
        400: ExitCode.INVALID,
        401: ExitCode.UNAUTHENTICATED,
        403: ExitCode.FORBIDDEN,
        404: ExitCode.NOT_FOUND,
        409: ExitCode.CONFLICT,
        413: ExitCode.TOO_LARGE,
        415: ExitCode.INVALID,
        422: ExitCode.INVALID,
        429: ExitCode.TOO_MANY_REQUESTS,
        503: ExitCode.UNAVAILABLE,
        504: ExitCode.TIMED_OUT,
    }
    if status == 500 and reason == "HandlerError":
        return ExitCode.HANDLER_ERROR
    if status in table:
        return table[status]
    return ExitCode.SERVER_ERROR if status >= 500 else ExitCode.INVALID
