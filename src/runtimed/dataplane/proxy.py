"""runtimed's public FunctionRuntime servicer: the invoke proxy on the Service port.

Seed 002: "The same FunctionRuntime service is also implemented by runtimed on the Runtime
Service port for gateway traffic. For that proxy hop only, InvokeFunctionRequest.registration
supplies run_uid with an empty registration_id. runtimed resolves the current assigned owner
and its private active registration, fills the opaque ID, and calls the colocated Runtime
Server." Seed 000 (Runtime Gateway, Authentication and Authorization, Invoke Contract,
Capacity and Concurrency) fixes the rest. One call goes through, in order:

1. request checks: ``registration.run_uid`` set, ``registration_id`` empty, invocation ID at
   most 128 bytes of visible ASCII, input at most 1 MiB (INVALID_ARGUMENT);
   ``x-kruntime-namespace`` / ``x-kruntime-runtime`` metadata, when sent, must name this
   Runtime (NOT_FOUND otherwise);
2. the bearer token (UNAUTHENTICATED when absent or malformed);
3. a hop marker (``x-kruntime-hop``) is honoured only on a connection with a verified peer
   certificate (PERMISSION_DENIED otherwise) and must carry the expectations;
4. the ownership cache finds the Run by UID (NOT_FOUND / 503 when unknown or unsynced);
5. authorization: SelfSubjectAccessReview via :class:`~runtimed.dataplane.authz.AuthzCache`
   for the exact Run (UNAUTHENTICATED / PERMISSION_DENIED; 503 when the API is unreachable);
   an owner reached by a hop authorizes the forwarded token again (from its own cache);
6. :func:`~runtimed.dataplane.routing.decide`: NOT_FOUND, FAILED_PRECONDITION/UNAVAILABLE,
   local or remote;
7. local: take the Run's slot (RESOURCE_EXHAUSTED at once when taken), fill the
   registration ID, call the Runtime Server; remote: forward once with the hop metadata.

Upstream answers pass through with their code, except that a Runtime Server NOT_FOUND (it
lost the registration) becomes FAILED_PRECONDITION: the Run exists, it is recovering (503,
not 404). A connection that fails before the request was sent is UNAVAILABLE; one that
breaks after it was sent is ABORTED (the invocation may have run: gateway 502
``InvocationInterrupted``, no ``Retry-After``); nothing is retried after dispatch. The
private registration ID is cleared from the response: the gateway never sees it.

Cancellation: the connection handler (:mod:`runtimed.dataplane.server`) cancels the call
when the caller resets its stream or disconnects; the outgoing call then resets its own
stream (:mod:`runtimed.dataplane.channels`) and the slot is freed as the ``with`` block
unwinds. A request read together with that reset (one read: the next invoke right after a
client disconnected) waits for the release instead of getting 429, and a forward to the
owner waits for a cancelled forward of the same Run to send its reset first
(:mod:`krt.invocation_slots`). RegisterFunction, FunctionStatus and UnregisterFunction are PERMISSION_DENIED here:
only the gateway's invoke is public.

Every log line of an invocation carries ``runtime``, ``namespace``, ``run_uid`` and
``invocation_id``; tokens are never logged.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn, Protocol

import purerpc
import trio
from google.protobuf.message import DecodeError

from krt.api import limits
from krt.api.invoke_headers import NAMESPACE_METADATA, RUNTIME_METADATA
from krt.grpc.client import ConnectionLostError, GrpcStatusError, Metadata
from krt.grpc.status_messages import StatusWithTrailers
from krt.grpc.unary_server import current_call_scope
from krt.invocation_slots import Busy, InvocationSlots
from krt.kube.clock import Clock, SystemClock
from krt.proto.executor.v1 import runtime_grpc
from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed.dataplane.authz import AuthzCache, AuthzUnavailable, Outcome
from runtimed.dataplane.channels import ConnectFailed
from runtimed.dataplane.metrics import DataplaneMetrics
from runtimed.dataplane.ownership import OwnershipCache
from runtimed.dataplane.peer import peer_verified
from runtimed.dataplane.routing import (
    HopExpectation,
    Local,
    LocalRegistration,
    NotFound,
    Remote,
    Unavailable,
    decide,
)
from runtimed.dataplane.tokens import TokenError, bearer_token

__all__ = [
    "HOP_HEADER",
    "HOP_POD_UID_HEADER",
    "HOP_ATTEMPT_HEADER",
    "HOP_RUN_UID_HEADER",
    "MAX_INPUT_BYTES",
    "MAX_INVOCATION_ID_BYTES",
    "InvokeProxy",
    "ProxyIdentity",
    "Registrations",
    "Upstream",
]

log = logging.getLogger(__name__)

#: Hop marker: present (value ``1``) on a request one runtimed forwards to the owner.
HOP_HEADER: Final = "x-kruntime-hop"
#: The Run UID the forwarding runtimed expects the owner to hold.
HOP_RUN_UID_HEADER: Final = "x-kruntime-expected-run-uid"
#: The registration attempt (``status.attempt``) it expects.
HOP_ATTEMPT_HEADER: Final = "x-kruntime-expected-attempt"
#: The assigned Pod UID it expects (the owner's own Pod UID).
HOP_POD_UID_HEADER: Final = "x-kruntime-expected-pod-uid"
#: Largest invocation input, bytes (seed 000, Invoke Contract: 1 MiB).
MAX_INPUT_BYTES: Final = limits.MAX_INVOKE_INPUT_BYTES
#: Largest invocation ID, bytes (seed 000 / 002).
MAX_INVOCATION_ID_BYTES: Final = limits.MAX_INVOCATION_ID_BYTES

_SERVICE_ONLY: Final = (
    "only InvokeFunction is served on runtimed's Service port; "
    "{} is called by runtimed on its local Runtime Server only"
)
#: Metadata forwarded unchanged on a hop (besides ``authorization``).
_FORWARDED: Final = (NAMESPACE_METADATA, RUNTIME_METADATA)
#: Trailer telling the gateway which ``Retry-After`` a 503 gets (docs/gateway.md).
RETRY_AFTER_TRAILER: Final = "x-kruntime-retry-after"
#: Its value for a Run that will never accept invokes again: the gateway sends none.
_NEVER_RETRY: Final = ((RETRY_AFTER_TRAILER, "never"),)
#: Seconds before the Run's lifetime ends from which a CANCELLED answer counts as the
#: lifetime's cleanup (the clock's and the lifecycle's granularity).
_LIFETIME_SLACK_SECONDS: Final = 0.1
#: An invocation ID's characters (seed 000/002: visible ASCII).
_VISIBLE_ASCII: Final = re.compile(r"[\x21-\x7e]+")


class Registrations(Protocol):
    """Read access to the local function registry (``runtimed.functions.registry``)."""

    def get(self, run_uid: str) -> LocalRegistration | None:
        """The registry entry of Run ``run_uid``, or ``None``."""
        ...


class Upstream(Protocol):
    """Unary FunctionRuntime calls to a server (:class:`~runtimed.dataplane.channels.Channels`)."""

    async def unary_call(
        self,
        host: str,
        port: int,
        method: str,
        payload: bytes,
        *,
        metadata: Metadata = (),
        timeout_seconds: float | None = None,
    ) -> bytes:
        """One call; cancelling the caller cancels it on the server."""
        ...


@dataclass(frozen=True, slots=True)
class ProxyIdentity:
    """Who this proxy is and where its Runtime Server listens.

    Attributes:
        pod_uid: this Pod's UID (the owner identity of ``status.assignedPodUID``).
        namespace: this Pod's (and its Runs') namespace.
        runtime: this Runtime's name.
        server_host, server_port: the local Runtime Server.
    """

    pod_uid: str
    namespace: str
    runtime: str
    server_host: str
    server_port: int


class _Reject(Exception):
    """Answer the call with ``code``, ``message`` and trailers (internal control flow)."""

    def __init__(
        self, code: purerpc.StatusCode, message: str, trailers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailers = trailers

    def status(self) -> purerpc.Status:
        """The call's status (with the trailers, if any)."""
        if self.trailers:
            return StatusWithTrailers(self.code, self.message, self.trailers)
        return purerpc.Status(self.code, self.message)


