"""The built-in Runtime Servers (Python and Bash) under random and malformed gRPC requests.

One server per adapter (the production ``servers.common.app.serve`` on 127.0.0.1, port 0)
serves every example of a property; the client is :class:`krt.grpc.client.GrpcConnection`
(request bytes exactly as given) or :mod:`.raw_grpc` (HTTP/2 DATA exactly as given).

Properties (seed 002, "Registration and Status Semantics", "Invocation Semantics", "Limits
and Error Mapping"; docs of :mod:`servers.common.validation`):

* a RegisterFunction with any broken field is INVALID_ARGUMENT naming that field, and leaves
  no registration (FunctionStatus: NOT_FOUND); a valid one is READY and unregisters cleanly;
* an InvokeFunction gets the status of its first broken rule (empty reference, ID over 128
  bytes, negative timeout, input over 1 MiB: INVALID_ARGUMENT; unknown Run UID: NOT_FOUND;
  stale registration ID: FAILED_PRECONDITION; input the adapter cannot take, e.g. invalid
  JSON or invalid UTF-8: INVALID_ARGUMENT); a valid one echoes its input; the registration
  stays READY with nothing in flight;
* an Execute with a broken field is INVALID_ARGUMENT naming it and leaves no execution;
* random IDs on Status/Cancel/Forget/FunctionStatus/UnregisterFunction are NOT_FOUND,
  INVALID_ARGUMENT, FAILED_PRECONDITION (a stale ID of a live Run UID) or, for an absent
  registration, an OK unregister; none of them touches a live registration;
* random bytes as any request message, and malformed gRPC framing, get a gRPC status (or a
  reset of that one stream), never a dropped connection; never INTERNAL/UNKNOWN, except a
  message the server cannot read (:func:`unreadable_status`: RESOURCE_EXHAUSTED over the
  size limit, INTERNAL or UNIMPLEMENTED for one it cannot decompress), which fails only its
  own call while the other calls of its connection go on;
* after every example the server still answers Health, on the same and on a new connection.
"""

from __future__ import annotations

import functools
import json
import textwrap
import urllib.parse
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
import trio
from hypothesis import event, example, given
from hypothesis import strategies as st

from krt.grpc.client import GrpcConnection, GrpcStatusError
from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.bash.adapter import BashAdapter
from servers.common.adapter import FunctionAdapter
from servers.common.app import serve
from servers.python.adapter import PythonAdapter

from .fuzzing import fuzz_settings, on_trio, run_property
from .raw_grpc import frame, raw_call

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
ALREADY_EXISTS, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INTERNAL, UNIMPLEMENTED = 6, 8, 9, 13, 12
#: statuses a Runtime Server may answer a request it cannot serve with (never INTERNAL or
#: UNKNOWN: those mean a server bug or a handler error, and the echo handlers never fail).
CLIENT_ERRORS = {INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION}
MIB = 1024 * 1024
DIGEST = "sha256:" + "d" * 64
FN = "executor.v1.FunctionRuntime"
RT = "executor.v1.Runtime"

PYTHON_HANDLER = """
    def handle(event):
        if isinstance(event, str) and len(event) > 4096:
            return {"length": len(event)}
        return {"echo": event}
"""
BASH_HANDLER = """
    handle() { printf '%s' "$1"; }
"""


@dataclass
class Server:
    """A running Runtime Server and a client connection to it."""

    language: str
    host: str
    port: int
    work_dir: Path
    fn_dir: Path
    conn: GrpcConnection

    async def call(self, service: str, method: str, payload: bytes) -> tuple[int, str, bytes]:
        """One unary call: ``(grpc status, message, response bytes)``."""
        try:
            reply = await self.conn.unary_call(service, method, payload, timeout_seconds=15)
        except GrpcStatusError as exc:
            return exc.code, exc.message, b""
        return OK, "", reply

    async def healthy(self) -> None:
        code, message, reply = await self.call(RT, "Health", b"")
        assert code == OK, message
        assert pb.HealthResponse.FromString(reply).healthy
        # a new connection is served too (the listener is alive, not just this connection)
        raw = await raw_call(self.host, self.port, f"/{RT}/Health", frame(b""))
        assert raw.status == OK, raw

    async def status(self, run_uid: str, registration_id: str) -> tuple[int, str, bytes]:
        ref = pb.FunctionRegistration(run_uid=run_uid, registration_id=registration_id)
        request = pb.FunctionStatusRequest(registration=ref)
        return await self.call(FN, "FunctionStatus", request.SerializeToString())

    async def unregister(self, run_uid: str, registration_id: str) -> int:
        ref = pb.FunctionRegistration(run_uid=run_uid, registration_id=registration_id)
        request = pb.UnregisterFunctionRequest(registration=ref, cancel_in_flight=True)
        code, _, _ = await self.call(FN, "UnregisterFunction", request.SerializeToString())
        return code


