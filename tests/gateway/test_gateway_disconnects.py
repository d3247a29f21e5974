"""gateway.disconnects: a client's disconnect cancels its invocation without a watcher task."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from conftest import PATH
from hypercorn.config import Config
from hypercorn.trio.task_group import TaskGroup

from gateway import disconnects
from gateway.app import GatewayApp
from gateway.disconnects import EXTENSION, DisconnectSignal
from gateway.invoke import InvokeRequest, InvokeResult
from gateway.metrics import GatewayMetrics

GOOD = [(b"authorization", b"Bearer tok"), (b"content-type", b"application/json")]


class HangingInvoker:
    """Waits until cancelled; counts the tasks alive meanwhile."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = False

    async def invoke(self, request: InvokeRequest) -> InvokeResult:
        self.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise
        raise AssertionError


def scope_with(signal: DisconnectSignal | None) -> dict[str, Any]:
    extensions = {} if signal is None else {EXTENSION: signal}
    return {"type": "http", "method": "POST", "path": PATH, "raw_path": PATH.encode(),
            "query_string": b"", "headers": GOOD, "extensions": extensions}  # fmt: skip


async def run_request(signal: DisconnectSignal | None, *, fire_before_dispatch: bool) -> Any:
    """One request whose client disconnects while (or before) it is dispatched."""
    invoker, metrics, sent = HangingInvoker(), GatewayMetrics(), []
    app = GatewayApp(invoker, metrics, default_timeout_seconds=30, max_timeout_seconds=60)  # type: ignore[arg-type]
    bodies = [{"type": "http.request", "body": b"{}", "more_body": False}]
    gone = trio.Event()

    async def receive() -> dict[str, Any]:
        if bodies:
            if fire_before_dispatch and signal is not None:
                signal.fire()  # hypercorn saw the hang-up while the body was being read
            return bodies.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    tasks_during_invoke = 0
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app, scope_with(signal), receive, send)
            if not fire_before_dispatch:
                await invoker.started.wait()
                await trio.testing.wait_all_tasks_blocked()
                (app_task,) = nursery.child_tasks
                tasks_during_invoke = len(app_task.child_nurseries)
                if signal is not None:
                    signal.fire()
                gone.set()
    code_499 = metrics.registry.get_sample_value("krt_gateway_invocations_total", {"code": "499"})
    return invoker, sent, code_499, tasks_during_invoke


async def test_the_signal_cancels_the_invocation_without_a_watcher_task() -> None:
    invoker, sent, code_499, nurseries = await run_request(
        DisconnectSignal(), fire_before_dispatch=False
    )
    assert invoker.cancelled
    assert sent == []  # nothing is sent to a client that is gone
    assert code_499 == 1
    assert nurseries == 0  # the app task opened no nursery for a watcher


async def test_a_disconnect_before_dispatch_cancels_at_once() -> None:
    invoker, sent, code_499, _ = await run_request(DisconnectSignal(), fire_before_dispatch=True)
    assert invoker.started.is_set()
    assert invoker.cancelled
    assert (sent, code_499) == ([], 1)


async def test_without_the_signal_a_task_watches_receive() -> None:
    invoker, sent, code_499, nurseries = await run_request(None, fire_before_dispatch=False)
    assert invoker.cancelled
    assert (sent, code_499, nurseries) == ([], 1, 1)


async def test_install_makes_hypercorn_fire_the_signal_and_deliver_every_message() -> None:
    assert disconnects.install()
    assert disconnects.install()  # idempotent
    received: list[dict[str, Any]] = []
    scopes: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any, *_: Any) -> None:
        scopes.append(scope)
        while (message := await receive())["type"] != "http.disconnect":
            received.append(message)
        received.append(message)

    async def send(message: Any) -> None:
        pass

    async with TaskGroup() as group:
        scope: dict[str, Any] = {"type": "http", "extensions": {}}
        put = await group.spawn_app(app, Config(), scope, send)
        signal = scope["extensions"][EXTENSION]
        assert isinstance(signal, DisconnectSignal)
        await put({"type": "http.request", "body": b"{}", "more_body": False})
        assert not signal.gone
        cancelled = trio.CancelScope()
        signal.cancel_on_disconnect(cancelled)
        await put({"type": "http.disconnect"})
        assert signal.gone
        assert cancelled.cancel_called
    assert [m["type"] for m in received] == ["http.request", "http.disconnect"]
    assert scopes[0] is scope


async def test_messages_move_without_checkpoints_while_the_queue_has_room() -> None:
    assert disconnects.install()
    received: list[dict[str, Any]] = []
    app_may_read = trio.Event()

    async def app(scope: Any, receive: Any, send: Any, *_: Any) -> None:
        await app_may_read.wait()
        with trio.testing.assert_no_checkpoints():  # both messages are waiting already
            received.append(await receive())
            received.append(await receive())
        received.append(await receive())  # the queue is empty: this one waits

    async def send(message: Any) -> None:
        pass

    config = Config()
    async with TaskGroup() as group:
        put = await group.spawn_app(app, config, {"type": "http", "extensions": {}}, send)
        with trio.testing.assert_no_checkpoints():
            await put({"type": "http.request", "body": b"{", "more_body": True})
            await put({"type": "http.request", "body": b"}", "more_body": False})
        app_may_read.set()
        await trio.testing.wait_all_tasks_blocked()
        assert len(received) == 2
        await put({"type": "http.disconnect"})
    assert [m.get("body") for m in received] == [b"{", b"}", None]
    assert received[2]["type"] == "http.disconnect"


async def test_a_full_queue_makes_put_wait_for_the_app(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert disconnects.install()
    release = trio.Event()
    received: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any, *_: Any) -> None:
        await release.wait()
        for _ in range(3):
            received.append((await receive())["body"])

    async def send(message: Any) -> None:
        pass

    config = Config()
    config.max_app_queue_size = 2
    async with TaskGroup() as group:
        put = await group.spawn_app(app, config, {"type": "http", "extensions": {}}, send)
        await put({"type": "http.request", "body": b"1", "more_body": True})
        await put({"type": "http.request", "body": b"2", "more_body": True})
        with trio.move_on_after(1) as blocked:
            await put({"type": "http.request", "body": b"3", "more_body": False})
        assert blocked.cancelled_caught  # back-pressure: the third waits for the app
        release.set()
        await put({"type": "http.request", "body": b"3", "more_body": False})
    assert received == [b"1", b"2", b"3"]
