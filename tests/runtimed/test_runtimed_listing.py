"""runtimed.runtime_client.Listing: a List answer whose views are built only when read."""

from __future__ import annotations

import pytest

from krt.proto.executor.v1 import runtime_pb2 as pb
from runtimed import runtime_client
from runtimed.runtime_client import Listing
from runtimed.task_decisions import ExecState, ServerView


def answer(n: int) -> pb.ListResponse:
    response = pb.ListResponse()
    for i in range(n):
        response.entries.add(
            id=f"run-{i}",
            state=pb.EXECUTION_STATE_FAILED if i % 2 else pb.EXECUTION_STATE_RUNNING,
            exit_code=i,
            stdout=f"out {i}",
            stderr=f"err {i}",
            error_message=f"why {i}" if i % 2 else "",
        )
    return response


def test_a_listing_reads_like_the_eager_dict() -> None:
    response = answer(5)
    listing = Listing(response.entries)
    eager = {entry.id: runtime_client._view(entry) for entry in response.entries}
    assert dict(listing) == eager
    assert len(listing) == 5
    assert "run-3" in listing
    assert "run-9" not in listing
    assert listing.get("run-9") is None
    with pytest.raises(KeyError):
        listing["run-9"]
    assert listing["run-3"] == ServerView(
        ExecState.FAILED, exit_code=3, stdout="out 3", stderr="err 3", error_message="why 3"
    )


def test_only_the_entries_read_become_views(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    view = runtime_client._view

    def counting(entry: pb.StatusResponse) -> ServerView:
        built.append(entry.id)
        return view(entry)

    monkeypatch.setattr(runtime_client, "_view", counting)
    listing = Listing(answer(50).entries)
    assert built == []
    first = listing.get("run-7")
    assert listing.get("run-7") is first  # built once
    assert built == ["run-7"]


def test_states_are_read_without_building_views(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    view = runtime_client._view

    def counting(entry: pb.StatusResponse) -> ServerView:
        built.append(entry.id)
        return view(entry)

    monkeypatch.setattr(runtime_client, "_view", counting)
    listing = Listing(answer(4).entries)
    assert [listing.state(f"run-{i}") for i in range(4)] == [
        ExecState.RUNNING,
        ExecState.FAILED,
        ExecState.RUNNING,
        ExecState.FAILED,
    ]
    assert listing.state("run-9") is ExecState.NOT_FOUND
    assert runtime_client.listed_state(listing, "run-1") is ExecState.FAILED
    assert built == []
    # any other mapping (an in-memory fake server's List) reads the views' states
    plain = {"a": ServerView(ExecState.SUCCEEDED)}
    assert runtime_client.listed_state(plain, "a") is ExecState.SUCCEEDED
    assert runtime_client.listed_state(plain, "b") is ExecState.NOT_FOUND