def _adapter(language: str) -> FunctionAdapter:
    return PythonAdapter() if language == "python" else BashAdapter()


@pytest.fixture(params=["python", "bash"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    language: str = request.param
    work_dir = (tmp_path / "work").resolve()
    fn_dir = work_dir / "fn"
    fn_dir.mkdir(parents=True)
    if language == "python":
        (fn_dir / "handler.py").write_text(textwrap.dedent(PYTHON_HANDLER))
    else:
        (fn_dir / "handler.sh").write_text(textwrap.dedent(BASH_HANDLER))
    (work_dir / "a-file").write_text("not a directory")
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(
            functools.partial(
                serve, _adapter(language), host="127.0.0.1", port=0, work_dir=work_dir
            )
        )
        stream = await trio.open_tcp_stream(host, port)
        conn = GrpcConnection(stream, authority=f"{host}:{port}")
        await nursery.start(conn.run)
        yield Server(language, host, port, work_dir, fn_dir, conn)
        conn.close()
        nursery.cancel_scope.cancel()


# --- wire helpers ---------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def raw_field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2) carrying ``value`` unchecked."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


#: byte strings that are not UTF-8 (a protobuf ``string`` must be).
not_utf8 = st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"a\xe2\x82", b"\x80abc"])

# --- RegisterFunction -----------------------------------------------------------------------

ID_REGEX = r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,40}\Z"
REGISTER_FIELDS = ("run_uid", "registration_attempt", "working_dir", "handler", "env",
                   "idle_timeout_seconds", "registration_digest")  # fmt: skip


@dataclass(frozen=True)
class Register:
    request: pb.RegisterFunctionRequest
    broken: frozenset[str]
    wire_suffix: bytes = b""  # raw fields appended to the serialized request (invalid UTF-8)

    def payload(self) -> bytes:
        return self.request.SerializeToString() + self.wire_suffix


def _bad_value(field: str, language: str, fn_dir: Path) -> st.SearchStrategy[Any]:
    if field == "run_uid":
        return st.sampled_from(
            ["", "a" * 129, "../x", "a/b", ".hidden", "-x", "a b", "a\x00b", "ü", "a:b"]
        ) | st.text(min_size=1, max_size=20).filter(lambda s: not _valid_id(s))
    if field == "registration_attempt":
        return st.integers(-(2**31), 0)
    if field == "working_dir":
        return st.sampled_from(
            ["../", "/etc", "/", "fn/../..", "fn\x00", "missing", "a-file", "x" * 5000,
             str(fn_dir.parent.parent)]
        )  # fmt: skip
    if field == "handler":
        common = ["", "h" * 1025, "handler", "handler.", ".handle", "handler\x00.handle"]
        if language == "python":
            return st.sampled_from([*common, "handler.handle()", "1handler.handle", "a..b",
                                    "handler.han-dle", "os.system; rm"])  # fmt: skip
        return st.sampled_from([*common, "../handler.handle", "/abs.handle", "a//b.handle",
                                "handler.1fn", "handler.fn-x", "handler.handle\n"])  # fmt: skip
    if field == "env":
        bad_name = st.sampled_from(["", "1A", "A-B", "A=B", "A B", "Ä", "A\x00"])
        return st.one_of(
            st.dictionaries(bad_name, st.text(max_size=5), min_size=1, max_size=2),
            st.just({"GOOD": "a\x00b"}),
            st.just({f"V{i}": "" for i in range(513)}),
            st.just({"BIG": "x" * (256 * 1024)}),
        )
    if field == "idle_timeout_seconds":
        return st.integers(-(2**63), -1)
    return st.sampled_from(
        ["", "sha256:" + "D" * 64, "sha256:" + "d" * 63, "md5:" + "d" * 64, "d" * 65,
         "sha256:" + "g" * 64, "sha256: " + "d" * 64]
    )  # fmt: skip


