"""Source preparation (inline, inlinePath, git checkout from a local bare repo) and outputs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from krt.api.errors import OutputsError
from krt.api.run import Source
from runtimed.local_files import SymlinkRefusedError, write_file
from runtimed.sources import PreparationError, Workspace, prepare_source, read_outputs


def git(*args: str, cwd: Path) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(cwd),
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def bare_repo(tmp_path: Path) -> tuple[str, str, str]:
    """A bare repository with two commits; returns (url, first sha, second sha)."""
    work = tmp_path / "src"
    work.mkdir()
    git("init", "-q", "-b", "main", ".", cwd=work)
    (work / "main.sh").write_text("echo v1\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "v1", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "main.sh").write_text("echo v2\n")
    (work / "lib").mkdir()
    (work / "lib" / "x.py").write_text("X = 2\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "v2", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "repo.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return str(bare), first, second


def files(tmp_path: Path, uid: str = "u1"):  # type: ignore[no-untyped-def]
    return Workspace(root=tmp_path / "ws").files(uid)


async def test_inline_source_goes_to_script_by_default(tmp_path: Path) -> None:
    f = files(tmp_path)
    await prepare_source(Source(inline="echo hi\n"), f)
    assert (f.work / "script").read_text() == "echo hi\n"


async def test_inline_path_may_be_nested(tmp_path: Path) -> None:
    f = files(tmp_path)
    await prepare_source(Source(inline="print(1)\n", inline_path="pkg/main.py"), f)
    assert (f.work / "pkg" / "main.py").read_text() == "print(1)\n"


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x"])
async def test_inline_path_cannot_escape_and_leaves_nothing(tmp_path: Path, path: str) -> None:
    f = files(tmp_path)
    with pytest.raises(PreparationError, match="inlinePath"):
        await prepare_source(Source(inline="x", inline_path=path), f)
    assert not f.root.exists()


async def test_each_preparation_starts_from_an_empty_directory(tmp_path: Path) -> None:
    f = files(tmp_path)
    await prepare_source(Source(inline="a"), f)
    (f.work / "leftover").write_text("from attempt 1")
    f.outputs.write_text("k=v\n")
    await prepare_source(Source(inline="b"), f)
    assert sorted(p.name for p in f.work.iterdir()) == ["script"]
    assert not f.outputs.exists()


async def test_no_source_gives_an_empty_working_directory(tmp_path: Path) -> None:
    f = files(tmp_path)
    await prepare_source(None, f)
    assert f.work.is_dir()
    assert not any(f.work.iterdir())


async def test_git_checkout_of_an_exact_commit(
    tmp_path: Path, bare_repo: tuple[str, str, str]
) -> None:
    url, first, second = bare_repo
    f = files(tmp_path)
    await prepare_source(Source(repo_url=url, commit_sha=first), f)
    assert (f.work / "main.sh").read_text() == "echo v1\n"
    assert not (f.work / "lib").exists()
    f2 = files(tmp_path, "u2")
    await prepare_source(Source(repo_url=f"file://{url}", commit_sha=second), f2)
    assert (f2.work / "lib" / "x.py").read_text() == "X = 2\n"


async def test_git_checkout_plus_inline_file(
    tmp_path: Path, bare_repo: tuple[str, str, str]
) -> None:
    url, first, _ = bare_repo
    f = files(tmp_path)
    await prepare_source(
        Source(repo_url=url, commit_sha=first, inline="extra", inline_path="x.txt"), f
    )
    assert (f.work / "main.sh").exists()
    assert (f.work / "x.txt").read_text() == "extra"


async def test_unknown_commit_fails_with_gits_message_and_no_partial_checkout(
    tmp_path: Path, bare_repo: tuple[str, str, str]
) -> None:
    url, _, _ = bare_repo
    f = files(tmp_path)
    # the fetch by SHA fails, the full fetch works, the checkout fails: named by subcommand
    # (it read "git -c failed": args[0] of `git -c advice.detachedHead=false checkout`)
    with pytest.raises(PreparationError, match=r"^git checkout failed \(exit code \d+\): "):
        await prepare_source(Source(repo_url=url, commit_sha="0" * 40), f)
    assert not f.root.exists()


async def test_unreachable_repository_fails(tmp_path: Path) -> None:
    f = files(tmp_path)
    with pytest.raises(PreparationError, match="git fetch failed"):
        await prepare_source(Source(repo_url=str(tmp_path / "nope.git"), commit_sha="a" * 40), f)


async def test_missing_git_binary_is_a_preparation_error(tmp_path: Path) -> None:
    with pytest.raises(PreparationError, match="cannot run"):
        await prepare_source(
            Source(repo_url="x", commit_sha="a" * 40), files(tmp_path), git="/nonexistent/git"
        )


async def test_repo_url_without_commit_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(PreparationError, match="set together"):
        await prepare_source(Source(repo_url="x"), files(tmp_path))


async def test_outputs_absent_file_means_none(tmp_path: Path) -> None:
    f = files(tmp_path)
    await prepare_source(None, f)
    assert await read_outputs(f) == {}


async def test_outputs_read_and_validated(tmp_path: Path) -> None:
    f = files(tmp_path)
    await prepare_source(None, f)
    f.outputs.write_text("a=1\nb=2\na=3\n")
    assert await read_outputs(f) == {"b": "2", "a": "3"}
    f.outputs.write_text("".join(f"k{i}=v\n" for i in range(65)))
    with pytest.raises(OutputsError, match="64"):
        await read_outputs(f)


async def test_outputs_file_of_appended_updates_is_read_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F12: a file of many appended updates (over 64 KiB, under 1 MiB) gives its last values;
    it is read and parsed in worker threads, a small file on the event loop."""
    threaded: list[object] = []
    run_sync = trio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
        threaded.append(fn)
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    f = files(tmp_path)
    await prepare_source(None, f)
    f.outputs.write_text("small=1\n")
    assert await read_outputs(f) == {"small": "1"}
    assert threaded == []
    f.outputs.write_text("".join(f"progress={i}\n" for i in range(6000)) + "#\n" * 40_000)
    assert f.outputs.stat().st_size > 64 * 1024
    assert await read_outputs(f) == {"progress": "5999"}
    assert len(threaded) == 2  # the whole read, then the parse
    threaded.clear()
    f.outputs.write_text("#" * (1024 * 1024 + 1))
    with pytest.raises(OutputsError) as caught:
        await read_outputs(f)
    assert caught.value.bound == "max-file-bytes"
    assert len(threaded) == 2


