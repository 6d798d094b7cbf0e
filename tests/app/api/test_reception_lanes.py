"""Reception lanes: which waiting bodies are read next, and that none waits forever."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from app.api.reception_lanes import ReceptionLanes


class Body:
    """A reader that records when it was told to read on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.resumed = 0

    def resume_body(self) -> None:
        self.resumed += 1

    def __repr__(self) -> str:
        return self.name


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def lanes(oldest: int = 1, room: bool = False, **kwargs: float) -> ReceptionLanes:
    made = ReceptionLanes(oldest_slots=oldest, **kwargs)  # type: ignore[arg-type]
    made.room = lambda: room
    return made


def test_bodies_take_free_lanes_and_the_rest_wait() -> None:
    async def test() -> None:
        gate = lanes(oldest=2)
        a, b, c = Body("a"), Body("b"), Body("c")
        assert gate.enter(a) and gate.enter(b)
        assert not gate.enter(c)
        assert gate.waiting == 1 and c.resumed == 0

    run(test)


def test_an_oldest_lane_takes_the_oldest_waiting() -> None:
    async def test() -> None:
        gate = lanes(oldest=1)
        a, b, c, d = (Body(n) for n in "abcd")
        assert gate.enter(a)
        assert not gate.enter(b) and not gate.enter(c) and not gate.enter(d)
        gate.leave(a)  # its body is in
        assert (b.resumed, c.resumed, d.resumed) == (1, 0, 0)
        gate.leave(b)
        assert (c.resumed, d.resumed) == (1, 0)
        gate.leave(c)
        assert d.resumed == 1 and gate.waiting == 0

    run(test)


def test_the_fresh_lane_takes_the_newest_while_admission_has_room() -> None:
    async def test() -> None:
        room = [False]
        gate = ReceptionLanes(oldest_slots=1)
        gate.room = lambda: room[0]
        a, b, c, d = (Body(n) for n in "abcd")
        assert gate.enter(a)  # the oldest lane: no room to score
        assert not gate.enter(b) and not gate.enter(c) and not gate.enter(d)
        room[0] = True
        gate.kick()  # admission gave rows back
        assert (b.resumed, c.resumed, d.resumed) == (0, 0, 1)  # the newest
        gate.kick()
        assert c.resumed == 0  # one fresh lane
        gate.leave(a)
        assert b.resumed == 1  # the oldest lane: the oldest

    run(test)


def test_a_fresh_request_takes_the_fresh_lane_at_once_when_there_is_room() -> None:
    async def test() -> None:
        gate = lanes(oldest=1, room=True)
        a, b, c = Body("a"), Body("b"), Body("c")
        assert gate.enter(a) and gate.enter(b)  # the fresh lane, then the oldest
        assert not gate.enter(c)

    run(test)


def test_a_waiting_request_that_is_answered_or_goes_away_reads_on_and_leaves_the_queue() -> None:
    async def test() -> None:
        gate = lanes(oldest=1)
        a, b, c = Body("a"), Body("b"), Body("c")
        gate.enter(a)
        gate.enter(b)
        gate.enter(c)
        gate.leave(b)  # answered early (a 413, a full buffer) or the client left
        assert b.resumed == 1 and gate.waiting == 1
        gate.leave(b)  # again: nothing
        assert b.resumed == 1
        gate.leave(a)
        assert c.resumed == 1 and gate.waiting == 0

    run(test)


def test_a_slow_body_loses_its_lane_after_its_slice_and_reads_on() -> None:
    async def test() -> None:
        gate = lanes(oldest=1, slice_s=0.01)
        slow, next_one = Body("slow"), Body("next")
        gate.enter(slow)
        gate.enter(next_one)
        await asyncio.sleep(0.05)
        assert next_one.resumed == 1  # the lane went on
        assert slow.resumed == 0  # never paused: it reads on, outside the lanes
        gate.leave(slow)  # its body in at last: no lane to give back
        assert gate.waiting == 0

    run(test)


def test_no_request_waits_past_the_longest_wait() -> None:
    async def test() -> None:
        clock = Clock()
        gate = ReceptionLanes(oldest_slots=1, slice_s=60.0, max_wait_s=0.02, clock=clock)
        holder, old, new = Body("holder"), Body("old"), Body("new")
        gate.enter(holder)  # holds its lane for the whole test
        gate.enter(old)
        clock.now = 0.015
        gate.enter(new)
        clock.now = 0.021
        await asyncio.sleep(0.03)
        assert (old.resumed, new.resumed) == (1, 0)  # only the one past its wait
        clock.now = 0.036
        await asyncio.sleep(0.03)
        assert new.resumed == 1 and gate.waiting == 0

    run(test)


def test_disabled_lanes_let_every_body_read() -> None:
    async def test() -> None:
        gate = lanes(oldest=1)
        gate.enabled = False
        assert all(gate.enter(Body(str(i))) for i in range(10))
        assert gate.waiting == 0

    run(test)
