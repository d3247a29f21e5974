"""``spec.source.inlinePath`` must name a file (a trailing ``/`` or ``/.`` names a directory).

The CRD refuses such a path at admission (``tests/api/krtapi_crd_cases.py``); runtimed refuses
it too, as the preparation failure of seed 003 naming the field, for a Run stored before the
rule existed. Without the check ``PurePosixPath`` drops the trailing ``/``: the source was
written to ``dir`` and the task then failed with exit 126 running ``dir/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from krt.api.run import Source
from runtimed.sources import PreparationError, Workspace, prepare_source


@pytest.mark.parametrize("path", ["dir/", "pkg/sub/", "dir/.", "a//"])
async def test_an_inline_path_naming_a_directory_is_a_preparation_error(
    tmp_path: Path, path: str
) -> None:
    files = Workspace(root=tmp_path / "ws").files("uid-1")
    with pytest.raises(PreparationError) as caught:
        await prepare_source(Source(inline="echo hi\n", inline_path=path), files)
    assert str(caught.value) == (
        f"spec.source.inlinePath {path!r} must name a file: it must not end in '/' or '/.'"
    )
    assert not files.root.exists(), "nothing left behind"


@pytest.mark.parametrize("path", ["dir/run.sh", ".env", "./run.sh", "a/./b.sh"])
async def test_an_inline_path_naming_a_file_is_written(tmp_path: Path, path: str) -> None:
    files = Workspace(root=tmp_path / "ws").files("uid-1")
    await prepare_source(Source(inline="echo hi\n", inline_path=path), files)
    assert (files.work / path).read_text() == "echo hi\n"
