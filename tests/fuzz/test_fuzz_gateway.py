"""The HTTPS gateway under random headers, bodies, paths and upstream answers.

One real gateway (hypercorn, TLS, the production ``serve_gateway``) in front of the fake
FunctionRuntime of ``tests/gateway/gwfakes.py`` serves every example; requests are raw
HTTP/1.1 bytes (:mod:`.raw_http`) so invalid bytes reach the server.

Properties (seed 000 "Invoke Contract", docs/gateway.md "Validation" and "Status codes"):

* a request built from valid and invalid parts gets exactly the answer of the first broken
  rule in the documented order (404, 405, 401, 415, 413, 400 JSON, 400 invocation ID, 400
  timeout), as a JSON error whose message names the header or limit; a valid one is
  dispatched once, unchanged, and the upstream's gRPC status is mapped as documented;
* a request of random bytes gets a documented status; whatever the app answers is a JSON
  error; only requests HTTP/1.1 itself refuses (NUL, CR, LF, VT, FF in a header, bytes
  outside the request-target grammar: a bare 400; a head over hypercorn's 16 KiB
  incomplete-read limit: a bare 431, which docs/gateway.md does not list) are answered by
  the HTTP server before the app runs;
* a valid invocation ID is echoed in every response, a missing or invalid one replaced by a
  generated one; chunked bodies are bounded like declared ones;
* nothing rejected is ever dispatched, and the gateway keeps serving after every example
  with nothing left in flight.
"""

from __future__ import annotations

import functools
import json
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
import trustme
from gwfakes import FakeFunctionRuntime, echo, fail_with, serve_fake
from hypothesis import event, example, given
from hypothesis import strategies as st

from gateway.metrics import GatewayMetrics
from gateway.server import GatewayConfig, serve_gateway
from gateway.targets import StaticResolver, Target, service_dns_name

from .fuzzing import fuzz_settings, on_trio, run_property
from .raw_http import RawResponse, build_request, exchange

NAMESPACE = "demo"
RUNTIME = "python"
MIB = 1024 * 1024
DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 60
#: docs/gateway.md, "Status codes": everything the gateway may answer.
DOCUMENTED = {200, 400, 401, 403, 404, 405, 413, 415, 429, 500, 502, 503, 504}
#: docs/gateway.md, "Status codes": gRPC status code -> (HTTP status, reason).
GRPC_TO_HTTP = {
    3: (400, "InvalidArgument"),
    16: (401, "Unauthorized"),
    7: (403, "Forbidden"),
    5: (404, "FunctionNotFound"),
    8: (429, "TooManyRequests"),
    9: (503, "FunctionUnavailable"),
    14: (503, "FunctionUnavailable"),
    1: (502, "InvocationInterrupted"),
    4: (504, "InvocationTimeout"),
    2: (500, "HandlerError"),
    13: (500, "InternalError"),
    10: (502, "InvocationInterrupted"),
    12: (500, "InternalError"),
    6: (500, "InternalError"),
    11: (500, "InternalError"),
    15: (500, "InternalError"),
}

# --- the spec's rules, written independently of src/gateway/validation.py ------------------

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_UID = r"[A-Za-z0-9][A-Za-z0-9-]{0,127}"
_INVOKE_PATH = re.compile(
    rf"/v1/namespaces/(?P<ns>{_LABEL})/runtimes/(?P<rt>{_LABEL})/functions/(?P<uid>{_UID}):invoke"
)


def routed_uid(target: bytes) -> str | None:
    """The Run UID a request target addresses (None: not an invoke path, so 404)."""
    path = target.split(b"?", 1)[0].decode("latin-1")
    match = _INVOKE_PATH.fullmatch(path)
    if match is None or (match["ns"], match["rt"]) != (NAMESPACE, RUNTIME):
        return None
    return match["uid"]


def strict_json(body: bytes) -> bool:
    """RFC 8259: one JSON text in UTF-8, no BOM, no NaN/Infinity."""

    def reject(name: str) -> None:
        raise ValueError(name)

    try:
        text = body.decode("utf-8")
        if text.startswith("\ufeff"):
            return False
        json.loads(text, parse_constant=reject)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return True