def _valid_id(value: str) -> bool:
    import re

    return len(value.encode()) <= 128 and bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value))


@st.composite
def registers(draw: st.DrawFn, language: str, fn_dir: Path, breaking: str | None) -> Register:
    """A RegisterFunction request with ``breaking`` broken (None: valid; "several": 2-3)."""
    if breaking == "several":
        broken = draw(st.frozensets(st.sampled_from(REGISTER_FIELDS), min_size=2, max_size=3))
    else:
        broken = frozenset([breaking] if breaking else [])
    valid: dict[str, Any] = {
        "run_uid": draw(st.from_regex(ID_REGEX)),
        "registration_attempt": draw(st.integers(1, 2**31 - 1)),
        "working_dir": draw(st.sampled_from([str(fn_dir), "fn", "fn/", "./fn", "fn/../fn"])),
        "handler": "handler.handle",
        "env": draw(
            st.dictionaries(
                st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,10}\Z"),
                st.text(
                    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=30
                ),
                max_size=5,
            )
        ),  # fmt: skip
        "idle_timeout_seconds": draw(st.integers(0, 2**63 - 1)),
        "registration_digest": draw(
            st.sampled_from([DIGEST, "d" * 64, "sha256:" + "0123456789abcdef" * 4])
        ),
    }
    suffix = b""
    for name in broken:
        if name in ("run_uid", "handler", "working_dir") and draw(st.integers(0, 5)) == 0:
            number = {"run_uid": 1, "working_dir": 3, "handler": 4}[name]
            suffix += raw_field(number, draw(not_utf8))
            continue
        valid[name] = draw(_bad_value(name, language, fn_dir))
    env = valid.pop("env")
    request = pb.RegisterFunctionRequest(**valid)
    request.env.update(env)
    return Register(request, broken, suffix)


async def check_register(srv: Server, case: Register) -> str:
    uid = case.request.run_uid
    code, message, reply = await srv.call(FN, "RegisterFunction", case.payload())
    if case.broken:
        assert code == INVALID_ARGUMENT, (code, message)
        if case.wire_suffix:
            assert "RegisterFunctionRequest" in message, message
        else:
            # the message names one of the broken fields (env: the variable or "env")
            words = {f: f for f in case.broken} | {"env": "env"}
            assert any(words[f] in message for f in case.broken), message
        if uid:  # nothing registered under this Run UID
            status, status_message, _ = await srv.status(uid, "reg_any")
            assert status == NOT_FOUND, (status, status_message)
        outcome = "rejected"
    else:
        assert code == OK, (code, message)
        response = pb.RegisterFunctionResponse.FromString(reply)
        assert response.state == pb.FUNCTION_REGISTRATION_STATE_READY
        assert response.registration.run_uid == uid
        reg_id = response.registration.registration_id
        assert reg_id
        # registering again with the same identity is idempotent: the same ID
        code, message, again = await srv.call(FN, "RegisterFunction", case.payload())
        assert code == OK, message
        assert pb.RegisterFunctionResponse.FromString(again).registration.registration_id == reg_id
        assert await srv.unregister(uid, reg_id) == OK
        status, status_message, _ = await srv.status(uid, reg_id)
        assert status == NOT_FOUND, (status, status_message)
        outcome = "registered"
    await srv.healthy()
    return outcome


@pytest.mark.parametrize("breaking", [None, *REGISTER_FIELDS, "several"])
async def test_register_requests_are_validated_without_leaving_state(
    server: Server, breaking: str | None
) -> None:
    @fuzz_settings(max_examples=20 if breaking == "several" else 10)
    @given(case=registers(server.language, server.fn_dir, breaking))
    def prop(case: Register) -> None:
        event(on_trio(check_register, server, case))

    await run_property(prop)


# --- InvokeFunction -------------------------------------------------------------------------


@dataclass(frozen=True)
class Invoke:
    ref: str  # "live", "unknown", "stale", "no-uid", "no-id"
    run_uid: str
    invocation_id: str
    input: bytes
    content_type: str
    timeout_millis: int
    wire_suffix: bytes = b""