def _values(metadata: Iterable[tuple[str, str]], name: str) -> list[str]:
    return [value for key, value in metadata if key == name]


def _one(metadata: Iterable[tuple[str, str]], name: str) -> str | None:
    values = _values(metadata, name)
    if len(values) > 1:
        raise _Reject(purerpc.StatusCode.INVALID_ARGUMENT, f"metadata {name!r} sent more than once")
    return values[0] if values else None


def _hop(metadata: Iterable[tuple[str, str]]) -> HopExpectation | None:
    """Parse the hop marker and expectations (None: not a hop)."""
    marker = _one(metadata, HOP_HEADER)
    if marker is None:
        return None
    if not peer_verified():
        raise _Reject(
            purerpc.StatusCode.PERMISSION_DENIED,
            f"{HOP_HEADER} is accepted only from a peer runtimed with a verified certificate",
        )
    if marker != "1":
        raise _Reject(
            purerpc.StatusCode.FAILED_PRECONDITION,
            f"{HOP_HEADER}={marker!r}: a request is proxied at most once",
        )
    run_uid = _one(metadata, HOP_RUN_UID_HEADER) or ""
    pod_uid = _one(metadata, HOP_POD_UID_HEADER) or ""
    attempt_text = _one(metadata, HOP_ATTEMPT_HEADER) or ""
    # isascii(): str.isdigit() also accepts digits int() cannot read (e.g. "²")
    if (
        not run_uid
        or not pod_uid
        or not (attempt_text.isascii() and attempt_text.isdigit())
        or len(attempt_text) > 9
    ):
        raise _Reject(
            purerpc.StatusCode.INVALID_ARGUMENT,
            f"a hop needs {HOP_RUN_UID_HEADER}, {HOP_POD_UID_HEADER} and a decimal "
            f"{HOP_ATTEMPT_HEADER}",
        )
    return HopExpectation(run_uid=run_uid, attempt=int(attempt_text), pod_uid=pod_uid)


