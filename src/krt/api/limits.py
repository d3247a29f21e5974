"""Bounds of the kruntimes.io/v1alpha1 API, shared by the CRD schema and the Python validators.

The CRD (:mod:`krt.api.schema`) and the Python checks (outputs, endpoint, resources) read the
same constants, so a bound changes in one place. Sizes are bytes unless a name says
``CHARS`` (OpenAPI ``maxLength`` counts characters); every value here is checked by a test
that feeds one unit more than the bound.
"""

from __future__ import annotations

from typing import Final

# --- names -----------------------------------------------------------------------------------
#: DNS-1123 label (Kubernetes Runtime and namespace names).
DNS_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MAX_CHARS: Final = 63
#: DNS-1123 subdomain (Kubernetes object names such as Pods).
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX_CHARS: Final = 253
#: Kubernetes UIDs are UUIDs; accept any UID-shaped token without path or URL syntax.
UID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9-]{0,127}$"

# --- spec.source -----------------------------------------------------------------------------
#: Inline source is stored in etcd with the Run: keep it well below the 1.5 MiB object limit.
MAX_INLINE_SOURCE_CHARS: Final = 256 * 1024
MAX_PATH_CHARS: Final = 1024
MAX_REPO_URL_CHARS: Final = 2048
COMMIT_SHA_PATTERN: Final = r"^[0-9a-fA-F]{40}$"

# --- spec.mode -------------------------------------------------------------------------------
MAX_ARGS: Final = 256
MAX_ARG_CHARS: Final = 4096
#: ``module.function`` (dotted packages allowed) or ``file.function``: identifiers joined by dots.
HANDLER_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
MAX_HANDLER_CHARS: Final = 256
MAX_IDLE_TIMEOUT_SECONDS: Final = 2**31 - 1

# --- spec.env --------------------------------------------------------------------------------
MAX_ENV: Final = 128
ENV_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_ENV_NAME_CHARS: Final = 256
MAX_ENV_VALUE_CHARS: Final = 32 * 1024
#: The Runtime Servers' bound on the environment of one Execute or RegisterFunction (seed 002
#: built-in servers): each variable counts the UTF-8 bytes of its name and value plus
#: :data:`ENV_ENTRY_OVERHEAD_BYTES` (``=`` and the terminating NUL of an ``environ`` entry).
RUNTIME_SERVER_MAX_ENV_BYTES: Final = 256 * 1024
ENV_ENTRY_OVERHEAD_BYTES: Final = 2
#: Of those, what runtimed keeps for the variables it adds itself (``$KRUNTIME_OUTPUTS``, a
#: path of at most 4096 bytes), so a Run the API admits is never rejected at Execute.
ENV_RESERVED_BYTES: Final = 8 * 1024
#: ``spec.env`` total, counted as the Runtime Servers count it: 248 KiB.
MAX_ENV_TOTAL_BYTES: Final = RUNTIME_SERVER_MAX_ENV_BYTES - ENV_RESERVED_BYTES

# --- spec.timeout, retryPolicy ---------------------------------------------------------------
#: Go/Kubernetes duration syntax (unsigned): ``0`` or one or more ``<number><unit>``, unit one of
#: ns, us, µs (U+00B5 or U+03BC), ms, s, m, h.
DURATION_PATTERN: Final = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
MAX_DURATION_CHARS: Final = 64
#: The longest duration Go's ``time.ParseDuration`` accepts: int64 nanoseconds
#: (``2562047h47m16.854775807s``, about 292 years); longer ones are rejected, not wrapped.
MAX_DURATION_NANOSECONDS: Final = 2**63 - 1
MAX_DURATION_TEXT: Final = "2562047h47m16.854775807s"
MAX_ATTEMPTS: Final = 100
#: ``spec.ttlSecondsAfterFinished`` (seconds; 0 deletes at once, like a Job's).
MAX_TTL_SECONDS: Final = 2**31 - 1
#: Exponential backoff never waits longer than this between two attempts (seconds).
MAX_BACKOFF_SECONDS: Final = 300.0

# --- resources -------------------------------------------------------------------------------
MAX_RESOURCE_KINDS: Final = 16
RESOURCE_NAME_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
MAX_RESOURCE_NAME_CHARS: Final = 253
#: Largest logical quantity accepted (fits int64 everywhere, including CEL).
MAX_RESOURCE_QUANTITY: Final = 2**31 - 1
#: A logical quantity written as a string (the seeds' ``runs: "2"``): plain decimal digits, at
#: most 10 (enough for :data:`MAX_RESOURCE_QUANTITY`), no sign, suffix or fraction.
RESOURCE_QUANTITY_STRING_PATTERN: Final = "^[0-9]{1,10}$"

# --- status ----------------------------------------------------------------------------------
#: ``status.message`` and condition messages: a short summary, e.g. a failure's stderr tail.
MAX_MESSAGE_CHARS: Final = 2048
MAX_REASON_CHARS: Final = 128
REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
MAX_CONDITION_TYPE_CHARS: Final = 316
MAX_CONDITIONS: Final = 16
#: Seed 000, Run Status API: the endpoint URL is limited to 2048 bytes (ASCII only, so chars).
MAX_ENDPOINT_URL_BYTES: Final = 2048
#: Seed 000, Run Status API: the PEM CA bundle is limited to 16 KiB (decoded bytes).
MAX_CA_BUNDLE_BYTES: Final = 16 * 1024
#: ``caBundle`` travels base64-encoded: 16 KiB decodes from at most this many characters.
MAX_CA_BUNDLE_BASE64_CHARS: Final = 4 * ((MAX_CA_BUNDLE_BYTES + 2) // 3)

# --- outputs (seed 000 Invoke Contract: "the same key/count/value limits as Run outputs") -----
OUTPUT_KEY_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,63}$"
MAX_OUTPUT_KEY_CHARS: Final = 63
MAX_OUTPUTS: Final = 64
MAX_OUTPUT_VALUE_BYTES: Final = 4 * 1024
MAX_OUTPUTS_TOTAL_BYTES: Final = 16 * 1024

# --- invocations (seed 000 "Invoke Contract", seed 002 "Invocation Semantics") ---------------
#: Largest invocation input: the gateway's request body, runtimed's and the Runtime Servers'
#: ``InvokeFunctionRequest.input`` (bytes; seed 000: "request body: 1 MiB").
MAX_INVOKE_INPUT_BYTES: Final = 1024 * 1024
#: Largest invocation output a built-in Runtime Server returns (bytes).
MAX_INVOKE_OUTPUT_BYTES: Final = 1024 * 1024
#: Largest invocation ID (bytes; seed 000/002: "invocation ID: 128 bytes").
MAX_INVOCATION_ID_BYTES: Final = 128
#: The invocation timeout when none is given (``timeout_millis == 0``; seconds).
DEFAULT_INVOKE_TIMEOUT_SECONDS: Final = 30.0
