"""The protocol's body read-ahead, fed bytes as a socket would deliver them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.api.http_protocol import HeaderTimeoutProtocol

PIECE = 256 * 1024  # what uvloop reads from a socket at most at once
KIB = 1024


class Transport(asyncio.Transport):
    """Records what the protocol asks of its socket."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses = 0
        self.paused = False
        self.written = bytearray()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5000)}.get(name)

    def pause_reading(self) -> None:
        self.pauses += 1
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        pass


async def _exchange(
    body: bytes, read_ahead: int, monkeypatch: pytest.MonkeyPatch, method: bytes = b"POST"
) -> tuple[Transport, list[bytes]]:
    """Head and body arrive in `PIECE`s before the application runs; the application then reads
    the whole body. The transport, and the chunks the application received."""
    monkeypatch.setattr(HeaderTimeoutProtocol, "header_timeout", 5.0)
    monkeypatch.setattr(HeaderTimeoutProtocol, "read_ahead_most", read_ahead)
    chunks: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            chunks.append(message["body"])
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = Config(app=app, lifespan="off", log_level="warning")
    protocol = HeaderTimeoutProtocol(config, ServerState(), {})
    transport = Transport()
    protocol.connection_made(transport)
    head = method + b" /rerank HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body)
    data = head + body
    while data and not transport.paused:
        protocol.data_received(data[:PIECE])
        data = data[PIECE:]
    for _ in range(1000):  # the application's turns; reading resumes when it asks for more
        await asyncio.sleep(0)
        while data and not transport.paused:
            protocol.data_received(data[:PIECE])
            data = data[PIECE:]
        if transport.written:
            break
    protocol.connection_lost(None)
    return transport, chunks


def test_a_body_within_the_read_ahead_is_read_without_pausing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = bytes(range(256)) * (6 * KIB)  # 1.5 MiB
    transport, chunks = asyncio.run(_exchange(body, 4 * KIB * KIB, monkeypatch))
    assert transport.pauses == 0
    assert b"".join(chunks) == body and len(chunks) == 1
    assert transport.written.startswith(b"HTTP/1.1 204")


def test_uvicorns_own_limit_pauses_after_every_read(monkeypatch: pytest.MonkeyPatch) -> None:
    body = bytes(range(256)) * (6 * KIB)
    transport, chunks = asyncio.run(_exchange(body, 64 * KIB, monkeypatch))
    assert transport.pauses >= 5  # one hand-off to the application per socket read
    assert b"".join(chunks) == body and len(chunks) >= 6


def test_a_body_past_the_read_ahead_pauses_once_that_much_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = b"x" * (3 * KIB * KIB)
    transport, chunks = asyncio.run(_exchange(body, KIB * KIB, monkeypatch))
    assert 1 <= transport.pauses <= 3
    assert len(chunks[0]) > KIB * KIB  # the first chunk holds what was read ahead
    assert b"".join(chunks) == body


def test_a_body_the_service_does_not_read_gets_uvicorns_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The middleware reads (and reserves) only POST, PUT and PATCH bodies: a GET's body is not
    read ahead, so it cannot hold unreserved megabytes per connection."""
    body = bytes(range(256)) * (6 * KIB)
    transport, chunks = asyncio.run(_exchange(body, 4 * KIB * KIB, monkeypatch, b"GET"))
    assert transport.pauses >= 5
    assert b"".join(chunks) == body
