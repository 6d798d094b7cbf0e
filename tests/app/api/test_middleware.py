"""The service middleware's cap on buffered bodies: room waited for, in order, then 503."""

from __future__ import annotations

import asyncio
from typing import Any

from app.api.middleware import FIRST_READ_BYTES, LANE_STATE, ServiceMiddleware

BODY = 300_000


def request_scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/rerank",
        "root_path": "",
        "headers": [(b"content-length", str(BODY).encode())],
        "state": {},
    }


class Exchange:
    """One request through the middleware: its body at once, the status it got."""

    def __init__(self) -> None:
        self.status: int | None = None

    async def receive(self) -> dict[str, Any]:
        return {"type": "http.request", "body": b"x" * BODY, "more_body": False}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]


def middleware(release: asyncio.Event, wait: float) -> ServiceMiddleware:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await release.wait()  # holds its body until the test lets it answer
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    # Room for two bodies of BODY bytes, not three.
    return ServiceMiddleware(
        app, max_body_bytes=BODY, max_buffered=2 * BODY + 1, buffer_wait=wait, wait_most_bytes=BODY
    )


async def _three(wait: float, answer_after: float | None) -> list[int | None]:
    """Three requests at once; the first two answer after `answer_after` s (None: never)."""
    release = asyncio.Event()
    mw = middleware(release, wait)
    exchanges = [Exchange() for _ in range(3)]
    tasks = [asyncio.create_task(mw(request_scope(), e.receive, e.send)) for e in exchanges]  # type: ignore[arg-type]
    if answer_after is not None:
        await asyncio.sleep(answer_after)
        release.set()
    await asyncio.wait(tasks, timeout=0.5)
    release.set()
    await asyncio.gather(*tasks)
    assert mw.buffered == 0 and not mw._waiting  # nobody left behind in the queue
    return [e.status for e in exchanges]


def test_a_body_past_the_cap_waits_for_room_and_is_served() -> None:
    assert asyncio.run(_three(wait=0.2, answer_after=0.02)) == [200, 200, 200]


def test_room_that_does_not_come_in_time_is_a_503() -> None:
    assert asyncio.run(_three(wait=0.02, answer_after=None)) == [200, 200, 503]


def test_without_a_wait_the_cap_refuses_at_once() -> None:
    assert asyncio.run(_three(wait=0.0, answer_after=0.02)) == [200, 200, 503]


def test_waiters_take_the_room_in_arrival_order() -> None:
    async def scenario() -> list[int]:
        release = asyncio.Event()
        mw = middleware(release, wait=1.0)
        order: list[int] = []
        holders = [Exchange() for _ in range(2)]
        tasks = [asyncio.create_task(mw(request_scope(), e.receive, e.send)) for e in holders]  # type: ignore[arg-type]
        await asyncio.sleep(0.01)

        async def waiter(n: int) -> None:
            e = Exchange()

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    order.append(n)

            await mw(request_scope(), e.receive, send)  # type: ignore[arg-type]

        waiters = []
        for n in range(3):
            waiters.append(asyncio.create_task(waiter(n)))
            await asyncio.sleep(0.005)
        assert len(mw._waiting) == 3
        release.set()
        await asyncio.gather(*tasks, *waiters)
        return order

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_a_request_that_fits_is_not_held_behind_one_waiting() -> None:
    async def scenario() -> int | None:
        release = asyncio.Event()
        mw = middleware(release, wait=1.0)
        holders = [Exchange() for _ in range(2)]
        tasks = [asyncio.create_task(mw(request_scope(), e.receive, e.send)) for e in holders]  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(mw(request_scope(), Exchange().receive, Exchange().send))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        small = Exchange()
        scope = request_scope()
        scope["headers"] = [(b"content-length", b"1")]

        async def one_byte() -> dict[str, Any]:
            return {"type": "http.request", "body": b"x", "more_body": False}

        assert len(mw._waiting) == 1
        release.set()  # the small one fits in what is left: in at once, past the one waiting
        await asyncio.wait_for(mw(scope, one_byte, small.send), 0.5)  # type: ignore[arg-type]
        await asyncio.gather(*tasks, waiting)
        return small.status

    assert asyncio.run(scenario()) == 200


def test_bodies_past_the_read_ahead_never_wait() -> None:
    async def scenario() -> list[int | None]:
        release = asyncio.Event()
        mw = middleware(release, wait=1.0)
        mw.wait_most_bytes = BODY - 1
        exchanges = [Exchange() for _ in range(3)]
        tasks = [asyncio.create_task(mw(request_scope(), e.receive, e.send)) for e in exchanges]  # type: ignore[arg-type]
        await asyncio.wait(tasks, timeout=0.05)
        statuses = [e.status for e in exchanges]
        release.set()
        await asyncio.gather(*tasks)
        return statuses

    assert asyncio.run(scenario()) == [None, None, 503]  # refused at once, the others held


def test_bodies_waiting_for_a_reception_lane_hold_only_their_first_read() -> None:
    """Ten 1 MB bodies wait in their sockets for reception lanes under a 4 MB cap: each holds
    what was read with its head, none is refused; once a lane opens, its whole body counts."""
    big = 1_000_000

    async def scenario() -> tuple[list[int | None], int, int]:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        mw = ServiceMiddleware(app, max_body_bytes=big, max_buffered=4 * big)
        loop = asyncio.get_running_loop()
        lanes = [loop.create_future() for _ in range(10)]
        exchanges = [Exchange() for _ in range(10)]

        async def one(lane: asyncio.Future[None], exchange: Exchange) -> None:
            scope = request_scope()
            scope["headers"] = [(b"content-length", str(big).encode())]
            scope["state"][LANE_STATE] = lane

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"x" * big, "more_body": False}

            await mw(scope, receive, exchange.send)  # type: ignore[arg-type]

        pairs = zip(lanes, exchanges, strict=True)
        tasks = [asyncio.create_task(one(lane, e)) for lane, e in pairs]
        await asyncio.sleep(0.01)
        waiting_held = mw.buffered
        lanes[0].set_result(None)
        await asyncio.sleep(0.01)
        after_one = mw.buffered
        for lane in lanes[1:]:
            lane.set_result(None)
        await asyncio.gather(*tasks)
        return [e.status for e in exchanges], waiting_held, after_one

    statuses, waiting_held, after_one = asyncio.run(scenario())
    assert waiting_held == 10 * FIRST_READ_BYTES
    assert after_one == 9 * FIRST_READ_BYTES  # its whole body counted, then given back
    assert statuses == [200] * 10
