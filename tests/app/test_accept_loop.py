"""app.accept_loop: a busy loop still takes in every waiting connection within a few turns."""

from __future__ import annotations

import asyncio
import socket
import ssl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, cast

import pytest
import uvicorn
import uvloop

from app.accept_loop import ACCEPTS_PER_TURN, AcceptingServer, new_event_loop
from app.api.http_protocol import uvicorn_options
from app.settings import Settings

WAITING = 300  # connections completed by the kernel before the loop runs
BUSY_TURN_S = 0.01  # each turn of the loop holds it this long, as under overload


class Counting(asyncio.Protocol):
    made: ClassVar[list[asyncio.BaseTransport]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counting.made.append(transport)


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = new_event_loop()
    try:
        yield made
    finally:
        made.close()


def test_the_loop_is_uvloop_with_its_own_tcp_server(loop: asyncio.AbstractEventLoop) -> None:
    assert isinstance(loop, uvloop.Loop)

    async def start() -> asyncio.AbstractServer:
        return await loop.create_server(Echo, "127.0.0.1", 0)

    server = loop.run_until_complete(start())
    assert isinstance(server, AcceptingServer)
    assert server.is_serving() and server.get_loop() is loop
    server.close()
    loop.run_until_complete(server.wait_closed())


def test_a_busy_loop_accepts_every_waiting_connection_within_a_few_turns(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """libuv takes one connection per turn; at 10 ms a turn, 300 waiting connections would
    need 300 turns (3 s). Here: as many turns as ACCEPTS_PER_TURN fits into 300, plus the
    turn each connection's transport is made in."""
    Counting.made = []

    async def start() -> asyncio.AbstractServer:
        return await loop.create_server(Counting, "127.0.0.1", 0, backlog=1024)

    server = loop.run_until_complete(start())
    port = server.sockets[0].getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(WAITING)]
    try:
        turns = 0

        async def busy_turns() -> None:
            nonlocal turns
            while len(Counting.made) < WAITING and turns < 200:
                time.sleep(BUSY_TURN_S)  # the point: each turn holds the loop
                turns += 1
                await asyncio.sleep(0)

        loop.run_until_complete(busy_turns())
        assert len(Counting.made) == WAITING
        assert turns <= -(-WAITING // ACCEPTS_PER_TURN) + 3
    finally:
        for transport in Counting.made:
            transport.close()
        for client in clients:
            client.close()
        server.close()
        loop.run_until_complete(server.wait_closed())


def test_connections_are_served_and_close_stops_listening(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def scenario() -> int:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = int(server.sockets[0].getsockname()[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
        server.close()
        await server.wait_closed()
        assert not server.is_serving()
        return port

    port = loop.run_until_complete(scenario())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_listening_socket_given_to_it_is_served(loop: asyncio.AbstractEventLoop) -> None:
    """uvicorn's workers share the sockets their parent bound."""
    bound = socket.create_server(("127.0.0.1", 0))

    async def scenario() -> None:
        server = await loop.create_server(Echo, sock=bound, backlog=64)
        assert server.sockets == (bound,)
        reader, writer = await asyncio.open_connection(*bound.getsockname())
        writer.write(b"pong")
        assert await reader.readexactly(4) == b"pong"
        writer.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(scenario())
    assert bound.fileno() == -1


def test_tls_and_unix_servers_are_uvloops_own(loop: asyncio.AbstractEventLoop) -> None:
    path = Path(tempfile.mkdtemp()) / "s.sock"
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)

    async def scenario() -> None:
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(path))
        for server in (
            await loop.create_server(Echo, sock=unix),
            await loop.create_server(Echo, "127.0.0.1", 0, ssl=context),
        ):
            assert not isinstance(server, AcceptingServer)
            server.close()
            await server.wait_closed()

    loop.run_until_complete(scenario())


@pytest.mark.parametrize("greedy", [True, False])
def test_ltr_serve_runs_uvicorn_on_it_unless_turned_off(greedy: bool) -> None:
    options = uvicorn_options(Settings(accept_greedily=greedy, access_log=greedy))
    # uvicorn's own access line, without the request id, never: the service writes its own
    # when asked (tests/integration/test_access_log.py), and none by default.
    assert options["access_log"] is False and Settings().access_log is False
    config = uvicorn.Config("app.main:create_app", factory=True, **options)
    factory = config.get_loop_factory()
    assert factory is not None
    made = factory()
    try:
        assert isinstance(made, uvloop.Loop)
        assert (type(made) is not uvloop.Loop) is greedy
    finally:
        made.close()