@st.composite
def invokes(draw: st.DrawFn) -> Invoke:
    ref = draw(st.sampled_from(["live"] * 5 + ["unknown", "stale", "no-uid", "no-id"]))
    invocation_id = draw(
        st.one_of(
            st.just(""),
            st.text(max_size=128).filter(lambda s: len(s.encode()) <= 128),
            st.text(min_size=1, max_size=200).map(lambda s: s + "x" * 129),
        )
    )
    kind = draw(st.sampled_from(["json"] * 4 + ["limit", "large", "utf8", "nul", "random"]))
    if kind == "json":
        body = json.dumps(draw(st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
            max_leaves=8,
        ))).encode()  # fmt: skip
    elif kind == "limit":
        body = b'"' + b"a" * (MIB - 2) + b'"'
    elif kind == "large":
        body = b'"' + b"a" * (MIB - 1) + b'"'
    elif kind == "utf8":
        body = b'"' + draw(not_utf8) + b'"'
    elif kind == "nul":
        body = b'"a\x00b"'
    else:
        body = draw(st.binary(max_size=100))
    content_type = draw(
        st.sampled_from(["", "application/json", "application/json; charset=utf-8", "text/plain",
                         "application/octet-stream"])
    )  # fmt: skip
    timeout_millis = draw(
        st.one_of(st.just(0), st.integers(10_000, 2**63 - 1), st.integers(-(2**63), -1))
    )
    suffix = b""
    if draw(st.integers(0, 9)) == 0:  # invalid UTF-8 where protobuf requires a string
        suffix = raw_field(draw(st.sampled_from([2, 4])), draw(not_utf8))
    return Invoke(ref, "", invocation_id, body, content_type, timeout_millis, suffix)


def strict_json(body: bytes) -> bool:
    def reject(name: str) -> None:
        raise ValueError(name)

    try:
        json.loads(body.decode("utf-8"), parse_constant=reject)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return True


def expected_invoke(case: Invoke, language: str) -> set[int]:
    """The statuses seed 002 allows for ``case``, in the server's documented check order."""
    if case.wire_suffix:
        return {INVALID_ARGUMENT}
    if case.ref in ("no-uid", "no-id"):
        return {INVALID_ARGUMENT}
    if len(case.invocation_id.encode()) > 128 or case.timeout_millis < 0 or len(case.input) > MIB:
        return {INVALID_ARGUMENT}
    if case.ref == "unknown":
        return {NOT_FOUND}
    if case.ref == "stale":
        return {FAILED_PRECONDITION}
    json_type = case.content_type.split(";")[0].strip() in ("", "application/json")
    if language == "python" and not json_type:
        return {INVALID_ARGUMENT}
    if language == "bash" and b"\x00" in case.input:
        return {INVALID_ARGUMENT}
    if json_type and not strict_json(case.input):
        if case.input == b"":
            return {OK, INVALID_ARGUMENT}  # empty input may mean JSON null
        return {INVALID_ARGUMENT}
    return {OK}


@dataclass
class Live:
    run_uid: str
    registration_id: str


async def register_live(srv: Server, run_uid: str, attempt: int) -> Live:
    request = pb.RegisterFunctionRequest(
        run_uid=run_uid,
        registration_attempt=attempt,
        working_dir=str(srv.fn_dir),
        handler="handler.handle",
        registration_digest=DIGEST,
    )
    code, message, reply = await srv.call(FN, "RegisterFunction", request.SerializeToString())
    assert code == OK, message
    return Live(run_uid, pb.RegisterFunctionResponse.FromString(reply).registration.registration_id)


