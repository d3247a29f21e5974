"""Bounded outputs (seed 000 Invoke Contract, issue 6): the one validator; errors name the key
and the bound; every bound is tested at the limit and one past it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krt.api.errors import OutputsError
from krt.api.outputs import MAX_OUTPUTS_FILE_BYTES, parse_outputs_file, validate_outputs


def _error(outputs: dict[str, str]) -> OutputsError:
    with pytest.raises(OutputsError) as caught:
        validate_outputs(outputs)
    return caught.value


@pytest.mark.parametrize("key", ["a", "A_b.c-9", "k" * 63, "..", "-", "_"])
def test_valid_keys(key: str) -> None:
    assert validate_outputs({key: "v"}) == {key: "v"}


@pytest.mark.parametrize("key", ["", "k" * 64, "a b", "a=b", "ä", "a/b", "a\n"])
def test_invalid_key_names_key_and_bound(key: str) -> None:
    error = _error({key: "v"})
    assert (error.key, error.bound) == (key, "key-pattern")
    assert repr(key) in str(error)
    assert "[A-Za-z0-9_.-]{1,63}" in str(error)


def test_count_bound() -> None:
    assert len(validate_outputs({f"k{i}": "" for i in range(64)})) == 64
    error = _error({f"k{i}": "" for i in range(65)})
    assert (error.key, error.bound) == (None, "max-keys")
    assert "65 outputs exceed the limit of 64 keys" in str(error)


def test_value_bound_counts_utf8_bytes() -> None:
    assert validate_outputs({"k": "x" * 4096})
    error = _error({"k": "x" * 4097})
    assert (error.key, error.bound) == ("k", "max-value-bytes")
    assert "4097 bytes" in str(error)
    assert "4096" in str(error)
    # 2049 two-byte characters are 4098 bytes: over, although only 2049 characters.
    assert _error({"k": "\u00e9" * 2049}).bound == "max-value-bytes"


def test_total_bound_counts_keys_and_values() -> None:
    # 4 entries of (1-byte key + 4095-byte value) = 16384 bytes: exactly at the limit.
    at_limit = {str(i): "x" * 4095 for i in range(4)}
    assert validate_outputs(at_limit) == at_limit
    over = {**at_limit, "z": ""}
    error = _error(over)
    assert (error.key, error.bound) == ("z", "max-total-bytes")
    assert "16384 bytes in total" in str(error)


def test_non_string_value() -> None:
    error = _error({"k": 5})  # type: ignore[dict-item]
    assert (error.key, error.bound) == ("k", "value-type")


def test_parse_file_format() -> None:
    data = b"# comment\nA=1\n\nB=x=y\r\nA=2\nEMPTY=\nLAST=no newline"
    assert parse_outputs_file(data) == {"B": "x=y", "A": "2", "EMPTY": "", "LAST": "no newline"}


def test_parse_file_keeps_unusual_whitespace_in_values() -> None:
    assert parse_outputs_file(b"K=a\x0bb \n") == {"K": "a\x0bb "}


def test_file_of_appended_updates_up_to_one_mebibyte_is_read() -> None:
    """F12: the documented "update by appending" pattern must not hit a 64 KiB file bound."""
    assert MAX_OUTPUTS_FILE_BYTES == 1024 * 1024
    lines = b"".join(b"progress=%d\n" % i for i in range(60_000))  # about 900 KB
    assert 64 * 1024 < len(lines) <= MAX_OUTPUTS_FILE_BYTES
    assert parse_outputs_file(lines) == {"progress": "59999"}
    comments = b"#\n" * 20_000 + b"a=1"
    assert parse_outputs_file(comments) == {"a": "1"}
    exact = b"a=" + b"x" * 4000 + b"\n"
    exact += b"#" * (MAX_OUTPUTS_FILE_BYTES - len(exact))
    assert parse_outputs_file(exact) == {"a": "x" * 4000}


def test_over_the_file_bound_says_what_to_do() -> None:
    with pytest.raises(OutputsError) as caught:
        parse_outputs_file(b"a=1\n" * (MAX_OUTPUTS_FILE_BYTES // 4 + 1))
    assert caught.value.bound == "max-file-bytes"
    message = str(caught.value)
    assert "1048576 bytes (1 MiB)" in message
    assert "write each key once, or truncate the file" in message


def test_line_numbers_count_every_line() -> None:
    with pytest.raises(OutputsError, match="line 5 "):
        parse_outputs_file(b"a=1\n\n#c\r\nb=2\noops\nc=3")
    assert parse_outputs_file(b"\n\n") == {}
    assert parse_outputs_file(b"") == {}


def test_parse_file_errors() -> None:
    with pytest.raises(OutputsError) as caught:
        parse_outputs_file(b"A=1\nnot a pair\n")
    assert caught.value.bound == "line-syntax"
    assert "line 2" in str(caught.value)
    with pytest.raises(OutputsError) as caught:
        parse_outputs_file(b"A=\xff\n")
    assert caught.value.bound == "encoding"
    with pytest.raises(OutputsError) as caught:
        parse_outputs_file(b"A=" + b"x" * MAX_OUTPUTS_FILE_BYTES)
    assert caught.value.bound == "max-file-bytes"
    with pytest.raises(OutputsError) as caught:
        parse_outputs_file(b"bad key=1\n")
    assert (caught.value.key, caught.value.bound) == ("bad key", "key-pattern")


_KEYS = st.text(alphabet="abcXYZ019_.-", min_size=1, max_size=63)


@given(st.dictionaries(_KEYS, st.text(max_size=300), max_size=80))
def test_validator_accepts_exactly_what_fits_every_bound(outputs: dict[str, str]) -> None:
    sizes = [len(k.encode()) + len(v.encode()) for k, v in outputs.items()]
    fits = (
        len(outputs) <= 64
        and all(len(v.encode()) <= 4096 for v in outputs.values())
        and sum(sizes) <= 16384
    )
    try:
        assert validate_outputs(outputs) == outputs
        accepted = True
    except OutputsError:
        accepted = False
    assert accepted is fits
