"""``ahead``: the replay's next batch prepared in a second thread while the caller sends this one."""

from __future__ import annotations

import threading

import pytest
from queuelake.pipeline.replay.ahead import ahead


def test_items_come_in_order_each_with_its_own_result_or_error() -> None:
    def prepare(item: int) -> int:
        if item == 2:
            raise ValueError("item 2 cannot be built")
        return item * 10

    seen = []
    for item, prepared in ahead([0, 1, 2, 3], prepare):
        try:
            seen.append((item, prepared()))
        except ValueError as exc:
            seen.append((item, str(exc)))
    assert seen == [(0, 0), (1, 10), (2, "item 2 cannot be built"), (3, 30)]
    assert list(ahead([], prepare)) == []


def test_the_next_item_is_prepared_while_the_caller_holds_this_one_and_never_two_ahead() -> None:
    started = {i: threading.Event() for i in range(4)}
    consumed: list[int] = []
    most_ahead = 0

    def prepare(item: int) -> int:
        nonlocal most_ahead
        started[item].set()
        most_ahead = max(most_ahead, item - len(consumed))
        return item

    for item, prepared in ahead([0, 1, 2, 3], prepare):
        assert prepared() == item
        if item + 1 < 4:  # the next one starts before this one is done with
            assert started[item + 1].wait(timeout=30)
        consumed.append(item)
    assert most_ahead == 1


def test_leaving_early_stops_preparing() -> None:
    prepared_items: list[int] = []

    def prepare(item: int) -> int:
        prepared_items.append(item)
        return item

    for item, prepared in ahead(list(range(10)), prepare):
        prepared()
        if item == 3:
            break
    assert prepared_items == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("items", [[7], [7, 8]])
def test_short_lists(items: list[int]) -> None:
    assert [(i, p()) for i, p in ahead(items, lambda i: -i)] == [(i, -i) for i in items]


def test_leaving_the_loop_waits_for_the_build_in_hand_where_a_signal_stops_nothing_sooner() -> None:
    """A second Ctrl-C while publish left the loop was raised inside the wait for the build in hand:
    "Exception ignored in: <generator object ahead>" and a traceback on stderr (a review). That wait now
    holds ``stopping.at_boundary_only``: the handler says the stop comes at the boundary and raises nothing."""
    import time

    from queuelake import stopping

    seen: list[str | None] = []

    def prepare(item: int) -> int:
        time.sleep(0.3)
        seen.append(stopping.only_at_boundary())
        return item

    items = ahead([1, 2, 3], prepare)
    item, built = next(items)
    assert built() == item == 1
    items.close()  # item 2's build is in hand
    assert seen == [None, "the batch being built ahead"] and stopping.only_at_boundary() is None
