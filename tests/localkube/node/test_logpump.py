"""The container log pump batches small writes and never holds back a fast writer."""

from __future__ import annotations

import trio
import trio.testing

from localkube.node.logpump import BATCH_SECONDS, LARGE_READ_BYTES, pump_log
from localkube.node.logs import parse_records


class RecordingSink:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.writes.append(data)


def _messages(writes: list[bytes]) -> list[bytes]:
    return [line.text.rstrip(b"\n") for line in parse_records(b"".join(writes))]


async def test_lines_written_within_the_batch_window_go_to_the_file_in_one_write(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stderr", sink)
        await send.send_all(b"first\n")
        await trio.sleep(BATCH_SECONDS / 4)
        for n in range(10):  # ten small writes while the pump waits
            await send.send_all(b"line %d\n" % n)
            await trio.sleep(BATCH_SECONDS / 40)
        await trio.sleep(BATCH_SECONDS * 2)
        await send.aclose()
    assert len(sink.writes) == 2
    assert _messages(sink.writes) == [b"first"] + [b"line %d" % n for n in range(10)]


async def test_a_large_read_is_followed_by_the_next_read_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    big = b"x" * LARGE_READ_BYTES + b"\n"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stdout", sink)
        await send.send_all(big)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        await send.send_all(b"after\n")
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == start  # no batching pause after a large read
        assert _messages(sink.writes)[-1] == b"after"
        await send.aclose()


async def test_an_unterminated_tail_is_written_when_the_stream_ends(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stdout", sink)
        await send.send_all(b"done\npartial")
        await trio.sleep(BATCH_SECONDS * 2)
        assert _messages(sink.writes) == [b"done"]
        await send.aclose()
    assert _messages(sink.writes) == [b"done", b"partial"]
