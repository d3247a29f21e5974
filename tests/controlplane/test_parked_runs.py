"""The parked-Run line of the scheduler: per Runtime and request shape, oldest first."""

from __future__ import annotations

from datetime import datetime, timedelta

from krt.controlplane.parked_runs import Age, ParkedRuns, shape_of

from .builders import NOW

ONE = shape_of({"runs": 1})
TWO = shape_of({"runs": 2, "gpu": 1})


def _age(seconds: int, arrival: int, name: str, *, stamped: bool = True) -> Age:
    stamp: datetime | None = NOW + timedelta(seconds=seconds) if stamped else None
    return (not stamped, stamp, arrival, name)


def test_shape_ignores_key_order() -> None:
    assert shape_of({"gpu": 1, "runs": 2}) == TWO == (("gpu", 1), ("runs", 2))


def test_oldest_is_by_creation_then_arrival_then_name_within_a_group() -> None:
    parked = ParkedRuns()
    parked.park(("ns", "c"), group="ns/a", shape=ONE, age=_age(1, 5, "c"), message="m")
    parked.park(("ns", "b"), group="ns/a", shape=ONE, age=_age(0, 9, "b"), message="m")
    parked.park(("ns", "a"), group="ns/a", shape=ONE, age=_age(0, 9, "a"), message="m")
    parked.park(
        ("ns", "x"), group="ns/a", shape=ONE, age=_age(0, 0, "x", stamped=False), message="m"
    )
    parked.park(("ns", "z"), group="ns/other", shape=ONE, age=_age(-5, 0, "z"), message="m")
    order = []
    while (head := parked.oldest("ns/a")) is not None:
        order.append(head[0][1])
        parked.discard(head[0])
    assert order == ["a", "b", "c", "x"]
    assert parked.oldest("ns/other") == (("ns", "z"), ONE)
    assert len(parked) == 1
    assert not parked.holds("ns/a")
    assert parked.holds("ns/other")


def test_oldest_skips_excluded_shapes_and_merges_the_others_by_age() -> None:
    parked = ParkedRuns()
    parked.park(("ns", "two-old"), group="g", shape=TWO, age=_age(0, 1, "two-old"), message="m")
    parked.park(("ns", "one-new"), group="g", shape=ONE, age=_age(0, 2, "one-new"), message="m")
    assert parked.oldest("g") == (("ns", "two-old"), TWO)
    assert parked.oldest("g", excluding={TWO}) == (("ns", "one-new"), ONE)
    assert parked.oldest("g", excluding={ONE, TWO}) is None
    assert parked.oldest("nothing") is None


def test_repark_discard_and_messages() -> None:
    parked = ParkedRuns()
    key = ("ns", "r")
    parked.park(key, group="g", shape=ONE, age=_age(0, 1, "r"), message="old")
    parked.park(("ns", "s"), group="g", shape=ONE, age=_age(0, 2, "s"), message="old")
    assert dict(parked.messages("g", ONE)) == {"old": 2}
    parked.park(key, group="g", shape=ONE, age=_age(0, 1, "r"), message="new")
    assert dict(parked.messages("g", ONE)) == {"old": 1, "new": 1}
    assert key in parked
    parked.discard(key)
    parked.discard(key)  # a no-op
    assert key not in parked
    assert parked.oldest("g") == (("ns", "s"), ONE)
    parked.park(key, group="g", shape=ONE, age=_age(0, 1, "r"), message="new")
    assert parked.oldest("g") == (key, ONE)  # back in its place in line
    assert parked.keys("g") == [key, ("ns", "s")]
    parked.discard(("ns", "s"))
    parked.discard(key)
    assert dict(parked.messages("g", ONE)) == {}
    assert parked.keys("g") == []
    assert len(parked) == 0


def test_many_park_and_discard_cycles_keep_order_and_stay_compact() -> None:
    parked = ParkedRuns()
    keys = [("ns", f"r-{index:04d}") for index in range(300)]
    for index, key in enumerate(keys):
        parked.park(key, group="g", shape=ONE, age=_age(0, index, key[1]), message="m")
    for _ in range(20):  # every Run decided again and re-parked, as resyncs do
        for index, key in enumerate(keys):
            parked.discard(key)
            parked.park(key, group="g", shape=ONE, age=_age(0, index, key[1]), message="m")
    assert parked.oldest("g") == (keys[0], ONE)
    assert len(parked._heaps[("g", ONE)]) == len(keys)  # noqa: SLF001 - no duplicate items
    assert parked.keys("g", ONE) == keys
    for key in keys[1:299]:  # stale items behind the head: compacted, not kept forever
        parked.discard(key)
        parked.park(
            ("ns", "new-" + key[1]), group="g", shape=ONE, age=_age(9, 0, key[1]), message="m"
        )
        parked.discard(("ns", "new-" + key[1]))
    assert len(parked._heaps[("g", ONE)]) <= 2 * 2 + 64  # noqa: SLF001
    assert parked.keys("g") == [keys[0], keys[299]]
    parked.discard(keys[0])
    assert parked.oldest("g") == (keys[299], ONE)
    parked.clear()
    assert parked.oldest("g") is None
    assert len(parked) == 0