async def check_invoke(srv: Server, live: Live, stale_id: str, case: Invoke) -> str:
    uid, reg_id = {
        "live": (live.run_uid, live.registration_id),
        "unknown": ("no-such-run", live.registration_id),
        "stale": (live.run_uid, stale_id),
        "no-uid": ("", live.registration_id),
        "no-id": (live.run_uid, ""),
    }[case.ref]
    request = pb.InvokeFunctionRequest(
        registration=pb.FunctionRegistration(run_uid=uid, registration_id=reg_id),
        invocation_id=case.invocation_id,
        input=case.input,
        content_type=case.content_type,
        timeout_millis=case.timeout_millis,
    )
    code, message, reply = await srv.call(
        FN, "InvokeFunction", request.SerializeToString() + case.wire_suffix
    )
    allowed = expected_invoke(case, srv.language)
    assert code in allowed, (code, message, allowed)
    if code == OK:
        response = pb.InvokeFunctionResponse.FromString(reply)
        assert response.invocation_id == (case.invocation_id or response.invocation_id)
        assert response.invocation_id
        assert response.registration.run_uid == live.run_uid
        if srv.language == "bash":
            assert response.output == case.input
        elif case.input and len(case.input) <= 4096:
            assert json.loads(response.output) == {"echo": json.loads(case.input)}
    # the registration is untouched: still READY, nothing in flight
    status, status_message, raw = await srv.status(live.run_uid, live.registration_id)
    assert status == OK, status_message
    state = pb.FunctionStatusResponse.FromString(raw)
    assert state.state == pb.FUNCTION_REGISTRATION_STATE_READY
    assert state.in_flight == 0
    await srv.healthy()
    return f"status {code}"


async def test_invoke_requests_get_the_documented_status(server: Server) -> None:
    # attempt 1 is superseded by attempt 2: its ID is the stale one (seed 002 fence)
    stale = await register_live(server, "fuzz-run", 1)
    live = await register_live(server, "fuzz-run", 2)
    assert stale.registration_id != live.registration_id

    @fuzz_settings(max_examples=60)
    @given(case=invokes())
    @example(case=Invoke("live", "", "i" * 128, b"{}", "", 0))
    @example(case=Invoke("live", "", "i" * 129, b"{}", "", 0))
    @example(case=Invoke("live", "", "", b'"' + b"a" * (MIB - 2) + b'"', "application/json", 0))
    @example(case=Invoke("live", "", "", b'"' + b"a" * (MIB - 1) + b'"', "application/json", 0))
    @example(case=Invoke("live", "", "", b'"\\u0000"', "application/json", 0))
    # found by this property: the Python worker took NaN/Infinity (not JSON, RFC 8259) and
    # then failed UNKNOWN; deep nesting crashed it; UTF-16 text was auto-detected and taken
    @example(case=Invoke("live", "", "", b"[NaN]", "application/json", 0))
    @example(case=Invoke("live", "", "", b"-Infinity", "", 0))
    @example(case=Invoke("live", "", "", b"[" * 100_000 + b"]" * 100_000, "", 0))
    @example(case=Invoke("live", "", "", '{"a": 1}'.encode("utf-16"), "application/json", 0))
    def prop(case: Invoke) -> None:
        event(on_trio(check_invoke, server, live, stale.registration_id, case))

    await run_property(prop)
    assert await server.unregister(live.run_uid, live.registration_id) == OK


# --- Execute --------------------------------------------------------------------------------

EXECUTE_FIELDS = ("id", "args", "env", "timeout_seconds", "working_dir", "entrypoint")


@st.composite
def executes(draw: st.DrawFn, language: str) -> tuple[pb.ExecuteRequest, str]:
    """An Execute request with exactly one broken field, and that field's name."""
    args = ["-c", "pass"] if language == "python" else ["true"]
    field = draw(st.sampled_from(EXECUTE_FIELDS))
    request = pb.ExecuteRequest(id=draw(st.from_regex(ID_REGEX)), args=args)
    if field == "id":
        request.id = draw(st.sampled_from(["", "a" * 129, "../x", "a/b", ".x", "a\x00", "é", " a"]))
    elif field == "args":
        request.args[-1] += "\x00"
    elif field == "env":
        request.env.update(draw(st.sampled_from([{"1A": "x"}, {"A": "\x00"}, {"A=B": ""}])))
    elif field == "timeout_seconds":
        request.timeout_seconds = draw(st.integers(-(2**63), -1))
    elif field == "working_dir":
        request.working_dir = draw(st.sampled_from(["../..", "/etc", "x\x00", "missing", "a-file"]))
    else:
        request.entrypoint = draw(st.sampled_from(["/bin/sh", "../x.py", "a/../../x", "a\x00"]))
    return request, field


