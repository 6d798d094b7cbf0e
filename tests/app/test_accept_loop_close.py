"""app.accept_loop: closing a server takes in the connections the kernel has queued."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import cast

import pytest

from app.accept_loop import new_event_loop

QUEUED = 20


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)
        self.transport.close()


def test_connections_queued_at_the_close_are_served_not_reset() -> None:
    """The kernel completes handshakes on its own: before, a close left them queued and reset
    them (the last holder of the listening socket closing), after their clients had sent."""
    with contextlib.closing(new_event_loop()) as loop:
        queued_connections_are_answered(loop)


def queued_connections_are_answered(loop: asyncio.AbstractEventLoop) -> None:
    server = loop.run_until_complete(loop.create_server(Echo, "127.0.0.1", 0))
    port = int(server.sockets[0].getsockname()[1])
    # The loop does not run meanwhile: all of these wait in the accept queue, sent.
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(QUEUED)]
    for i, client in enumerate(clients):
        client.sendall(b"%02d" % i)
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.run_until_complete(asyncio.sleep(0.2))  # the taken-in connections are served
    try:
        for i, client in enumerate(clients):
            assert client.recv(2) == b"%02d" % i
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        for client in clients:
            client.close()


def test_a_server_closed_before_it_served_does_not_block() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0, start_serving=False)
        socket.create_connection(server.sockets[0].getsockname(), timeout=2).close()
        server.close()  # its socket was never made non-blocking: no accept on it
        await server.wait_closed()

    with contextlib.closing(new_event_loop()) as loop:
        loop.run_until_complete(scenario(loop))
