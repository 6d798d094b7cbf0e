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


def one_request(port: int, timeout: float = 10.0) -> Attempt:
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(rerank_request(port))
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
    """`clients` threads, each sending a request on a new connection every `pause` seconds
    (0: as fast as answers come) until stopped."""

    port: int
    clients: int = 4
    pause: float = 0.0
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
            self.attempts.append(one_request(self.port))
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