def _check_request(message: Any) -> None:
    """Step 1 of the module docstring (INVALID_ARGUMENT, naming the field and limit)."""
    bad = purerpc.StatusCode.INVALID_ARGUMENT
    if not message.registration.run_uid:
        raise _Reject(bad, "registration.run_uid must be set")
    if message.registration.registration_id:
        raise _Reject(
            bad,
            "registration.registration_id must be empty on runtimed's Service port "
            "(runtimed fills in the private registration)",
        )
    invocation_id = message.invocation_id
    if len(invocation_id) > MAX_INVOCATION_ID_BYTES or (
        invocation_id and not _VISIBLE_ASCII.fullmatch(invocation_id)
    ):
        raise _Reject(
            bad,
            f"invocation_id must be at most {MAX_INVOCATION_ID_BYTES} bytes of visible ASCII",
        )
    if len(message.input) > MAX_INPUT_BYTES:
        raise _Reject(
            bad, f"input is {len(message.input)} bytes; the limit is {MAX_INPUT_BYTES} bytes"
        )


class InvokeProxy(runtime_grpc.FunctionRuntimeServicer):  # type: ignore[misc]
    """The FunctionRuntime servicer of runtimed's Service port (see the module docstring).

    Args:
        identity: this Pod, Runtime and Runtime Server address.
        cache: the ownership/readiness cache.
        registrations: the local function registry.
        authz: the authorization cache.
        server: upstream for the local Runtime Server (plaintext).
        peers: upstream for owner runtimed (mutual TLS), or ``None`` when peer TLS is not
            configured (a remote owner is then UNAVAILABLE).
        metrics: the proxy's metrics.
        slots: the in-flight set (a new one when ``None``).
        clock: wall clock for the Run's lifetime bound (default the system clock).
    """

    def __init__(
        self,
        *,
        identity: ProxyIdentity,
        cache: OwnershipCache,
        registrations: Registrations,
        authz: AuthzCache,
        server: Upstream,
        peers: Upstream | None,
        metrics: DataplaneMetrics | None = None,
        slots: InvocationSlots | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.identity = identity
        self.cache = cache
        self.registrations = registrations
        self.authz = authz
        self.server = server
        self.peers = peers
        self.metrics = metrics or DataplaneMetrics()
        self.slots = slots if slots is not None else InvocationSlots()
        self.clock = clock or SystemClock()
        #: The bound Service port, once listening (set by ``serve_dataplane``).
        self.port = 0
        #: Why the local Runtime Server is not healthy (its last ``Health`` answer, set by
        #: runtimed's readiness loop), or ``None`` while it is. Local invokes are then
        #: refused at once with UNAVAILABLE (gateway 503) instead of each waiting its whole
        #: deadline on a hung server (seed 000: an unreachable owner is a 503).
        self.server_down: str | None = None

    # -- the public method -----------------------------------------------------------------

    async def InvokeFunction(self, message: Any, request: Any) -> Any:  # noqa: N802
        """Serve one invocation (seed 002 proxy hop; see the module docstring).

        Args:
            message: the ``InvokeFunctionRequest``.
            request: purerpc's request event (metadata, ``grpc-timeout``).

        Returns:
            The ``InvokeFunctionResponse`` (registration ID cleared).

        Raises:
            purerpc.RpcFailedError: every non-OK answer, with the code of docs/gateway.md.
        """
        started = trio.current_time()
        timeout = getattr(request, "timeout", None)
        deadline = math.inf if timeout is None else started + timeout.total_seconds()
        metadata: tuple[tuple[str, str], ...] = tuple(getattr(request, "custom_metadata", ()))
        fields: dict[str, Any] = {
            "runtime": self.identity.runtime,
            "namespace": self.identity.namespace,
            "run_uid": str(message.registration.run_uid)[:64],
            "invocation_id": str(message.invocation_id)[:MAX_INVOCATION_ID_BYTES]
            or secrets.token_hex(16),
        }
        route = "none"
        code = "CANCELLED"
        self.metrics.in_flight.inc()
        try:
            route, response = await self._invoke(message, metadata, deadline, fields)
            code = "OK"
            if log.isEnabledFor(logging.INFO):  # the extra fields cost even when not logged
                log.info("invoked", extra={**fields, "route": route, **self._elapsed(started)})
            return response
        except _Reject as reject:
            code = reject.code.name
            log.info(
                "invoke answered with an error status",
                extra={
                    **fields,
                    "route": fields.get("route", route),
                    "code": code,
                    "reason": reject.message,
                    **self._elapsed(started),
                },
            )
            raise purerpc.RpcFailedError(reject.status()) from None
        except Exception:
            code = "INTERNAL"
            log.exception("invoke failed", extra={**fields, **self._elapsed(started)})
            raise
        except trio.Cancelled:
            if trio.current_time() >= deadline:
                code = "DEADLINE_EXCEEDED"  # the connection handler answers it
                log.info("invocation deadline passed", extra={**fields, **self._elapsed(started)})
            else:
                log.info(
                    "invocation cancelled by the caller",
                    extra={**fields, **self._elapsed(started)},
                )
            raise
        finally:
            route = str(fields.get("route", route))
            self.metrics.in_flight.dec()
            self.metrics.record(code=code, route=route, seconds=trio.current_time() - started)

    @staticmethod
    def _elapsed(started: float) -> dict[str, float]:
        return {"duration_ms": round((trio.current_time() - started) * 1000, 3)}

    async def _invoke(
        self,
        message: Any,
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
        fields: dict[str, Any],
    ) -> tuple[str, Any]:
        _check_request(message)
        if not message.invocation_id:
            message.invocation_id = fields["invocation_id"]
        for name, ours in (
            (NAMESPACE_METADATA, self.identity.namespace),
            (RUNTIME_METADATA, self.identity.runtime),
        ):
            sent = _one(metadata, name)
            if sent is not None and sent != ours:
                raise _Reject(
                    purerpc.StatusCode.NOT_FOUND,
                    f"{name} {sent!r} does not match this Runtime ({ours!r})",
                )
        try:
            token = bearer_token(metadata)
        except TokenError as exc:
            raise _Reject(purerpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        hop = _hop(metadata)
        uid = str(message.registration.run_uid)
        if hop is not None:
            fields["hop"] = True
        run = self.cache.run(uid)
        if not self.cache.synced or run is None:
            self._answer(self._route(uid, hop))  # NOT_FOUND or UNAVAILABLE
        assert run is not None
        fields["run"] = run.name
        outcome = await self._authorize(token, run.namespace, run.name, uid)
        if outcome is Outcome.UNAUTHENTICATED:
            raise _Reject(
                purerpc.StatusCode.UNAUTHENTICATED,
                "the bearer token is invalid or expired (SelfSubjectAccessReview)",
            )
        if outcome is Outcome.DENIED:
            raise _Reject(
                purerpc.StatusCode.PERMISSION_DENIED,
                f"the caller may not get runs.kruntimes.io {run.namespace}/{run.name}",
            )
        decision = self._route(uid, hop)
        if isinstance(decision, Local):
            fields["route"] = "local"
            if hop is not None:
                self.metrics.hop("in")
            return "local", await self._call_local(decision, message, deadline)
        if isinstance(decision, Remote):
            fields["route"] = "remote"
            fields["owner"] = f"{decision.host}:{decision.port}"
            return "remote", await self._call_owner(decision, message, metadata, token, deadline)
        self._answer(decision)

    def _route(self, uid: str, hop: HopExpectation | None) -> Any:
        run = self.cache.run(uid)
        return decide(
            uid=uid,
            synced=self.cache.synced,
            run=run,
            self_pod_uid=self.identity.pod_uid,
            owner_pod=self.cache.pod(run.assigned_pod_uid) if run is not None else None,
            local=self.registrations.get(uid),
            hop=hop,
        )

    @staticmethod
    def _answer(decision: NotFound | Unavailable | Any) -> NoReturn:
        if isinstance(decision, NotFound):
            raise _Reject(purerpc.StatusCode.NOT_FOUND, decision.reason)
        if isinstance(decision, Unavailable):
            trailers = () if decision.retry else _NEVER_RETRY
            raise _Reject(purerpc.StatusCode[decision.code.value], decision.reason, trailers)
        raise AssertionError(f"not a refusal: {decision!r}")  # pragma: no cover

    async def _authorize(self, token: str, namespace: str, name: str, uid: str) -> Outcome:
        try:
            return await self.authz.authorize(token, namespace=namespace, name=name, uid=uid)
        except AuthzUnavailable as exc:
            raise _Reject(
                purerpc.StatusCode.UNAVAILABLE, f"authorization could not be checked: {exc}"
            ) from None

    @staticmethod
    def _remaining(deadline: float) -> float | None:
        if deadline == math.inf:
            return None
        return max(0.001, deadline - trio.current_time())

    async def _call_local(self, decision: Local, message: Any, deadline: float) -> Any:
        if self.server_down is not None:
            raise _Reject(
                purerpc.StatusCode.UNAVAILABLE,
                f"the local Runtime Server is not answering its health checks "
                f"({self.server_down}); RuntimedReady is False until it does",
            )
        try:
            async with self.slots.claim(decision.run.uid, call=current_call_scope()):
                # after the claim: a wait for a cancelled holder's release counts against it
                request, remaining, lifetime = self._local_request(decision, message, deadline)
                payload = await self.server.unary_call(
                    self.identity.server_host,
                    self.identity.server_port,
                    "InvokeFunction",
                    request,
                    timeout_seconds=remaining,
                )
        except Busy as exc:
            raise _Reject(purerpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except GrpcStatusError as exc:
            if exc.code == purerpc.StatusCode.NOT_FOUND.value:
                raise _Reject(
                    purerpc.StatusCode.FAILED_PRECONDITION,
                    f"the Runtime Server has no registration for the Run: {exc.message}",
                ) from None
            if lifetime is not None and self._lifetime_cut(exc.code, decision):
                raise _Reject(
                    purerpc.StatusCode.DEADLINE_EXCEEDED,
                    _lifetime_message(decision.run.timeout, lifetime),
                ) from None
            raise _Reject(_status_code(exc.code), exc.message) from None
        except ConnectFailed as exc:
            raise _Reject(
                purerpc.StatusCode.UNAVAILABLE, f"the local Runtime Server is unreachable: {exc}"
            ) from None
        except ConnectionLostError as exc:
            raise _lost("the local Runtime Server", exc) from None
        return _response(payload, message)

    def _lifetime_cut(self, code: int, decision: Local) -> bool:
        """Whether a lifetime-bounded call's error status means the lifetime cut it short.

        DEADLINE_EXCEEDED: the deadline was the lifetime. CANCELLED once the lifetime has
        passed: runtimed's lifetime cleanup unregistered the Run under the invocation.
        """
        if code == purerpc.StatusCode.DEADLINE_EXCEEDED.value:
            return True
        expires_at = decision.run.expires_at
        return (
            code == purerpc.StatusCode.CANCELLED.value
            and expires_at is not None
            and self.clock.now().timestamp() >= expires_at - _LIFETIME_SLACK_SECONDS
        )

    def _local_request(
        self, decision: Local, message: Any, deadline: float
    ) -> tuple[bytes, float | None, float | None]:
        """The Runtime Server's request: the private registration ID, a bounded timeout.

        Returns:
            The serialized request, the call's deadline from now (seconds; ``None``:
            unbounded) and, when the Run's remaining lifetime (``spec.timeout``) is what
            bounds it (shorter than both the caller's deadline and ``timeout_millis``),
            that lifetime in seconds (else ``None``).

        Raises:
            _Reject: FAILED_PRECONDITION once the Run's lifetime has ended.
        """
        forward = pb.InvokeFunctionRequest()
        forward.CopyFrom(message)
        forward.registration.registration_id = decision.registration_id
        remaining = self._remaining(deadline)
        bound: float | None = None
        if decision.run.expires_at is not None:
            lifetime = decision.run.expires_at - self.clock.now().timestamp()
            if lifetime <= 0:
                raise _Reject(
                    purerpc.StatusCode.FAILED_PRECONDITION,
                    "the Run's lifetime (spec.timeout) has ended; it is terminating",
                )
            requested_s = message.timeout_millis / 1000 if message.timeout_millis > 0 else math.inf
            if lifetime < requested_s and (remaining is None or lifetime < remaining):
                bound = lifetime
            remaining = lifetime if remaining is None else min(remaining, lifetime)
        if remaining is not None:
            # seed 002: timeout_millis is bounded by the Run lifetime and the caller's deadline
            budget = max(1, int(remaining * 1000))
            requested = int(message.timeout_millis)
            forward.timeout_millis = min(requested, budget) if requested > 0 else budget
        return bytes(forward.SerializeToString()), remaining, bound

    async def _call_owner(
        self,
        decision: Remote,
        message: Any,
        metadata: tuple[tuple[str, str], ...],
        token: str,
        deadline: float,
    ) -> Any:
        if self.peers is None:
            raise _Reject(
                purerpc.StatusCode.UNAVAILABLE,
                "the Run is owned by another Pod and peer TLS is not configured here",
            )
        expected = decision.expectation
        forwarded: list[tuple[str, str]] = [
            ("authorization", f"Bearer {token}"),
            (HOP_HEADER, "1"),
            (HOP_RUN_UID_HEADER, expected.run_uid),
            (HOP_ATTEMPT_HEADER, str(expected.attempt)),
            (HOP_POD_UID_HEADER, expected.pod_uid),
        ]
        forwarded += [(name, value) for name, value in metadata if name in _FORWARDED]
        self.metrics.hop("out")
        try:
            # never ahead of the RST_STREAM of a cancelled forward of this Run (krt.invocation_slots)
            async with self.slots.passage(decision.run.uid, call=current_call_scope()):
                payload = await self.peers.unary_call(
                    decision.host,
                    decision.port,
                    "InvokeFunction",
                    message.SerializeToString(),
                    metadata=forwarded,
                    timeout_seconds=self._remaining(deadline),
                )
        except GrpcStatusError as exc:
            kept = tuple(
                (k, v)
                for k, v in exc.trailers
                if k == RETRY_AFTER_TRAILER and v.isascii() and v.isprintable()
            )
            raise _Reject(_status_code(exc.code), exc.message, kept[:1]) from None
        except ConnectFailed as exc:
            raise _Reject(
                purerpc.StatusCode.UNAVAILABLE, f"the owner runtimed is unreachable: {exc}"
            ) from None
        except ConnectionLostError as exc:
            raise _lost("the owner runtimed", exc) from None
        return _response(payload, message)

    # -- Pod-local operations are not public ---------------------------------------------------

    async def RegisterFunction(self, message: Any) -> Any:  # noqa: N802
        """Refused with PERMISSION_DENIED (Pod-local operation)."""
        raise purerpc.PermissionDeniedError(_SERVICE_ONLY.format("RegisterFunction"))

    async def FunctionStatus(self, message: Any) -> Any:  # noqa: N802
        """Refused with PERMISSION_DENIED (Pod-local operation)."""
        raise purerpc.PermissionDeniedError(_SERVICE_ONLY.format("FunctionStatus"))

    async def UnregisterFunction(self, message: Any) -> Any:  # noqa: N802
        """Refused with PERMISSION_DENIED (Pod-local operation)."""
        raise purerpc.PermissionDeniedError(_SERVICE_ONLY.format("UnregisterFunction"))


_CODES: Final[Mapping[int, purerpc.StatusCode]] = {code.value: code for code in purerpc.StatusCode}


def _status_code(value: int) -> purerpc.StatusCode:
    return _CODES.get(value, purerpc.StatusCode.UNKNOWN)


def _lost(upstream: str, exc: ConnectionLostError) -> _Reject:
    """The answer for a connection to ``upstream`` that broke during the call.

    Before anything was sent (after the one replacement connection): UNAVAILABLE, the
    invocation did not run (gateway 503, retry later). After dispatch: ABORTED, the
    invocation may have run and is never retried (seed 000: "a connection failure may have
    an unknown execution outcome"; gRPC: retry "at a higher level", i.e. only a caller
    whose handler is idempotent); the gateway answers 502 ``InvocationInterrupted``.
    """
    if not exc.dispatched:
        return _Reject(
            purerpc.StatusCode.UNAVAILABLE,
            f"the connection to {upstream} failed before the invocation was sent: {exc}",
        )
    return _Reject(
        purerpc.StatusCode.ABORTED,
        f"the connection to {upstream} broke during the invocation ({exc})",
    )


def _lifetime_message(timeout: str, lifetime: float) -> str:
    """The DEADLINE_EXCEEDED message of an invocation the Run's lifetime cut short.

    Args:
        timeout: ``spec.timeout`` as written ("" when unknown).
        lifetime: seconds the Run had left when the invocation was dispatched.
    """
    limit = f"spec.timeout {timeout}" if timeout else "spec.timeout"
    return (
        f"the function's lifetime ({limit}) ended {lifetime:.1f} s into the invocation; "
        "an invocation is bounded by the Run's remaining lifetime (the Run ends with phase "
        "Timeout, LifetimeExceeded)"
    )


def _response(payload: bytes, request: Any) -> Any:
    """Parse the upstream response; clear the private registration ID."""
    try:
        response = pb.InvokeFunctionResponse.FromString(payload)
    except DecodeError as exc:
        raise _Reject(
            purerpc.StatusCode.INTERNAL, f"upstream sent an invalid InvokeFunctionResponse: {exc}"
        ) from None
    response.registration.registration_id = ""
    if not response.registration.run_uid:
        response.registration.run_uid = request.registration.run_uid
    if not response.invocation_id:
        response.invocation_id = request.invocation_id
    return response