# --- request parts: each either valid or broken in a known way ------------------------------


@dataclass(frozen=True)
class Broken:
    """The answer a broken part must get: status, reason, and words the message names (one)."""

    status: int
    reason: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Part:
    """Header lines (or a body) and what breaks, if anything."""

    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    broken: Broken | None = None


#: bytes h11 (hypercorn's HTTP/1.1 parser) refuses in a header value: the HTTP server answers
#: a bare 400 and the app never sees the request (see :func:`check_raw`).
FRAMING_BYTES = b"\x00\n\x0b\x0c\r"

VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
visible_text = functools.partial(st.text, VISIBLE)

uids = st.from_regex(rf"\A{_UID}\Z").filter(lambda u: len(u) <= 128)
valid_targets = uids.map(
    lambda uid: f"/v1/namespaces/{NAMESPACE}/runtimes/{RUNTIME}/functions/{uid}:invoke".encode()
)
_path_chars = st.sampled_from(list(b"/:-_.%~abcAZ09v1?#@!$&'()*+,;=")) | st.integers(0x21, 0x7E)
invalid_targets = st.one_of(
    st.lists(_path_chars, max_size=300).map(lambda cs: b"/" + bytes(cs)),
    st.sampled_from(
        [
            b"/",
            b"/v1/namespaces/demo/runtimes/python/functions/:invoke",
            b"/v1/namespaces/Demo/runtimes/python/functions/abc:invoke",
            b"/v1/namespaces/demo/runtimes/python/functions/abc:invoke/",
            b"/v1/namespaces/demo/runtimes/python/functions/abc",
            b"/v1/namespaces/demo/runtimes/python/functions/a_b:invoke",
            b"/v1/namespaces/demo/runtimes/python/functions/-ab:invoke",
            b"/v1/namespaces/de%6Do/runtimes/python/functions/abc:invoke",
            b"/v1/namespaces/demo/runtimes/python/functions/abc:invoke%00",
            b"/v1/namespaces/demo/runtimes/python/functions/" + b"a" * 129 + b":invoke",
            b"/v1/namespaces/" + b"d" * 64 + b"/runtimes/python/functions/abc:invoke",
            b"/v2/namespaces/demo/runtimes/python/functions/abc:invoke",
            b"//v1/namespaces/demo/runtimes/python/functions/abc:invoke",
            b"*",
        ]
    ),
).filter(lambda target: routed_uid(target) is None)

NOT_FOUND = Broken(404, "NotFound", ("is not",))
METHOD = Broken(405, "MethodNotAllowed", ("POST",))
UNAUTHORIZED = Broken(401, "Unauthorized", ("Authorization", "bearer token"))
UNSUPPORTED = Broken(415, "UnsupportedMediaType", ("Content-Type",))
TOO_LARGE = Broken(413, "RequestTooLarge", ("1 MiB",))
BAD_JSON = Broken(400, "InvalidJSON", ("body",))
BAD_ID = Broken(400, "InvalidInvocationID", ("X-Kruntime-Invocation-ID",))
BAD_TIMEOUT = Broken(400, "InvalidTimeout", ("X-Kruntime-Timeout",))

tokens = visible_text(min_size=1, max_size=200)


@st.composite
def authorization(draw: st.DrawFn, broken: bool) -> tuple[Part, str | None]:
    """An Authorization part and the token a valid one carries."""
    token = draw(tokens)
    scheme = draw(st.sampled_from([b"Bearer", b"bearer", b"BEARER"]))
    good = scheme + b" " + token.encode()
    if not broken:
        return Part([(b"authorization", good)]), token
    kind = draw(st.sampled_from(["missing", "twice", "scheme", "empty", "bytes"]))
    if kind == "missing":
        return Part([], UNAUTHORIZED), None
    if kind == "twice":
        return Part([(b"authorization", good)] * 2, UNAUTHORIZED), None
    if kind == "scheme":
        other = draw(st.sampled_from([b"Basic", b"Token", b"Bearer:", b"Bearerx", b"Digest"]))
        return Part([(b"authorization", other + b" " + token.encode())], UNAUTHORIZED), None
    if kind == "empty":
        return Part([(b"authorization", draw(st.sampled_from([b"Bearer", b"Bearer    "])))],
                    UNAUTHORIZED), None  # fmt: skip
    raw = draw(st.binary(min_size=1, max_size=40).filter(lambda b: any(c >= 0x80 for c in b)))
    clean = bytes(c for c in raw if c not in FRAMING_BYTES)
    if not any(c >= 0x80 for c in clean):
        clean += b"\xff"
    return Part([(b"authorization", b"Bearer " + clean)], UNAUTHORIZED), None


