"""app.stopping_connections: a stopping worker lets a new connection's first request in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app import stopping_connections
from app.stopping_connections import answer_first_request


class Transport:
    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing


class Protocol(asyncio.Protocol):
    """uvicorn's HTTP protocol as far as shutdown goes: a `cycle` once a head is parsed."""

    def __init__(self) -> None:
        self.cycle: Any = None
        self.transport: Any = Transport()
        self.shutdowns: list[float] = []

    def shutdown(self) -> None:
        self.shutdowns.append(asyncio.get_running_loop().time())


def test_shutdown_waits_for_the_first_request_to_begin() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        protocol = answer_first_request(Protocol(), loop)
        protocol.shutdown()
        await asyncio.sleep(0.05)
        assert protocol.shutdowns == []  # not closed under a request on its way
        protocol.cycle = object()  # its head has arrived
        await asyncio.sleep(0.05)
        assert len(protocol.shutdowns) == 1  # uvicorn's: answer, then close

    asyncio.run(scenario())


class Cycle:
    def __init__(self, response_complete: bool) -> None:
        self.response_complete = response_complete


def test_a_connection_answering_a_request_is_shut_down_at_once() -> None:
    async def scenario() -> None:
        protocol = answer_first_request(Protocol(), asyncio.get_running_loop())
        protocol.cycle = Cycle(response_complete=False)
        protocol.shutdown()
        assert len(protocol.shutdowns) == 1

    asyncio.run(scenario())


def test_an_idle_keep_alive_connection_waits_for_its_next_request() -> None:
    """An operations trial: SIGTERM reset about one request per busy keep-alive connection,
    sent as the idle connection was closed."""

    async def scenario() -> None:
        protocol = answer_first_request(Protocol(), asyncio.get_running_loop())
        protocol.stopping = False
        protocol.cycle = Cycle(response_complete=True)  # the last answer went out
        protocol.shutdown()
        assert protocol.stopping is True  # the next request's answer says Connection: close
        await asyncio.sleep(0.05)
        assert protocol.shutdowns == []
        protocol.cycle = Cycle(response_complete=False)  # the next request began
        await asyncio.sleep(0.05)
        assert len(protocol.shutdowns) == 1

    asyncio.run(scenario())


def test_an_idle_keep_alive_connection_is_shut_down_after_its_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stopping_connections, "NEXT_REQUEST_GRACE_S", 0.05)

    async def scenario() -> None:
        protocol = answer_first_request(Protocol(), asyncio.get_running_loop())
        protocol.cycle = Cycle(response_complete=True)
        protocol.shutdown()
        await asyncio.sleep(0.2)
        assert len(protocol.shutdowns) == 1

    asyncio.run(scenario())


def test_a_connection_that_sends_nothing_is_shut_down_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stopping_connections, "FIRST_REQUEST_GRACE_S", 0.05)

    async def scenario() -> None:
        protocol = answer_first_request(Protocol(), asyncio.get_running_loop())
        protocol.shutdown()
        await asyncio.sleep(0.2)
        assert len(protocol.shutdowns) == 1

    asyncio.run(scenario())


def test_other_protocols_are_left_as_they_are() -> None:
    plain = asyncio.Protocol()
    loop = asyncio.new_event_loop()
    try:
        assert answer_first_request(plain, loop) is plain
    finally:
        loop.close()
