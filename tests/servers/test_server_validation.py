"""Field validation and bounded buffers shared by both Runtime Servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from servers.common import limits
from servers.common.bounded import BoundedBuffer
from servers.common.errors import Code, ContractError
from servers.common.validation import (
    bound_text,
    resolve_working_dir,
    validate_digest,
    validate_entrypoint,
    validate_env,
    validate_id,
)


def _invalid(excinfo: pytest.ExceptionInfo[ContractError]) -> str:
    assert excinfo.value.code is Code.INVALID_ARGUMENT
    return excinfo.value.message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "required"),
        ("x" * 129, "128 bytes"),
        ("../etc", "must start"),
        ("a/b", "must start"),
        (".hidden", "must start"),
        ("a b", "must start"),
    ],
)
def test_ids_must_be_safe_path_components(value: str, fragment: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        validate_id("id", value)
    message = _invalid(excinfo)
    assert message.startswith("id ")
    assert fragment in message


def test_uuid_like_ids_are_accepted() -> None:
    assert validate_id("run_uid", "2b5d0c1e-8f1a-4e8e-9d55-0b0c0f0e0d0c") == (
        "2b5d0c1e-8f1a-4e8e-9d55-0b0c0f0e0d0c"
    )
    assert validate_id("id", "x" * 128)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"1BAD": "x"}, "'1BAD'"),
        ({"A=B": "x"}, "'A=B'"),
        ({"OK": "a\0b"}, "NUL"),
        ({f"V{i}": "" for i in range(513)}, "513 entries"),
        ({"BIG": "x" * (256 * 1024)}, "limit is 262144"),
    ],
)
def test_env_is_validated(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        validate_env(env)
    assert fragment in _invalid(excinfo)


def test_valid_env_is_copied() -> None:
    env = {"A": "1", "_B2": "two words"}
    assert validate_env(env) == env


@pytest.mark.parametrize(
    "digest", ["", "A" * 64, "a" * 63, "sha256:" + "g" * 64, "md5:" + "a" * 64]
)
def test_digest_must_be_lowercase_sha256(digest: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        validate_digest(digest)
    assert "registration_digest" in _invalid(excinfo)


@pytest.mark.parametrize("digest", ["a" * 64, "sha256:" + "0123456789abcdef" * 4])
def test_digest_forms_accepted(digest: str) -> None:
    assert validate_digest(digest) == digest


def test_working_dir_must_stay_under_the_work_dir(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "run").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    ok = resolve_working_dir(root, str(root / "run"), default=root / "d", field="working_dir")
    assert ok == (root / "run").resolve()
    assert resolve_working_dir(root, "run", default=root / "d", field="working_dir") == ok
    assert resolve_working_dir(root, "", default=root / "d", field="working_dir") == root / "d"
    for bad in (str(tmp_path / "outside"), "../outside", "link", "/etc"):
        with pytest.raises(ContractError) as excinfo:
            resolve_working_dir(root, bad, default=root / "d", field="working_dir")
        assert "not under the server's work dir" in _invalid(excinfo)


@pytest.mark.parametrize(
    ("entrypoint", "fragment"),
    [
        ("/abs/main.py", "relative"),
        ("../main.py", "'..'"),
        ("a/../../b.py", "'..'"),
        ("a\0", "NUL"),
    ],
)
def test_entrypoint_is_relative_without_dotdot(entrypoint: str, fragment: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        validate_entrypoint(entrypoint)
    assert fragment in _invalid(excinfo)


def test_entrypoint_forms_accepted() -> None:
    assert validate_entrypoint("main.py") == "main.py"
    assert validate_entrypoint("pkg/main.py") == "pkg/main.py"
    assert validate_entrypoint("") == ""


def test_bounded_buffer_keeps_everything_under_the_limit() -> None:
    buffer = BoundedBuffer(limit=100)
    buffer.write(b"hello ")
    buffer.write(b"world")
    assert buffer.text() == "hello world"
    assert not buffer.truncated


def test_bounded_buffer_marks_truncation_within_the_limit() -> None:
    buffer = BoundedBuffer()
    chunk = b"x" * 65536
    for _ in range(40):  # 2.5 MiB
        buffer.write(chunk)
    text = buffer.text()
    assert buffer.truncated
    assert buffer.dropped == 40 * 65536 - limits.TASK_OUTPUT_LIMIT_BYTES
    assert text.endswith(limits.TRUNCATION_MARKER)
    assert len(text.encode()) <= limits.TASK_OUTPUT_LIMIT_BYTES
    assert text.startswith("xxxx")


def test_bounded_buffer_does_not_split_a_character_at_the_cut() -> None:
    buffer = BoundedBuffer(limit=40, marker="[cut]")
    buffer.write("é".encode() * 100)
    text = buffer.text()
    assert text.endswith("[cut]")
    assert "\ufffd" not in text
    assert len(text.encode()) <= 40


def test_bound_text() -> None:
    assert bound_text("short") == "short"
    cut = bound_text("y" * 10_000, 100)
    assert len(cut.encode()) <= 100
    assert cut.endswith("[truncated]")