@st.composite
def content_type(draw: st.DrawFn, broken: bool) -> Part:
    valid = [
        b"application/json",
        b"Application/JSON",
        b"application/json; charset=utf-8",
        b'application/json;charset="UTF-8"',
    ]
    if not broken:
        return Part([(b"content-type", draw(st.sampled_from(valid)))])
    kind = draw(st.sampled_from(["missing", "twice", "other"]))
    if kind == "missing":
        return Part([], UNSUPPORTED)
    if kind == "twice":
        return Part([(b"content-type", b"application/json")] * 2, UNSUPPORTED)
    other: bytes = draw(
        st.sampled_from(
            [
                b"text/plain",
                b"application/xml",
                b"application/json; charset=latin-1",
                b"application/json; boundary=x",
                b"application/jsonx",
                b"multipart/form-data",
            ]
        )
        | visible_text(min_size=1, max_size=60).map(str.encode).filter(lambda v: not json_type(v))
    )
    return Part([(b"content-type", other)], UNSUPPORTED)


def json_type(value: bytes) -> bool:
    """docs/gateway.md: ``application/json``, any case, parameters only ``charset=utf-8``."""
    media_type, *params = value.decode("latin-1").split(";")
    if media_type.strip().lower() != "application/json":
        return False
    for param in params:
        name, _, setting = param.partition("=")
        if name.strip().lower() != "charset" or setting.strip().strip('"').lower() != "utf-8":
            return False
    return True


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def bodies(draw: st.DrawFn, broken: bool) -> tuple[bytes, Broken | None]:
    if broken:
        kind = draw(st.sampled_from(["large", "utf8", "nul", "random", "constant"]))
    else:
        kind = draw(st.sampled_from(["json"] * 8 + ["limit", "random"]))
    if kind == "json":
        text = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
        pad = draw(st.sampled_from(["", " ", "\n\t "]))
        return (pad + text + pad).encode("utf-8", "surrogatepass"), None
    if kind == "limit":  # exactly 1 MiB of valid JSON is accepted
        return b'"' + b"a" * (MIB - 2) + b'"', None
    if kind == "large":
        return b"[" + b"1," * (MIB // 2) + b"1]", TOO_LARGE
    if kind == "utf8":
        text = json.dumps(draw(st.text(max_size=20)), ensure_ascii=True).encode()
        cut = draw(st.integers(1, len(text) - 1))
        bad = draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82"]))
        return text[:cut] + bad + text[cut:], BAD_JSON
    if kind == "nul":
        text = json.dumps(draw(json_values)).encode()
        cut = draw(st.integers(0, len(text)))
        return text[:cut] + b"\x00" + text[cut:], BAD_JSON
    if kind == "constant":
        return draw(st.sampled_from([b"NaN", b"[Infinity]", b'{"a": -Infinity}', b""])), BAD_JSON
    body = draw(st.binary(max_size=300) | st.sampled_from([b"1", b" {} ", b"[]", b'"\\u0000"']))
    return body, None if strict_json(body) else BAD_JSON


@st.composite
def invocation_id(draw: st.DrawFn, broken: bool) -> tuple[Part, str | None]:
    """The ID header part, and the ID the gateway must use (None: a generated one)."""
    if broken:
        kind = draw(st.sampled_from(["long", "bytes", "space", "twice"]))
    else:
        kind = draw(st.sampled_from(["absent", "valid", "valid"]))
    if kind == "absent":
        return Part(draw(st.sampled_from([[], [(b"x-kruntime-invocation-id", b"")]]))), None
    if kind == "valid":
        value = draw(visible_text(min_size=1, max_size=128))
        return Part([(b"X-Kruntime-Invocation-ID", value.encode())]), value
    if kind == "long":  # up to 8 KB (a head over 16 KiB may get HTTP's 431: see check_raw)
        value = draw(
            visible_text(min_size=129, max_size=400)
            | st.integers(129, 8_000).map(lambda n: "i" * n)
        )
        return Part([(b"x-kruntime-invocation-id", value.encode())], BAD_ID), None
    if kind == "bytes":  # non-ASCII or control characters (but not FRAMING_BYTES)
        raw = draw(st.binary(min_size=1, max_size=100))
        raw = bytes(c for c in raw if c not in FRAMING_BYTES + b"\t ") or b"\x01"
        if all(0x21 <= c <= 0x7E for c in raw):
            raw += draw(st.sampled_from([b"\x80", b"\xff", b"\x7f", b"\x01", b"\x1b"]))
        return Part([(b"x-kruntime-invocation-id", b"a" + raw)], BAD_ID), None
    if kind == "space":
        return Part([(b"x-kruntime-invocation-id", b"a b\tc")], BAD_ID), None
    return Part([(b"x-kruntime-invocation-id", b"a"), (b"x-kruntime-invocation-id", b"b")],
                BAD_ID), None  # fmt: skip


@st.composite
def timeout(draw: st.DrawFn, broken: bool) -> tuple[Part, int]:
    """The timeout header part and the timeout_millis a valid request must carry."""
    kind = "invalid" if broken else draw(st.sampled_from(["absent", "valid", "valid"]))
    if kind == "absent":
        return Part(), DEFAULT_TIMEOUT_S * 1000
    if kind == "valid":
        millis = draw(st.integers(1, MAX_TIMEOUT_S * 1000) | st.integers(1, 10**12 - 1))
        return Part([(b"x-kruntime-timeout", str(millis).encode())]), min(
            millis, MAX_TIMEOUT_S * 1000
        )
    bad = draw(
        st.sampled_from([b"0", b"-5", b"1.5", b"abc", b"1e3", b"9" * 13, b"", b"+7", b"0x10"])
        | visible_text(min_size=1, max_size=20).filter(lambda v: not v.isdigit()).map(str.encode)
    )
    return Part([(b"x-kruntime-timeout", bad)], BAD_TIMEOUT), 0


@dataclass(frozen=True)
class Case:
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    expect: Broken | None
    token: str | None
    invocation_id: str | None
    timeout_millis: int
    upstream: int  # gRPC status the fake answers with (0: echo)
    chunk_bytes: int = 0  # > 0: Transfer-Encoding: chunked, no Content-Length


PARTS = ("path", "method", "auth", "ctype", "body", "id", "timeout")


@st.composite
def cases(draw: st.DrawFn, breaking: str | None) -> Case:
    """A request with ``breaking`` broken (None: all valid; "several": 2-4 parts)."""
    if breaking == "several":
        broken = draw(st.frozensets(st.sampled_from(PARTS), min_size=2, max_size=4))
    else:
        broken = frozenset([breaking] if breaking else [])
    good_target = "path" not in broken
    target = draw(valid_targets if good_target else invalid_targets)
    method = b"POST"
    if "method" in broken:
        method = draw(st.sampled_from([b"GET", b"PUT", b"DELETE", b"PATCH", b"OPTIONS"]))
    auth, token = draw(authorization("auth" in broken))
    ctype = draw(content_type("ctype" in broken))
    body, body_broken = draw(bodies("body" in broken))
    id_part, given_id = draw(invocation_id("id" in broken))
    timeout_part, millis = draw(timeout("timeout" in broken))
    order = [
        None if good_target else NOT_FOUND,
        None if method == b"POST" else METHOD,
        auth.broken,
        ctype.broken,
        body_broken,
        id_part.broken,
        timeout_part.broken,
    ]
    expect = next((broken for broken in order if broken is not None), None)
    headers = [*auth.headers, *ctype.headers, *id_part.headers, *timeout_part.headers]
    headers = draw(st.permutations(headers))
    upstream = draw(st.sampled_from([0] * 6 + sorted(GRPC_TO_HTTP)))
    chunk_bytes = draw(st.sampled_from([0, 0, 1, 7, 65536]))
    if 0 < chunk_bytes < 4096 and len(body) > 1000:
        chunk_bytes = 4096  # a megabyte in 1-byte chunks is a slow test, not a better one
    return Case(method, target, headers, body, expect, token, given_id, millis, upstream,
                chunk_bytes)  # fmt: skip


# --- the running gateway --------------------------------------------------------------------


@dataclass
class Gateway:
    host: str
    port: int
    context: ssl.SSLContext
    fake: FakeFunctionRuntime
    metrics: GatewayMetrics

    async def send(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        chunk_bytes: int = 0,
    ) -> RawResponse:
        request = build_request(method, target, headers, body, chunk_bytes=chunk_bytes)
        return await exchange(self.host, self.port, self.context, request)

    async def still_serves(self) -> None:
        """A valid invoke right after the example is answered 200 by the upstream."""
        behaviour, self.fake.behaviour = self.fake.behaviour, echo
        before = len(self.fake.received)
        try:
            response = await self.send(
                b"POST",
                f"/v1/namespaces/{NAMESPACE}/runtimes/{RUNTIME}/functions/abc:invoke".encode(),
                [(b"authorization", b"Bearer t"), (b"content-type", b"application/json")],
                b'{"still":"serving"}',
            )
        finally:
            self.fake.behaviour = behaviour
        assert response.status == 200, response
        assert response.body == b'{"still":"serving"}'
        assert len(self.fake.received) == before + 1


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    fake = FakeFunctionRuntime()
    metrics = GatewayMetrics()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_fake, fake)
        config = GatewayConfig(
            tls_cert_file=str(cert_file),
            tls_key_file=str(key_file),
            bind="127.0.0.1:0",
            metrics_bind=None,
            resolver=StaticResolver(
                {service_dns_name(NAMESPACE, RUNTIME): Target("127.0.0.1", port)}
            ),
            default_timeout_seconds=DEFAULT_TIMEOUT_S,
            max_timeout_seconds=MAX_TIMEOUT_S,
        )
        addresses = await nursery.start(
            functools.partial(serve_gateway, config, metrics=metrics, shutdown=trio.Event())
        )
        host, _, gateway_port = addresses.https.removeprefix("https://").rpartition(":")
        yield Gateway(host, int(gateway_port), context, fake, metrics)
        nursery.cancel_scope.cancel()


