"""The container log pump stamps each line when it is read, and batches the file writes."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from localkube.node.logpump import (
    BATCH_SECONDS,
    LARGE_READ_BYTES,
    READ_INTERVAL_SECONDS,
    pump_log,
)
from localkube.node.logs import LogLine, parse_records

#: Epoch seconds the test clock adds to trio's virtual time.
EPOCH = 1_800_000_000.0


def virtual_wall_clock() -> float:
    """A wall clock (epoch seconds) that follows trio's (virtual) clock."""
    return EPOCH + trio.current_time()


class RecordingSink:
    """Keeps each write and the trio time it was made at."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.times: list[float] = []

    async def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.times.append(trio.current_time())

    def lines(self) -> list[LogLine]:
        return parse_records(b"".join(self.writes))


def _messages(sink: RecordingSink) -> list[bytes]:
    return [line.text.rstrip(b"\n") for line in sink.lines()]


async def test_each_line_is_stamped_when_read_and_the_batch_goes_to_the_file_in_one_write(
    autojump_clock: trio.abc.Clock,
) -> None:
    """kubectl logs --timestamps: one stamp per line as read, not one per file write."""
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    gap = READ_INTERVAL_SECONDS * 1.2
    count = int(BATCH_SECONDS / gap) + 1  # all within one batch window
    assert count >= 3
    sent_at: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(pump_log, clock=virtual_wall_clock), receive, "stderr", sink)
        for n in range(count):
            sent_at.append(trio.current_time())
            await send.send_all(b"line %d\n" % n)
            await trio.sleep(gap)
        await trio.sleep(BATCH_SECONDS * 2)
        assert len(sink.writes) == 1
        assert sink.times[0] == pytest.approx(sent_at[0] + BATCH_SECONDS)
        await send.aclose()
    lines = sink.lines()
    assert [line.text for line in lines] == [b"line %d\n" % n for n in range(count)]
    assert [line.timestamp for line in lines] == pytest.approx(
        [EPOCH + t for t in sent_at], abs=1e-6
    )
    assert len({line.stamp for line in lines}) == count


class CountingStream(trio.abc.ReceiveStream):
    """Counts the reads that returned data."""

    def __init__(self, inner: trio.abc.ReceiveStream) -> None:
        self.inner = inner
        self.reads = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.inner.receive_some(max_bytes)
        self.reads += bool(data)
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_busy_stream_is_read_once_per_interval_and_stamped_at_most_that_late(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    counted = CountingStream(receive)
    sink = RecordingSink()
    step = READ_INTERVAL_SECONDS / 10
    count = 100  # 10 intervals' worth, a write every tenth of an interval
    sent_at: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(pump_log, clock=virtual_wall_clock), counted, "stdout", sink)
        for n in range(count):
            sent_at.append(trio.current_time())
            await send.send_all(b"%d\n" % n)
            await trio.sleep(step)
        await send.aclose()
    stamps = [line.timestamp - EPOCH for line in sink.lines()]
    assert len(stamps) == count
    late = [stamp - sent for stamp, sent in zip(stamps, sent_at, strict=True)]
    assert min(late) >= -1e-6
    assert max(late) <= READ_INTERVAL_SECONDS + 1e-6
    assert counted.reads <= count * step / READ_INTERVAL_SECONDS + 3  # not one per write
    assert len(set(stamps)) >= counted.reads - 1  # but still stamped read by read
    for data, written in zip(sink.writes[:-1], sink.times, strict=False):  # the last: at EOF
        first_read = parse_records(data)[0].timestamp - EPOCH
        assert written - first_read <= BATCH_SECONDS + 1e-6  # pauses never delay a write


async def test_a_line_is_stamped_when_its_newline_is_read(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(pump_log, clock=virtual_wall_clock), receive, "stdout", sink)
        await send.send_all(b"hal")
        await trio.sleep(0.005)
        await send.send_all(b"f\nnext")
        await trio.sleep(0.003)
        await send.send_all(b"\n")
        await send.aclose()
    lines = sink.lines()
    assert [line.text for line in lines] == [b"half\n", b"next\n"]
    assert [line.timestamp - EPOCH for line in lines] == pytest.approx([0.005, 0.008], abs=1e-6)


async def test_lines_after_the_window_go_to_a_second_write(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stdout", sink)
        await send.send_all(b"first\n")
        await trio.sleep(BATCH_SECONDS * 1.5)
        assert _messages(sink) == [b"first"]
        await send.send_all(b"second\n")
        await trio.sleep(BATCH_SECONDS * 1.5)
        assert len(sink.writes) == 2
        await send.aclose()
    assert _messages(sink) == [b"first", b"second"]


async def test_a_large_batch_is_written_at_once(autojump_clock: trio.abc.Clock) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    big = b"x" * LARGE_READ_BYTES + b"\n"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stdout", sink)
        await send.send_all(b"small\n")
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        await send.send_all(big)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == start  # no waiting for the window to close
        assert _messages(sink) == [b"small", big.rstrip(b"\n")]
        await send.aclose()


async def test_zero_batch_and_read_interval_write_every_read_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(pump_log, batch_seconds=0, read_interval_seconds=0), receive, "stdout", sink
        )
        for n in range(3):
            await send.send_all(b"%d\n" % n)
            await trio.testing.wait_all_tasks_blocked()
            assert len(sink.writes) == n + 1
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
        assert _messages(sink) == [b"done"]
        await send.aclose()
    assert _messages(sink) == [b"done", b"partial"]


async def test_the_end_of_the_stream_writes_the_batch_without_waiting(
    autojump_clock: trio.abc.Clock,
) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stdout", sink)
        await send.send_all(b"last words\n")
        await send.aclose()
    assert trio.current_time() == 0
    assert _messages(sink) == [b"last words"]


async def test_a_cancelled_pump_still_writes_what_it_read(autojump_clock: trio.abc.Clock) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_log, receive, "stdout", sink)
        await send.send_all(b"read\nand a tail")
        await trio.testing.wait_all_tasks_blocked()
        assert sink.writes == []  # waiting for the batch window
        nursery.cancel_scope.cancel()
    assert _messages(sink) == [b"read", b"and a tail"]