async def check_execute(srv: Server, request: pb.ExecuteRequest, field: str) -> None:
    code, message, _ = await srv.call(RT, "Execute", request.SerializeToString())
    assert code == INVALID_ARGUMENT, (code, message)
    name = {"args": "args", "timeout_seconds": "timeout_seconds"}.get(field, field)
    assert name in message, message
    code, message, reply = await srv.call(RT, "List", b"")
    assert code == OK, message
    assert list(pb.ListResponse.FromString(reply).entries) == []  # nothing was started
    await srv.healthy()


async def test_execute_requests_with_a_broken_field_start_nothing(server: Server) -> None:
    @fuzz_settings(max_examples=30)
    @given(case=executes(server.language))
    def prop(case: tuple[pb.ExecuteRequest, str]) -> None:
        on_trio(check_execute, server, *case)

    await run_property(prop)


# --- random bytes and malformed frames ------------------------------------------------------

METHODS = [
    (RT, "Execute"), (RT, "Status"), (RT, "List"), (RT, "Cancel"), (RT, "Forget"),
    (RT, "Health"), (FN, "RegisterFunction"), (FN, "FunctionStatus"), (FN, "InvokeFunction"),
    (FN, "UnregisterFunction"),
]  # fmt: skip


async def check_random_message(srv: Server, method: tuple[str, str], payload: bytes) -> str:
    service, name = method
    code, message, _ = await srv.call(service, name, payload)
    assert code in CLIENT_ERRORS | {OK}, (code, message)
    if (service, name) == (RT, "Execute") and code == OK:  # bytes that decode to a real task
        task_id = pb.ExecuteRequest.FromString(payload).id
        await srv.call(RT, "Cancel", pb.CancelRequest(id=task_id).SerializeToString())
        forget = pb.ForgetRequest(id=task_id).SerializeToString()
        with trio.fail_after(10):  # Forget is FAILED_PRECONDITION until the task has ended
            while (await srv.call(RT, "Forget", forget))[0] != OK:  # noqa: ASYNC110
                await trio.sleep(0.05)
    await srv.healthy()
    return f"{name}: {code}"


async def test_random_request_bytes_get_a_client_error_status(server: Server) -> None:
    @fuzz_settings(max_examples=60)
    @given(
        method=st.sampled_from(METHODS),
        payload=st.binary(max_size=200)
        | st.builds(lambda n, v: raw_field(n, v), st.integers(1, 7), not_utf8),
    )
    def prop(method: tuple[str, str], payload: bytes) -> None:
        event(on_trio(check_random_message, server, method, payload))

    await run_property(prop)
    code, message, reply = await server.call(RT, "List", b"")
    assert code == OK, message
    assert list(pb.ListResponse.FromString(reply).entries) == []


#: purerpc's limit on one received message (bytes): ``GRPCConfiguration`` default.
PURERPC_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


def unreadable_status(data: bytes, encoding: str | None) -> int | None:
    """The status of a request whose message purerpc cannot read, else ``None``.

    A message over purerpc's size limit is RESOURCE_EXHAUSTED; a compressed one with no (or
    ``identity``) encoding, or that does not decompress, INTERNAL; one in an encoding the
    server lacks, UNIMPLEMENTED (krt.grpc.unreadable_messages; grpc's statuscodes.md). Only
    that call fails: the connection serves on.
    """
    while len(data) >= 5:
        compressed, length = data[0] != 0, int.from_bytes(data[1:5], "big")
        if length > PURERPC_MAX_MESSAGE_BYTES:
            return RESOURCE_EXHAUSTED
        if len(data) - 5 < length:
            return None
        if compressed:
            if encoding in (None, "identity"):
                return INTERNAL
            if encoding not in ("gzip", "deflate"):
                return UNIMPLEMENTED
            try:
                zlib.decompress(data[5 : 5 + length])
            except zlib.error:
                return INTERNAL
        data = data[5 + length :]
    return None


