"""Clients that open a new connection for every request, and what each attempt ended in.

A stop or a worker restart is judged by what such clients see: connection refused (which
clients and load balancers retry safely), an answer, or a loss (a reset of a connection the
kernel had accepted, a connection closed without an answer, a timeout). Raw sockets, so the
outcome is the socket's own, not an HTTP library's retry.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

RERANK_BODY = (
    b'{"candidates": [{"id": "a", "features": {"f0": 0.1, "f1": 0.2}},'
    b' {"id": "b", "features": {"f0": 0.3, "f2": 0.1}}]}'
)


def rerank_request(port: int) -> bytes:
    return (
        b"POST /rerank HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (port, len(RERANK_BODY), RERANK_BODY)
    )


@dataclass
class Attempt:
    at: float  # monotonic time the connection was opened
    outcome: str  # "200", "503 <body>", "refused", "reset", "closed", "timeout"


def readyz_request(port: int) -> bytes:
    return b"GET /readyz HTTP/1.1\r\nhost: 127.0.0.1:%d\r\nconnection: close\r\n\r\n" % port


def one_request(
    port: int, timeout: float = 10.0, request: Callable[[int], bytes] = rerank_request
) -> Attempt:
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(request(port))
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
    except ConnectionRefusedError:
        return Attempt(started, "refused")
    except ConnectionResetError:
        return Attempt(started, "reset")
    except TimeoutError:
        return Attempt(started, "timeout")
    if not answer:
        return Attempt(started, "closed")
    status = answer.split(b" ", 2)[1].decode()
    if status == "200":
        return Attempt(started, status)
    body = answer.partition(b"\r\n\r\n")[2].decode()
    return Attempt(started, f"{status} {body}")


@dataclass
class Load:
    """`clients` threads, each sending a request (a /rerank unless told) on a new connection
    every `pause` seconds (0: as fast as answers come) until stopped."""

    port: int
    clients: int = 4
    pause: float = 0.0
    request: Callable[[int], bytes] = rerank_request
    attempts: list[Attempt] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for _ in range(self.clients):
            thread = threading.Thread(target=self._client, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def _client(self) -> None:
        while not self._stop.is_set():
            self.attempts.append(one_request(self.port, request=self.request))
            if self.pause:
                self._stop.wait(self.pause)

    def outcomes(self, since: float = 0.0) -> Counter[str]:
        return Counter(a.outcome for a in list(self.attempts) if a.at >= since)

    def lost(self, since: float = 0.0) -> list[tuple[float, str]]:
        """Attempts that were neither answered 200 nor refused: (seconds after `since`, what)."""
        return [
            (round(a.at - since, 3), a.outcome)
            for a in list(self.attempts)
            if a.at >= since and a.outcome not in ("200", "refused")
        ]


def keep_alive_request(port: int) -> bytes:
    return (
        b"POST /rerank HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (port, len(RERANK_BODY), RERANK_BODY)
    )


def _answer(sock: socket.socket, buffered: bytes) -> tuple[bytes, bytes, bool]:
    """One HTTP answer read off `sock` (after `buffered`): (head and body, bytes past it,
    whether it said Connection: close). Raises ConnectionError on EOF before it is whole."""
    data = buffered
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionAbortedError("closed before an answer")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(
        int(v) for k, _, v in (h.partition(b": ") for h in lines) if k == b"content-length"
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionAbortedError("closed inside an answer")
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:], b"connection: close" in lines


@dataclass
class KeepAliveLoad(Load):
    """Like Load, but each client sends its requests back to back on one connection, and opens
    another only when an answer said `Connection: close` (or the connection was refused)."""

    def _client(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except ConnectionRefusedError:
                self.attempts.append(Attempt(started, "refused"))
                self._stop.wait(0.01)
                continue
            with sock:
                self._requests(sock)

    def _requests(self, sock: socket.socket) -> None:
        buffered = b""
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                sock.sendall(keep_alive_request(self.port))
                answer, buffered, closing = _answer(sock, buffered)
            except ConnectionResetError:
                self.attempts.append(Attempt(started, "reset"))
                return
            except (ConnectionAbortedError, BrokenPipeError):
                self.attempts.append(Attempt(started, "closed"))
                return
            except TimeoutError:
                self.attempts.append(Attempt(started, "timeout"))
                return
            status = answer.split(b" ", 2)[1].decode()
            self.attempts.append(Attempt(started, status if status == "200" else f"{status}"))
            if closing:
                return