def error_of(response: RawResponse) -> dict[str, object]:
    """The JSON error object of an app-level rejection (asserting its documented shape)."""
    assert response.headers.get("content-type") == "application/json", response
    assert response.headers.get("cache-control") == "no-store", response
    body = json.loads(response.body)
    assert set(body) == {"error"}, body
    error: dict[str, object] = body["error"]
    assert {"code", "reason", "message", "invocationId"} <= set(error), error
    assert error["code"] == response.status, error
    assert error["invocationId"] == response.headers["x-kruntime-invocation-id"], error
    assert isinstance(error["message"], str), error
    assert error["message"], error
    return error


# --- properties -----------------------------------------------------------------------------


async def check_case(gw: Gateway, case: Case) -> None:
    gw.fake.behaviour = echo if case.upstream == 0 else fail_with(_code(case.upstream), "boom")
    before = len(gw.fake.received)
    response = await gw.send(
        case.method, case.target, case.headers, case.body, chunk_bytes=case.chunk_bytes
    )
    assert response.status in DOCUMENTED, response
    used_id = response.headers["x-kruntime-invocation-id"]
    if case.invocation_id is not None:  # a valid ID is echoed, even by a rejection
        assert used_id == case.invocation_id
    else:
        assert re.fullmatch(r"[0-9a-f]{32}", used_id), used_id  # generated
    if case.expect is not None:
        error = error_of(response)
        assert (response.status, error["reason"]) == (case.expect.status, case.expect.reason), error
        assert any(word in str(error["message"]) for word in case.expect.names), error
        assert len(gw.fake.received) == before, "a rejected request was dispatched"
        if case.expect is UNAUTHORIZED:
            assert response.headers.get("www-authenticate") == "Bearer"
        if case.expect is TOO_LARGE:
            assert error["limitBytes"] == MIB
        return
    assert len(gw.fake.received) == before + 1, "a valid request was not dispatched once"
    sent = gw.fake.received[-1]
    assert sent.request.input == case.body
    assert sent.request.invocation_id == used_id
    assert sent.request.content_type == "application/json"
    assert sent.request.timeout_millis == case.timeout_millis
    assert sent.request.registration.registration_id == ""
    assert case.target.decode().endswith(f"/functions/{sent.request.registration.run_uid}:invoke")
    assert sent.metadata["authorization"] == f"Bearer {case.token}"
    if case.upstream == 0:
        assert response.status == 200
        assert response.body == case.body
        return
    error = error_of(response)
    assert (response.status, error["reason"]) == GRPC_TO_HTTP[case.upstream], error
    assert error["grpcCode"] == _code(case.upstream).name
    if response.status == 503:
        assert int(response.headers["retry-after"]) >= 1
    else:  # a 502 InvocationInterrupted may have run: no "retry later"
        assert "retry-after" not in response.headers


