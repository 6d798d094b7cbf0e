"""Shed answers take turns with the loop's other work (app.api.shed_turns): one per turn while
none is urgent, in arrival order, back to back while the oldest is due soon or late; results and
errors reach their requests; a request gone away is skipped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from itertools import pairwise

import pytest
from prometheus_client import REGISTRY

from app.api.shed_turns import ShedTurns


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _run_with_ticker(
    turns: ShedTurns, dues: list[float], clock: Clock | None = None, cost: float = 0.0
) -> tuple[list[int], list[int]]:
    """(answer order, the ticker's count when each answer ran): the ticker stands for an
    admitted request's hand-backs, one step per turn of the loop. Each answer moves `clock`
    on by `cost`."""
    ticks = 0
    seen: list[int] = []
    order: list[int] = []
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    def answer(i: int) -> Callable[[], Awaitable[int]]:
        async def run() -> int:
            if clock is not None:
                clock.now += cost
            order.append(i)
            seen.append(ticks)
            return i

        return run

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    results = await asyncio.gather(*(turns.run(answer(i), due) for i, due in enumerate(dues)))
    stop = True
    await task
    assert results == list(range(len(dues)))
    return order, seen


def test_one_answer_per_turn_in_arrival_order() -> None:
    clock = Clock()
    turns = ShedTurns(urgent_s=0.05, clock=clock)
    order, seen = asyncio.run(_run_with_ticker(turns, [clock.now + 0.1] * 6))
    assert order == list(range(6))
    assert all(b > a for a, b in pairwise(seen))  # the ticker ran between


def test_answers_due_soon_or_late_go_back_to_back() -> None:
    """A late answer is not queued behind more turns: under an open loop's overload the
    loop sheds more requests than it has turns, and one per turn let the late ones wait
    without bound."""
    clock = Clock()
    for due in (clock.now + 0.01, clock.now - 0.01, clock.now - 5.0):
        _, seen = asyncio.run(_run_with_ticker(ShedTurns(urgent_s=0.05, clock=clock), [due] * 4))
        assert len(set(seen[1:])) == 1  # after the first, no turn in between


def test_a_late_answer_goes_before_answers_not_yet_urgent() -> None:
    clock = Clock()
    turns = ShedTurns(urgent_s=0.05, clock=clock)
    dues = [clock.now + 0.2] * 3 + [clock.now - 0.1]
    order, seen = asyncio.run(_run_with_ticker(turns, dues))
    assert order == [3, 0, 1, 2]  # earliest due first
    assert all(b > a for a, b in pairwise(seen))  # then one per turn: none is urgent


def test_a_queue_that_one_per_turn_would_not_answer_in_time_goes_back_to_back() -> None:
    """Each answer takes 10 ms. Of eight due in 120 ms, the seven left after the first would
    take 70 ms, more than the 110 ms left less the 50 ms margin: back to back, though none is
    within 50 ms of its due time. Of two, the one left fits: one per turn."""
    clock = Clock()
    turns = ShedTurns(urgent_s=0.05, clock=clock)
    _, first = asyncio.run(_run_with_ticker(turns, [clock.now + 1.0], clock, 0.01))
    assert len(first) == 1  # it learnt what an answer takes
    _, seen = asyncio.run(_run_with_ticker(turns, [clock.now + 0.12] * 8, clock, 0.01))
    assert len(set(seen[1:])) == 1  # no turn in between
    _, seen = asyncio.run(_run_with_ticker(turns, [clock.now + 0.12] * 2, clock, 0.01))
    assert seen[1] > seen[0]


def test_errors_reach_their_request_and_a_cancelled_one_is_skipped() -> None:
    async def scenario() -> list[str]:
        turns = ShedTurns()
        ran: list[str] = []

        async def ok() -> str:
            ran.append("ok")
            return "ok"

        async def bad() -> str:
            ran.append("bad")
            raise ValueError("no ids")

        async def gone() -> str:
            ran.append("gone")
            return "gone"

        first = asyncio.ensure_future(turns.run(ok, 0.0))
        second = asyncio.ensure_future(turns.run(gone, 0.0))
        third = asyncio.ensure_future(turns.run(bad, 0.0))
        await asyncio.sleep(0)  # all three queued
        second.cancel()
        assert await first == "ok"
        with pytest.raises(ValueError, match="no ids"):
            await third
        return ran

    assert asyncio.run(scenario()) == ["ok", "bad"]


def test_the_earliest_due_goes_first_and_equal_dues_keep_arrival_order() -> None:
    """A request shed after waiting in admission's queue has less of its budget left than
    those shed on arrival just before it: it is answered ahead of them."""
    clock = Clock()
    turns = ShedTurns(urgent_s=0.001, clock=clock)  # nothing urgent: one answer per turn
    dues = [clock.now + 0.09, clock.now + 0.09, clock.now + 0.02, clock.now + 0.09]
    order, _ = asyncio.run(_run_with_ticker(turns, dues))
    assert order == [2, 0, 1, 3]


def test_the_wait_for_a_turn_is_measured() -> None:
    """Six answers one per turn: the clock moves 10 ms a turn, so the last waits ~50 ms."""
    clock = Clock()
    turns = ShedTurns(urgent_s=0.001, clock=clock)

    def observed() -> tuple[float, float]:
        count = REGISTRY.get_sample_value("ltr_shed_answer_wait_seconds_count") or 0.0
        total = REGISTRY.get_sample_value("ltr_shed_answer_wait_seconds_sum") or 0.0
        return count, total

    async def scenario() -> None:
        async def ticker() -> None:
            while True:
                clock.now += 0.01
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())

        async def answer() -> None:
            return None

        await asyncio.gather(*(turns.run(answer, clock.now + 1.0) for _ in range(6)))
        task.cancel()

    count, total = observed()
    asyncio.run(scenario())
    count_after, total_after = observed()
    assert count_after - count == 6
    assert 0.1 <= total_after - total <= 0.3  # 0 + 10 + ... + 50 ms, give or take a turn
