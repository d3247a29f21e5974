"""Field validation and bounded buffers shared by both Runtime Servers."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from servers.common import limits
from servers.common.bounded import BoundedBuffer
from servers.common.errors import Code, ContractError
from servers.common.validation import (
    bound_text,
    is_below,
    real_path,
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


def test_every_env_the_crd_admits_passes_execute_with_runtimeds_own_variable() -> None:
    """F22: the CRD's spec.env total (krt.api.limits) plus $KRUNTIME_OUTPUTS (a path of up to
    4096 bytes) fits the servers' bound, counted the same way; one byte more does not."""
    from krt.api.limits import MAX_ENV_TOTAL_BYTES

    spec_env = {f"V{i}": "é" * 15000 for i in range(8)}  # 8 x (2 + 30000 + 2) = 240032
    spec_env["W"] = "x" * (MAX_ENV_TOTAL_BYTES - 240032 - 3)
    assert sum(len(k.encode()) + len(v.encode()) + 2 for k, v in spec_env.items()) == (
        MAX_ENV_TOTAL_BYTES
    )
    env = {**spec_env, "KRUNTIME_OUTPUTS": "/" + "w" * 4095}
    assert validate_env(env) == env
    with pytest.raises(ContractError) as excinfo:
        validate_env({**env, "PAD": "x" * (limits.MAX_ENV_BYTES - MAX_ENV_TOTAL_BYTES)})
    assert f"the limit is {limits.MAX_ENV_BYTES}" in _invalid(excinfo)


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
    (tmp_path / "work-sibling").mkdir()  # shares the work dir's name as a string prefix
    (root / "link").symlink_to(tmp_path / "outside")
    ok = resolve_working_dir(root, str(root / "run"), default=root / "d", field="working_dir")
    assert ok == (root / "run").resolve()
    assert resolve_working_dir(root, "run", default=root / "d", field="working_dir") == ok
    assert resolve_working_dir(root, "", default=root / "d", field="working_dir") == root / "d"
    for bad in (str(tmp_path / "outside"), "../outside", "link", "/etc", "../work-sibling"):
        with pytest.raises(ContractError) as excinfo:
            resolve_working_dir(root, bad, default=root / "d", field="working_dir")
        assert "not under the server's work dir" in _invalid(excinfo)


@pytest.mark.parametrize(
    ("path", "root", "below"),
    [
        ("/a/b/c", "/a/b", True),
        ("/a/b", "/a/b", False),
        ("/a/bc", "/a/b", False),
        ("/a", "/a/b", False),
        ("/a", "/", True),
        ("/", "/", False),
    ],
)
def test_is_below_compares_whole_components(path: str, root: str, below: bool) -> None:
    assert is_below(Path(path), Path(root)) is below


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


def test_bounded_buffer_keeps_head_and_tail_and_names_the_dropped_bytes() -> None:
    buffer = BoundedBuffer()
    chunk = b"x" * 65536
    for _ in range(40):  # 2.5 MiB
        buffer.write(chunk)
    buffer.write(b"THE END\n")
    text = buffer.text()
    dropped = 40 * 65536 + 8 - limits.TASK_OUTPUT_LIMIT_BYTES
    assert buffer.truncated
    assert buffer.dropped == dropped
    marker = limits.TRUNCATION_MARKER.format(
        dropped=dropped,
        head=limits.TASK_OUTPUT_HEAD_BYTES,
        tail=limits.TASK_OUTPUT_LIMIT_BYTES - limits.TASK_OUTPUT_HEAD_BYTES,
    )
    assert f" {dropped} bytes of output dropped" in marker
    head, _, tail = text.partition(marker)
    assert head == "x" * limits.TASK_OUTPUT_HEAD_BYTES
    assert len(tail) == limits.TASK_OUTPUT_LIMIT_BYTES - limits.TASK_OUTPUT_HEAD_BYTES
    assert tail.endswith("xxTHE END\n")
    assert len(text.encode()) == limits.TASK_OUTPUT_LIMIT_BYTES + len(marker)


@pytest.mark.parametrize("seed", range(5))
def test_bounded_buffer_never_stores_more_than_its_limit(seed: int) -> None:
    rng = random.Random(seed)
    limit, head = 1000, 250
    buffer = BoundedBuffer(limit, head=head, marker="|{dropped}|")
    stream = bytearray()
    for _ in range(300):
        chunk = bytes(
            rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 249, 999, 1000, 3000]))
        )
        buffer.write(chunk)
        stream += chunk
        assert buffer.stored <= limit
        assert buffer.stored == min(len(stream), limit)
        assert buffer.dropped == len(stream) - buffer.stored
    # the kept bytes are exactly the stream's first `head` and last `limit - head` bytes
    assert buffer._head == stream[:head]
    assert buffer._tail == stream[-(limit - head) :]


def test_bounded_buffer_without_truncation_returns_everything_up_to_the_limit() -> None:
    buffer = BoundedBuffer(10, head=4)
    for piece in (b"ab", b"cdef", b"ghij"):
        buffer.write(piece)
    assert not buffer.truncated
    assert buffer.text() == "abcdefghij"
    buffer.write(b"k")
    marker = limits.TRUNCATION_MARKER.format(dropped=1, head=4, tail=6)
    assert buffer.text() == "abcd" + marker + "fghijk"


def test_bounded_buffer_rejects_a_head_outside_the_limit() -> None:
    with pytest.raises(ValueError, match="head must be within 0..limit"):
        BoundedBuffer(10, head=-1)
    with pytest.raises(ValueError, match="limit must be >= 0"):
        BoundedBuffer(-1)


def test_bounded_buffer_does_not_split_a_character_at_the_cut() -> None:
    buffer = BoundedBuffer(limit=41, head=20, marker="[cut {dropped}]")
    buffer.write("é".encode() * 100)  # 2 bytes each; head 20 bytes, tail 21 bytes
    text = buffer.text()
    assert "\ufffd" not in text
    assert text == "é" * 10 + "[cut 160]" + "é" * 10
    odd = BoundedBuffer(limit=41, head=21, marker="[cut {dropped}]")
    odd.write("é".encode() * 100)  # the head ends inside a character
    assert odd.text() == "é" * 10 + "[cut 160]" + "é" * 10


def test_bound_text() -> None:
    assert bound_text("short") == "short"
    cut = bound_text("y" * 10_000, 100)
    assert len(cut.encode()) <= 100
    assert cut.endswith("[truncated]")


def test_real_path_matches_os_realpath(tmp_path: Path) -> None:
    """The kernel's answer (existing paths) and os.path.realpath (the rest) agree."""
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "dir" / "file").write_text("x")
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "dir" / "to-file").symlink_to("file")
    (tmp_path / "dir" / "up").symlink_to("..")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    cases = [
        "dir",
        "dir/sub",
        "to-dir/sub",
        "to-dir/to-file",
        "to-dir/sub/../file",
        "dir/up/to-dir/up/dir",
        "missing",
        "to-dir/missing/more",
        "dir/file/not-a-dir",
        "dangling",
        "dangling/deeper",
    ]
    for case in cases:
        path = f"{tmp_path}/{case}"
        assert real_path(path) == os.path.realpath(path), case
