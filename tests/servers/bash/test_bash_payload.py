"""Input checks and output content types of Bash functions (seed 002)."""

from __future__ import annotations

import pytest

from servers.bash.payload import (
    BINARY_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    MAX_INPUT_BYTES,
    TEXT_CONTENT_TYPE,
    check_input,
    output_content_type,
)
from servers.common.adapter import InvalidInput
from servers.common.validation import is_json_media_type


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON; charset=utf-8",
        "",
        " application/json ",
        "application/cloudevents+json",
    ],
)
def test_json_media_types(content_type: str) -> None:
    assert is_json_media_type(content_type)


@pytest.mark.parametrize("content_type", ["text/plain", "application/jsonx", "application/x-json"])
def test_other_media_types(content_type: str) -> None:
    assert not is_json_media_type(content_type)


@pytest.mark.parametrize(
    "payload", [b'{"a": 1}', b"1", b'"x"', b" [1, 2]\n", b'"\\u0000"', '"é€"'.encode()]
)
def test_valid_json_is_accepted(payload: bytes) -> None:
    check_input(payload, content_type="application/json")


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"NaN", "NaN is not valid JSON"),
        (b"[Infinity]", "Infinity is not valid JSON"),
        (b'"\xff"', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nesting is too deep"),
        (b'"a\x00b"', "NUL byte at offset 2"),
    ],
)
def test_invalid_json_is_invalid_input(payload: bytes, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        check_input(payload, content_type="application/json")


def test_empty_content_type_means_json() -> None:
    with pytest.raises(InvalidInput, match="not valid JSON"):
        check_input(b"not json", content_type="")


def test_other_content_types_pass_through_unparsed() -> None:
    check_input(b"not json \xff -n $(x)", content_type="text/plain")
    check_input(b"", content_type="application/octet-stream")


def test_nul_bytes_are_refused_for_any_content_type() -> None:
    with pytest.raises(InvalidInput, match="NUL byte at offset 3"):
        check_input(b"abc\x00", content_type="text/plain")


def test_input_size_limit_is_one_mebibyte() -> None:
    at_limit = b'"' + b"a" * (MAX_INPUT_BYTES - 2) + b'"'
    check_input(at_limit, content_type="application/json")
    with pytest.raises(InvalidInput, match="1048577 bytes; the limit is 1048576 bytes"):
        check_input(at_limit + b" ", content_type="application/json")


@pytest.mark.parametrize(
    ("output", "content_type"),
    [
        (b'{"a": 1}\n', JSON_CONTENT_TYPE),
        (b"42", JSON_CONTENT_TYPE),
        (b'"hi"', JSON_CONTENT_TYPE),
        (b"hello\n", TEXT_CONTENT_TYPE),
        (b"", TEXT_CONTENT_TYPE),
        (b"NaN", TEXT_CONTENT_TYPE),
        ("héllo".encode(), TEXT_CONTENT_TYPE),
        (b"\xff\xfe", BINARY_CONTENT_TYPE),
    ],
)
def test_output_content_type(output: bytes, content_type: str) -> None:
    assert output_content_type(output) == content_type