async def test_outputs_through_a_symlink_are_refused_not_read(tmp_path: Path) -> None:
    """F17: the link's target (a runtimed-side file) never reaches the message."""
    secret = tmp_path / "secret"
    secret.write_text("k=runtimed-side-value\n")
    f = files(tmp_path)
    await prepare_source(None, f)
    f.outputs.symlink_to(secret)
    with pytest.raises(OutputsError) as caught:
        await read_outputs(f)
    assert caught.value.bound == "symlink"
    assert "the outputs file is a symbolic link" in str(caught.value)
    assert "runtimed-side" not in str(caught.value)
    # a link in place of the Run's directory: refused as well, naming it
    f.outputs.unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "outputs").write_text("k=runtimed-side-value\n")
    f.root.rename(tmp_path / "moved")
    f.root.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputsError, match=r"outputs file's directory .*/runs/u1 is a symbolic"):
        await read_outputs(f)


async def test_an_inline_source_is_never_written_through_a_link(tmp_path: Path) -> None:
    """Preparation starts from a fresh directory; a link raced in is refused, not followed."""
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    f = files(tmp_path)
    await prepare_source(None, f)
    (f.work / "script").symlink_to(victim)
    with pytest.raises(SymlinkRefusedError):
        await write_file(f.work / "script", b"echo pwned\n", anchor=f.workspace)
    assert victim.read_text() == "keep\n"
    await prepare_source(Source(inline="echo hi\n"), f)  # the next attempt: fresh, no link
    assert not (f.work / "script").is_symlink()
    assert victim.read_text() == "keep\n"


