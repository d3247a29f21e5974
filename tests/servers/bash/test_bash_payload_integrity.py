"""Payloads reach the bash function byte for byte, and are never run as shell source.

Seed 002: the Bash Runtime "calls that function with the payload as one quoted positional
argument ... It never evaluates either the handler or request payload as shell source, and it
does not interpolate request data into a command string." Issue 2: payloads up to 1 MiB with
any bytes a JSON text can carry must arrive intact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from bash_helpers import running_worker, write_handler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servers.bash.adapter import BashAdapter
from servers.bash.payload import MAX_INPUT_BYTES

JSON = "application/json"

HANDLERS = r"""
echo_arg() { printf '%s' "$1"; }
nargs() { printf '%d' "$#"; }
chars() { printf '%d' "${#1}"; }
"""

# every code point except surrogates (which UTF-8 cannot encode)
_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=200)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)


@st.composite
def _json_payloads(draw: st.DrawFn) -> bytes:
    """A JSON text: raw non-ASCII or \\u escapes, compact or indented (raw newlines)."""
    value = draw(st.one_of(_text, _json_values))
    ensure_ascii = draw(st.booleans())
    indent = draw(st.sampled_from([None, 0, 2, "\t"]))
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    padding = draw(st.sampled_from(["", "\n", " \n\n", "\r\n\t "]))
    return (padding + text + padding).encode("utf-8")


@pytest.fixture
def handlers(workdir: Path) -> Path:
    return write_handler(workdir, "echo.sh", HANDLERS)


NASTY_JSON = [
    '"$(touch pwned)"',
    '"`touch pwned`"',
    "\"'; touch pwned; '\"",
    '"\\"; touch pwned; \\""',
    '{"cmd": "$(touch pwned)", "x": "${HOME}", "y": "$((1+1))", "z": "`id`"}',
    '"a\\\\b\\\\\\\\c\\\\"',
    '"\\\\"',
    '"-n"',
    "-1",
    '"-e \\\\n"',
    '"%s%n%d %%"',
    '"*"',
    '"~"',
    '"!!"',
    '"héllo wörld € 𝄞 日本"',
    '"\\u0000 escaped NUL"',
    '"line\\nbreak"',
    '{\n  "raw": "newlines",\n  "between": [\n    1,\n    2\n  ]\n}\n\n\n',
    '"trailing spaces"   ',
    '   \t  "leading whitespace"',
    '"\\r\\n"',
    "[]",
    '""',
]


@pytest.mark.parametrize("payload", NASTY_JSON)
async def test_nasty_json_payloads_arrive_intact_and_never_execute(
    adapter: BashAdapter, workdir: Path, handlers: Path, payload: str
) -> None:
    data = payload.encode()
    async with running_worker(adapter, workdir, "echo.echo_arg") as worker:
        result = await worker.invoke(data, content_type=JSON, invocation_id="i")
    assert result.output == data
    assert not (workdir / "pwned").exists()


NASTY_TEXT = [
    b"-n",
    b"-e",
    b"--",
    b"$(touch pwned)\n`touch pwned`\n${IFS}",
    b"\n\n\n",
    b"\r\n",
    b"back\\slash\\",
    b"\x01\x02\x1b[31m\x7f",
    b"\xff\xfe not utf-8 \x80",
    b"",
    b" ",
]


@pytest.mark.parametrize("payload", NASTY_TEXT)
async def test_non_json_payloads_arrive_intact_and_never_execute(
    adapter: BashAdapter, workdir: Path, handlers: Path, payload: bytes
) -> None:
    async with running_worker(adapter, workdir, "echo.echo_arg") as worker:
        result = await worker.invoke(payload, content_type="text/plain", invocation_id="i")
        assert result.output == payload
    assert not (workdir / "pwned").exists()


@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
async def test_payload_length_is_counted_in_bytes_whatever_the_handler_locale(
    adapter: BashAdapter, workdir: Path, handlers: Path, locale: str
) -> None:
    """The driver reads LENGTH bytes even when the handler runs in a UTF-8 locale."""
    payload = '"é€𝄞"'.encode()  # 5 characters, 11 bytes
    env = {"LC_ALL": locale}
    with trio.fail_after(10):  # a character-counting read would wait for bytes never sent
        async with running_worker(adapter, workdir, "echo.echo_arg", env=env) as worker:
            first = await worker.invoke(payload, content_type=JSON, invocation_id="a")
            second = await worker.invoke(b'"next"', content_type=JSON, invocation_id="b")
    assert (first.output, second.output) == (payload, b'"next"')
    async with running_worker(adapter, workdir, "echo.chars", env=env) as worker:
        counted = await worker.invoke(payload, content_type=JSON, invocation_id="c")
    # the function itself sees the locale it was given
    assert counted.output == (b"5" if locale == "C.UTF-8" else b"11")


@pytest.mark.parametrize("payload", [b"-n", b"a b\nc", b"", b"$(touch pwned) *"])
async def test_the_payload_is_exactly_one_argument(
    adapter: BashAdapter, workdir: Path, handlers: Path, payload: bytes
) -> None:
    async with running_worker(adapter, workdir, "echo.nargs") as worker:
        result = await worker.invoke(payload, content_type="text/plain", invocation_id="i")
    assert result.output == b"1"


async def test_one_mebibyte_payload_arrives_intact(
    adapter: BashAdapter, workdir: Path, handlers: Path
) -> None:
    chunk = '$(touch pwned) `x` "q" \\ é€𝄞 \n'
    body = json.dumps(chunk * (MAX_INPUT_BYTES // (len(chunk.encode()) + 8)), ensure_ascii=False)
    data = body.encode()
    data += b" " * (MAX_INPUT_BYTES - len(data))
    assert len(data) == MAX_INPUT_BYTES
    async with running_worker(adapter, workdir, "echo.echo_arg") as worker:
        result = await worker.invoke(data, content_type=JSON, invocation_id="big")
        assert result.output == data
        # the worker is still in sync with the protocol afterwards
        small = await worker.invoke(b'"next"', content_type=JSON, invocation_id="small")
        assert small.output == b'"next"'
    assert not (workdir / "pwned").exists()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(payloads=st.lists(_json_payloads(), min_size=1, max_size=6))
async def test_any_json_payload_arrives_byte_for_byte(
    adapter: BashAdapter, workdir: Path, handlers: Path, payloads: list[bytes]
) -> None:
    async with running_worker(adapter, workdir, "echo.echo_arg") as worker:
        for number, payload in enumerate(payloads):
            result = await worker.invoke(payload, content_type=JSON, invocation_id=str(number))
            assert result.output == payload
    assert not (workdir / "pwned").exists()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    payloads=st.lists(
        st.binary(max_size=300).filter(lambda b: b"\x00" not in b), min_size=1, max_size=6
    )
)
async def test_any_nul_free_bytes_arrive_intact_as_text(
    adapter: BashAdapter, workdir: Path, handlers: Path, payloads: list[bytes]
) -> None:
    async with running_worker(adapter, workdir, "echo.echo_arg") as worker:
        for number, payload in enumerate(payloads):
            result = await worker.invoke(
                payload, content_type="application/octet-stream", invocation_id=str(number)
            )
            assert result.output == payload