def _code(value: int) -> object:
    import purerpc

    return purerpc.StatusCode(value)


@pytest.mark.parametrize("breaking", [None, *PARTS, "several"])
async def test_structured_requests_get_the_first_broken_rules_answer(
    gateway: Gateway, breaking: str | None
) -> None:
    @fuzz_settings(max_examples=25 if breaking != "several" else 60)
    @given(case=cases(breaking))
    @example(  # the invocation-ID limit, exactly: 128 bytes pass, dispatched unchanged
        case=Case(b"POST", b"/v1/namespaces/demo/runtimes/python/functions/u:invoke",
                  [(b"authorization", b"Bearer t"), (b"content-type", b"application/json"),
                   (b"x-kruntime-invocation-id", b"i" * 128)],
                  b"{}", None, "t", "i" * 128, DEFAULT_TIMEOUT_S * 1000, 0)
    )  # fmt: skip
    @example(  # a body of exactly 1 MiB is dispatched whole
        case=Case(b"POST", b"/v1/namespaces/demo/runtimes/python/functions/u:invoke",
                  [(b"authorization", b"Bearer t"), (b"content-type", b"application/json")],
                  b'"' + b"a" * (MIB - 2) + b'"', None, "t", None, DEFAULT_TIMEOUT_S * 1000, 0)
    )  # fmt: skip
    @example(  # found by this property: 2007 ms went out as timeout_millis 2008 (float ms)
        case=Case(b"POST", b"/v1/namespaces/demo/runtimes/python/functions/u:invoke",
                  [(b"authorization", b"Bearer t"), (b"content-type", b"application/json"),
                   (b"x-kruntime-timeout", b"2007")],
                  b"{}", None, "t", None, 2007, 0)
    )  # fmt: skip
    @example(  # one byte over: rejected naming the header, nothing dispatched
        case=Case(b"POST", b"/v1/namespaces/demo/runtimes/python/functions/u:invoke",
                  [(b"authorization", b"Bearer t"), (b"content-type", b"application/json"),
                   (b"x-kruntime-invocation-id", b"i" * 129)],
                  b"{}", BAD_ID, "t", None, 0, 0)
    )  # fmt: skip
    def prop(case: Case) -> None:
        event(case.expect.reason if case.expect else f"dispatched, upstream {case.upstream}")
        on_trio(check_case, gateway, case)

    await run_property(prop)
    await gateway.still_serves()


