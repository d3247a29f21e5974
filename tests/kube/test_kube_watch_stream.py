"""Kube.watch's line rules against a scripted API server (plain HTTP, chunked watch bodies).

localkube never sends a malformed watch line, so the decoding rules are checked here: blank
lines are skipped, unknown event types are logged and skipped, ERROR events map to their
Status class (410 -> Gone), and a line that is not a JSON event breaks the stream with
ConnectionFailed. A watch read to its end leaves its connection for the next request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from functools import partial
from pathlib import Path

import h11
import pytest
import trio
import yaml

from krt.kube import errors
from krt.kube.client import Kube, connect
from krt.kube.resources import PODS


class ScriptedApi:
    """Answers ``/version`` and, for any watch, the chunked ``lines`` of the test."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.watch_status = 200
        self.connections = 0
        self.targets: list[str] = []

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    connection.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    self.targets.append(event.target.decode())
                    await stream.send_all(self._answer(event.target.decode()))
                elif isinstance(event, h11.EndOfMessage):
                    connection = h11.Connection(h11.SERVER)  # next request cycle
                elif isinstance(event, h11.ConnectionClosed):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _answer(self, target: str) -> bytes:
        if "watch=1" not in target:
            body = json.dumps({"major": "1", "minor": "32", "metadata": {}}).encode()
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        if self.watch_status != 200:
            body = json.dumps({"kind": "Status", "code": self.watch_status, "message": "no"})
            head = f"HTTP/1.1 {self.watch_status} No\r\nContent-Length: {len(body)}\r\n\r\n"
            return (head + body).encode()
        chunks = b"".join(b"%x\r\n%s\n\r\n" % (len(line) + 1, line) for line in self.lines)
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


@asynccontextmanager
async def scripted(tmp_path: Path) -> AsyncIterator[tuple[ScriptedApi, Kube]]:
    api = ScriptedApi()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, api.serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t0ken"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        kube = await connect(kubeconfig=path)
        try:
            yield api, kube
        finally:
            await kube.aclose()
            nursery.cancel_scope.cancel()


def _pod_event(kind: str, name: str) -> bytes:
    obj = {"metadata": {"name": name, "namespace": "default", "resourceVersion": "7"}}
    return json.dumps({"type": kind, "object": obj}).encode()


async def _events(kube: Kube) -> list[tuple[str, str]]:
    async with aclosing(kube.watch(PODS, "default", "5")) as stream:
        return [(kind, obj["metadata"].get("name", "")) async for kind, obj in stream]


async def test_blank_lines_and_unknown_types_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with scripted(tmp_path) as (api, kube):
        api.lines = [
            _pod_event("ADDED", "a"),
            b"",
            b"   ",
            _pod_event("SURPRISE", "b"),
            b'{"type": "MODIFIED", "object": "not a map"}',
            _pod_event("DELETED", "a"),
            b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}',
        ]
        assert await _events(kube) == [("ADDED", "a"), ("DELETED", "a"), ("BOOKMARK", "")]
        assert "ignoring malformed event" in caplog.text
        await kube.get(PODS, "a", "default")  # the watch ended cleanly: its connection is reused
        assert api.connections == 1
        assert "resourceVersion=5" in api.targets[1]
        assert "allowWatchBookmarks=true" in api.targets[1]


@pytest.mark.parametrize(
    ("line", "error", "match"),
    [
        (b"not json", errors.ConnectionFailed, "undecodable line 'not json'"),
        (b"[1, 2]", errors.ConnectionFailed, "not an event"),
        (b'{"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}', errors.Gone, None),
        (b'{"type": "ERROR", "object": {"code": 500, "message": "boom"}}', errors.ApiError, "boom"),
        (b'{"type": "ERROR", "object": "?"}', errors.ApiError, None),
    ],
)
async def test_bad_lines_end_the_watch_with_an_error(
    tmp_path: Path, line: bytes, error: type[Exception], match: str | None
) -> None:
    async with scripted(tmp_path) as (api, kube):
        api.lines = [_pod_event("ADDED", "a"), line, _pod_event("ADDED", "never")]
        seen: list[str] = []

        async def consume() -> None:
            async with aclosing(kube.watch(PODS, "default", "5")) as stream:
                async for _, obj in stream:
                    seen.append(obj["metadata"]["name"])

        with pytest.raises(error, match=match):
            await consume()
        assert seen == ["a"]


async def test_watch_401_reloads_credentials_then_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The informer retries the watch; the next attempt carries the reloaded credentials."""
    async with scripted(tmp_path) as (api, kube):
        api.watch_status = 401
        reloads: list[str] = []

        async def reauthenticate() -> None:
            reloads.append("reload")

        monkeypatch.setattr(kube.api.auth, "reauthenticate", reauthenticate)
        with pytest.raises(errors.Unauthorized):
            await _events(kube)
        assert reloads == ["reload"]
        with pytest.raises(errors.Unauthorized):
            await _events(kube.with_token("caller"))
        assert reloads == ["reload"]  # a caller's token is final: nothing to reload