async def check_frame(
    srv: Server, method: tuple[str, str], data: bytes, encoding: str | None
) -> str:
    service, name = method
    headers = [("grpc-encoding", encoding)] if encoding else []
    reply = await raw_call(srv.host, srv.port, f"/{service}/{name}", data, extra_headers=headers)
    # an answer for this stream: a status or a reset of just this stream, never a dropped
    # connection (that would fail every other call multiplexed on it)
    assert not reply.closed, reply
    assert reply.status is not None or reply.reset is not None, reply
    expected = unreadable_status(data, encoding)
    if expected is not None:
        assert reply.status == expected, reply
    elif reply.status is not None:
        assert reply.status in CLIENT_ERRORS | {OK}, reply
    await srv.healthy()
    return "status" if reply.status is not None else f"reset {reply.reset}"


frames = st.one_of(
    st.binary(max_size=64),  # anything at all
    st.builds(frame, st.binary(max_size=64)),  # one well-framed, random message
    st.builds(lambda p: frame(p, compressed=True), st.binary(max_size=64)),
    st.builds(lambda p, n: frame(p)[:n], st.binary(min_size=1, max_size=64), st.integers(0, 5)),
    st.builds(lambda a, b: frame(a) + frame(b), st.binary(max_size=16), st.binary(max_size=16)),
    st.sampled_from([b"\x00\xff\xff\xff\xff", b"\x00\x02\x00\x00\x01" + b"\x00" * 16]),
)


async def test_malformed_frames_get_a_status_and_the_server_keeps_serving(server: Server) -> None:
    @fuzz_settings(max_examples=60)
    @given(
        method=st.sampled_from([m for m in METHODS if m != (RT, "Execute")]),
        data=frames,
        encoding=st.sampled_from([None, None, None, "gzip", "identity", "br"]),
    )
    @example(method=(RT, "Health"), data=frame(b"", compressed=True), encoding=None)
    @example(method=(RT, "Health"), data=b"\x00\xff\xff\xff\xff", encoding=None)
    @example(
        method=(RT, "Health"), data=frame(zlib.compress(b""), compressed=True), encoding="gzip"
    )
    def prop(method: tuple[str, str], data: bytes, encoding: str | None) -> None:
        event(on_trio(check_frame, server, method, data, encoding))

    await run_property(prop)