_header_names = st.sampled_from(
    [b"authorization", b"content-type", b"x-kruntime-invocation-id", b"x-kruntime-timeout",
     b"X-Kruntime-Timeout", b"accept", b"x-\xffodd", b"transfer-encoding", b"expect"]
)  # fmt: skip


@st.composite
def raw_requests(draw: st.DrawFn) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]:
    method = draw(st.sampled_from([b"POST", b"POST", b"GET", b"OPTIONS", b"X"]))
    target = draw(valid_targets | invalid_targets | st.binary(min_size=1, max_size=100))
    target = target.replace(b" ", b"").replace(b"\r", b"").replace(b"\n", b"") or b"/"
    names = st.one_of(_header_names, st.binary(min_size=1, max_size=20))
    values = st.one_of(
        st.binary(max_size=300),
        st.sampled_from([b"Bearer t", b"application/json", b"100", b"chunked", b"100-continue"]),
    )
    headers = draw(st.lists(st.tuples(names, values), max_size=8))
    headers = [
        (n.replace(b"\r", b"").replace(b"\n", b"").replace(b":", b"") or b"x",
         v.replace(b"\r", b"").replace(b"\n", b""))
        for n, v in headers
        if n.lower() not in (b"content-length", b"host", b"connection", b"transfer-encoding")
    ]  # fmt: skip
    if draw(st.booleans()):
        headers = [
            (b"authorization", b"Bearer t"),
            (b"content-type", b"application/json"),
            *headers,
        ]
    if draw(st.integers(0, 19)) == 0:  # a head over hypercorn's limits (16 KiB, 64 KiB)
        headers.append((b"x-kruntime-invocation-id", b"i" * draw(st.integers(70_000, 100_000))))
    body = draw(st.binary(max_size=500) | st.sampled_from([b"{}", b"[1]", b"\x00", b'"\x00"']))
    return method, target, headers, body