def test_workspace_translates_paths_for_the_server(tmp_path: Path) -> None:
    ws = Workspace(root=tmp_path / "mine", server_root=Path("/workspace"))
    f = ws.files("abc")
    assert ws.for_server(f.work) == "/workspace/runs/abc/work"
    assert Workspace(root=tmp_path).for_server(tmp_path / "x") == str(tmp_path / "x")
    with pytest.raises(ValueError, match="directory name"):
        ws.files("../x")


async def test_preparing_a_new_run_makes_two_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 6 (CPU per Run): the Run's directory and its working directory, nothing else."""
    workspace = Workspace(root=tmp_path)
    await prepare_source(Source(inline="first\n"), workspace.files("u0"))  # creates runs/
    made: list[str] = []
    real_mkdir = os.mkdir

    def recording_mkdir(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", recording_mkdir)
    files = workspace.files("u1")
    await prepare_source(Source(inline="exit 0\n"), files)
    assert made == [str(files.root), str(files.work)]
    assert (files.work / "script").read_text() == "exit 0\n"


async def test_the_first_run_of_a_workspace_creates_the_runs_directory(tmp_path: Path) -> None:
    workspace = Workspace(root=tmp_path / "fresh")
    (tmp_path / "fresh").mkdir()
    files = workspace.files("u1")
    await prepare_source(Source(inline="exit 0\n"), files)
    assert (files.work / "script").read_text() == "exit 0\n"


async def test_a_run_directory_left_behind_still_gets_a_fresh_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Run's directory survived its removal (e.g. a leftover runtimed cannot delete):
    preparation still makes the working directory, as ``mkdir -p`` did."""
    from runtimed import sources

    async def keep(root: Path) -> None:
        return None

    workspace = Workspace(root=tmp_path)
    files = workspace.files("u1")
    files.root.mkdir(parents=True)
    (files.root / "leftover").write_text("x")
    monkeypatch.setattr(sources, "remove_tree", keep)
    await prepare_source(Source(inline="exit 0\n"), files)
    assert (files.work / "script").read_text() == "exit 0\n"


async def test_a_spare_goes_into_place_without_a_removal_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 6: a first attempt's Run directory does not exist; nothing is removed (or
    even looked up) before the spare's rename, and the rename still never keeps old files."""
    from runtimed import sources
    from runtimed.spare_dirs import SpareDirs

    workspace = Workspace(root=tmp_path)
    workspace.runs_dir().mkdir()
    spares = SpareDirs(workspace.spare_dir(), size=4)
    spares.fill()
    removed: list[Path] = []
    real_remove = sources.remove_tree

    async def recording_remove(root: Path) -> None:
        removed.append(root)
        await real_remove(root)

    monkeypatch.setattr(sources, "remove_tree", recording_remove)
    files = workspace.files("u1")
    await prepare_source(Source(inline="exit 0\n"), files, spares=spares)
    assert removed == []
    assert spares.ready == 3
    # a second attempt: the old directory is in the way, so it is removed, then replaced
    (files.work / "leftover").write_text("from attempt 1")
    files.outputs.write_text("k=v\n")
    await prepare_source(Source(inline="exit 1\n"), files, spares=spares)
    assert removed == [files.root]
    assert sorted(p.name for p in files.root.iterdir()) == ["work"]
    assert sorted(p.name for p in files.work.iterdir()) == ["script"]
    assert (files.work / "script").read_text() == "exit 1\n"
    assert spares.ready == 2
    # an empty directory in the way is simply replaced by the spare's rename
    (tmp_path / "runs" / "u2").mkdir()
    await prepare_source(None, workspace.files("u2"), spares=spares)
    assert removed == [files.root]
    assert [p.name for p in (tmp_path / "runs" / "u2").iterdir()] == ["work"]
    assert spares.ready == 1