@pytest.mark.parametrize(
    "data", [frame(b"", compressed=True), b"\x00\xff\xff\xff\xff"], ids=["compressed", "huge"]
)
async def test_an_unreadable_message_fails_only_its_own_call(server: Server, data: bytes) -> None:
    reply = await raw_call(server.host, server.port, f"/{RT}/Health", data)
    assert not reply.closed, reply
    assert reply.status == unreadable_status(data, None), reply


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (
            frame(b"", compressed=True),
            INTERNAL,
            "grpc: compressed flag set with identity or empty encoding",
        ),
        (
            b"\x00\xff\xff\xff\xff" + b"\x07" * 20_000,
            RESOURCE_EXHAUSTED,
            f"grpc: received message larger than max (4294967295 vs. {PURERPC_MAX_MESSAGE_BYTES})",
        ),
    ],
    ids=["compressed", "huge"],
)
async def test_an_unreadable_message_leaves_the_other_calls_of_its_connection_alone(
    server: Server, data: bytes, status: int, message: str
) -> None:
    """Two streams on one connection: a Health call in flight (its request not yet ended)
    and the unreadable message, whose body is still arriving. Only the second fails (with
    gRPC's status for it, then RST_STREAM NO_ERROR for the rest of its body); the first is
    answered, and Health on the same connection afterwards too."""
    stream = await trio.open_tcp_stream(server.host, server.port)
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", f"{server.host}:{server.port}"),
        ("content-type", "application/grpc+proto"),
        ("te", "trailers"),
    ]
    fields: dict[int, dict[str, str]] = {}
    ended: set[int] = set()
    resets: dict[int, int] = {}

    def open_stream() -> int:
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(stream_id, [(":path", f"/{RT}/Health"), *headers])
        fields[stream_id] = {}
        return stream_id

    async def until(done: Any) -> None:
        await stream.send_all(conn.data_to_send())
        while not done():
            chunk = await stream.receive_some(65536)
            assert chunk, "the server closed the connection"
            for got in conn.receive_data(chunk):
                assert not isinstance(got, h2.events.ConnectionTerminated), got
                stream_id = getattr(got, "stream_id", 0)
                if isinstance(got, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    fields[stream_id].update(got.headers)
                elif isinstance(got, h2.events.DataReceived):
                    conn.acknowledge_received_data(got.flow_controlled_length, stream_id)
                elif isinstance(got, h2.events.StreamEnded):
                    ended.add(stream_id)
                elif isinstance(got, h2.events.StreamReset):
                    resets[stream_id] = int(got.error_code)
            await stream.send_all(conn.data_to_send())

    async with stream:
        with trio.fail_after(10):
            in_flight = open_stream()
            conn.send_data(in_flight, frame(b"")[:2])  # half of its message prefix
            bad = open_stream()
            conn.send_data(bad, data[:16384])
            conn.send_data(bad, data[16384:])
            await until(lambda: bad in ended and bad in resets)
            assert fields[bad]["grpc-status"] == str(status), fields[bad]
            assert urllib.parse.unquote(fields[bad]["grpc-message"]) == message
            assert resets[bad] == 0  # NO_ERROR: "stop sending", after a complete answer
            conn.send_data(in_flight, frame(b"")[2:], end_stream=True)
            await until(lambda: in_flight in ended)
            assert fields[in_flight]["grpc-status"] == str(OK), fields[in_flight]
            after = open_stream()
            conn.send_data(after, frame(b""), end_stream=True)
            await until(lambda: after in ended)
            assert fields[after]["grpc-status"] == str(OK), fields[after]
    await server.healthy()


# --- random IDs on the lookup RPCs ----------------------------------------------------------

random_ids = st.one_of(
    st.text(max_size=40),
    st.from_regex(ID_REGEX),
    st.sampled_from(["", ".", "..", "../fn", "/", "fn", "a\x00b", "reg_" + "0" * 32]),
    st.integers(129, 100_000).map(lambda n: "x" * n),
)


async def check_lookup(srv: Server, live: Live, method: str, first: str, second: str) -> str:
    ref = pb.FunctionRegistration(run_uid=first, registration_id=second)
    request = {
        "Status": pb.StatusRequest(id=first),
        "Cancel": pb.CancelRequest(id=first),
        "Forget": pb.ForgetRequest(id=first),
        "FunctionStatus": pb.FunctionStatusRequest(registration=ref),
        "UnregisterFunction": pb.UnregisterFunctionRequest(registration=ref),
    }[method]
    service = FN if method in ("FunctionStatus", "UnregisterFunction") else RT
    code, message, _ = await srv.call(service, method, request.SerializeToString())
    if method == "UnregisterFunction":
        # seed 002: an absent registration unregisters successfully; a stale ID of a live
        # Run UID is FAILED_PRECONDITION; an empty field is INVALID_ARGUMENT
        if not first or not second:
            assert code == INVALID_ARGUMENT, (code, message)
        elif first == live.run_uid:
            assert code == FAILED_PRECONDITION, (code, message)
        else:
            assert code == OK, (code, message)
    elif method == "FunctionStatus":
        if not first or not second:
            assert code == INVALID_ARGUMENT, (code, message)
        else:
            assert code == (FAILED_PRECONDITION if first == live.run_uid else NOT_FOUND), message
    else:  # no task was ever started: every ID is unknown (or not an ID at all)
        assert code in (NOT_FOUND, INVALID_ARGUMENT), (code, message)
    status, status_message, raw = await srv.status(live.run_uid, live.registration_id)
    assert status == OK, status_message
    assert pb.FunctionStatusResponse.FromString(raw).state == pb.FUNCTION_REGISTRATION_STATE_READY
    await srv.healthy()
    return f"{method}: {code}"


async def test_random_ids_never_touch_a_live_registration(server: Server) -> None:
    live = await register_live(server, "fuzz-live", 1)

    @fuzz_settings(max_examples=50)
    @given(
        method=st.sampled_from(
            ["Status", "Cancel", "Forget", "FunctionStatus", "UnregisterFunction"]
        ),
        first=random_ids | st.just("fuzz-live"),
        second=random_ids | st.just(live.registration_id + "x"),
    )
    def prop(method: str, first: str, second: str) -> None:
        event(on_trio(check_lookup, server, live, method, first, second))

    await run_property(prop)
    code, message, reply = await server.call(RT, "List", b"")
    assert code == OK, message
    assert list(pb.ListResponse.FromString(reply).entries) == []
    assert await server.unregister(live.run_uid, live.registration_id) == OK