_TOKEN_CHARS = rb"!#$%&'*+\-.^_`|~0-9A-Za-z"
_FRAMING_OK = re.compile(rb"[\x21-\x7e]+")


#: hypercorn's ``h11_max_incomplete_size`` (bytes): a request head larger than this is
#: answered 431 when it arrives in more than one read (so: sometimes), before the app runs.
MAX_HEAD_BYTES = 16 * 1024


def http_framing_valid(target: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    """What RFC 9112 lets through to the app: a visible-ASCII target, token header names,
    header values without :data:`FRAMING_BYTES`, a head within :data:`MAX_HEAD_BYTES`."""
    if not _FRAMING_OK.fullmatch(target):
        return False
    if len(target) + sum(len(n) + len(v) + 4 for n, v in headers) > MAX_HEAD_BYTES - 200:
        return False
    for name, value in headers:
        if not re.fullmatch(rb"[" + _TOKEN_CHARS + rb"]+", name):
            return False
        if any(byte in FRAMING_BYTES for byte in value):
            return False
    return True


async def check_raw(
    gw: Gateway, request: tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]
) -> int:
    method, target, headers, body = request
    gw.fake.behaviour = echo
    before = len(gw.fake.received)
    response = await gw.send(method, target, headers, body)
    if response.headers.get("content-type") == "application/json" and response.status != 200:
        assert response.status in DOCUMENTED, response
        error_of(response)
    elif response.status != 200:
        # the HTTP server itself refused the request before the app saw it: a bare 400 for
        # bytes RFC 9112 forbids, 431 for a head over hypercorn's limit (431 is not in
        # docs/gateway.md's list: reported as a documentation gap)
        assert not http_framing_valid(target, headers), response
        assert response.status in (400, 431), response
        assert response.body == b"", response
        assert "x-kruntime-invocation-id" not in response.headers
    if response.status != 200:
        assert len(gw.fake.received) == before, "a rejected request was dispatched"
    else:
        assert len(gw.fake.received) == before + 1
        assert gw.fake.received[-1].request.input == body
    if http_framing_valid(target, headers) and routed_uid(target) is None:
        assert response.status == 404, response
    return response.status


async def test_random_bytes_get_documented_answers_and_nothing_is_dispatched(
    gateway: Gateway,
) -> None:
    @fuzz_settings(max_examples=120)
    @given(request=raw_requests())
    def prop(request: tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]) -> None:
        event(f"status {on_trio(check_raw, gateway, request)}")

    await run_property(prop)
    await gateway.still_serves()
    assert gateway.metrics.registry.get_sample_value("krt_gateway_invocations_in_flight") == 0
