"""What of a task attempt's output is logged live and at the end (docs/usage.md "Logs").

Pure bookkeeping of :mod:`runtimed.output_log`, driven with the Runtime Server's real kept
text (:class:`servers.common.bounded.BoundedBuffer`, scaled down): head + marker + a tail
window that moves while the task prints.
"""

from __future__ import annotations

import pytest

from runtimed.output_log import AttemptLog, LivePause, take_final, take_live
from servers.common.bounded import BoundedBuffer


def _texts(taken: list[tuple[int, str]]) -> list[str]:
    return [line for _, line in taken]


def _live(log: AttemptLog, stdout: str, stderr: str = "", *, budget: int = 64) -> list[str]:
    out = take_live(log, "stdout", stdout, budget=budget, max_lines=1000)
    return _texts(out + take_live(log, "stderr", stderr, budget=budget, max_lines=1000))


def test_live_takes_complete_lines_only_and_holds_back_a_partial_one() -> None:
    log = AttemptLog(attempt=1)
    assert _live(log, "one\ntw") == ["one"]
    assert _live(log, "one\ntwo\nth") == ["two"]
    assert log.paused is LivePause.NO
    assert log.live_bytes == len("one\ntwo\n")


def test_live_never_logs_more_than_the_budget_counting_both_streams() -> None:
    log = AttemptLog(attempt=1)
    # 8 + 8 bytes fit a 20-byte budget, the next 8-byte line of either stream does not
    assert _live(log, "aaaaaaa\nbbbbbbb\n", "ccccccc\nddddddd\n", budget=20) == [
        "aaaaaaa",
        "bbbbbbb",
    ]
    assert log.live_bytes == 16
    assert log.paused is LivePause.BUDGET
    assert _live(log, "aaaaaaa\nbbbbbbb\n", "ccccccc\nddddddd\n", budget=20) == []


def test_the_budget_counts_utf8_bytes_not_characters() -> None:
    log = AttemptLog(attempt=1)
    # "éé\n" is 3 characters but 5 bytes: two such lines do not fit 8 bytes
    assert _live(log, "éé\néé\n", budget=8) == ["éé"]
    assert log.live_bytes == 5
    assert log.paused is LivePause.BUDGET


def test_a_first_line_longer_than_the_budget_pauses_without_logging() -> None:
    log = AttemptLog(attempt=1)
    assert _live(log, "x" * 100 + "\nshort\n", budget=64) == []
    assert log.paused is LivePause.BUDGET
    final = take_final(log, "stdout", "x" * 100 + "\nshort\n", max_lines=1000)
    assert final.lines == ["x" * 100, "short"]


def test_live_stops_at_the_line_bound_and_the_final_count_includes_the_rest() -> None:
    log = AttemptLog(attempt=1)
    text = "\n" * 10  # ten empty lines: 10 bytes, well inside the budget
    assert _texts(take_live(log, "stdout", text, budget=64, max_lines=3)) == ["", "", ""]
    assert log.paused is LivePause.LINES
    final = take_final(log, "stdout", text + "\n\n", max_lines=3)
    assert final.lines == []
    assert final.not_logged == 9


def _printing(lines: range, buffer: BoundedBuffer) -> str:
    buffer.write(b"".join(b"line %d\n" % i for i in lines))
    return buffer.text()


@pytest.mark.parametrize("read_every", [1, 3, 7, 13, 50])
def test_final_log_is_the_final_text_whenever_live_reads_fell(read_every: int) -> None:
    """Reads while the tail window moves leave no trace in the final log (T_findings F1)."""
    buffer = BoundedBuffer(1000, head=400)
    log = AttemptLog(attempt=1)
    live: list[str] = []
    for step in range(100):
        text = _printing(range(step * 20 + 1, step * 20 + 21), buffer)
        if step % read_every == 0:
            live += _texts(take_live(log, "stdout", text, budget=128, max_lines=80))
    final_text = buffer.text()
    assert "bytes of output dropped" in final_text
    assert sum(len(line) + 1 for line in live) <= 128
    assert log.paused is LivePause.BUDGET
    final = take_final(log, "stdout", final_text, max_lines=80)
    assert not final.restarted
    kept = final_text.splitlines()
    assert live + final.lines == kept[:80]
    assert final.not_logged == len(kept) - 80
    dropped = buffer.dropped
    assert any(f"[... {dropped} bytes of output dropped" in line for line in final.lines)


def test_final_restarts_from_the_beginning_when_the_text_no_longer_starts_with_the_live_part() -> (
    None
):
    log = AttemptLog(attempt=1)
    assert _live(log, "a\nb\n") == ["a", "b"]
    final = take_final(log, "stdout", "x\ny\nz\n", max_lines=1000)
    assert final.restarted
    assert final.lines == ["x", "y", "z"]
    shorter = AttemptLog(attempt=1)
    _live(shorter, "a\nb\n")
    assert take_final(shorter, "stdout", "a\n", max_lines=1000).restarted


def test_final_continues_where_live_stopped() -> None:
    log = AttemptLog(attempt=1)
    _live(log, "a\nb\nc")
    final = take_final(log, "stdout", "a\nb\nc and more", max_lines=1000)
    assert (final.lines, final.not_logged, final.restarted) == (["c and more"], 0, False)


def test_every_line_carries_its_offset_in_the_stream_live_and_final() -> None:
    """The offset of a line is where it starts in the attempt's stream (characters)."""
    log = AttemptLog(attempt=1)
    assert take_live(log, "stdout", "ab\r\nc\nd", budget=64, max_lines=1000) == [
        (0, "ab"),
        (4, "c"),
    ]
    final = take_final(log, "stdout", "ab\r\nc\nd\ne\n", max_lines=1000)
    assert (final.lines, final.offsets) == (["d", "e"], [6, 8])


def test_a_restarted_runtimed_logs_each_line_at_the_offset_it_was_logged_live_at() -> None:
    """F16: a new runtimed instance starts over; its lines' offsets match the old ones'."""
    text = "".join(f"line {i}\n" for i in range(16))
    before = AttemptLog(attempt=1)
    live = take_live(before, "stdout", text[: text.index("line 5")], budget=1024, max_lines=1000)
    after = AttemptLog(attempt=1)  # the new instance knows nothing of what was logged
    final = take_final(after, "stdout", text, max_lines=1000)
    assert not final.restarted
    again = dict(zip(final.offsets, final.lines, strict=True))
    assert [again[offset] for offset, _ in live] == [line for _, line in live]
    assert len(again) == 16
