"""A lean blocking HTTP/1.1 client for latency benchmarks: one keep-alive connection, the
request written in one send, the answer read by its Content-Length.

httpx, the other client the benchmarks use, spends about 1-2 ms of Python per 1,000-candidate
/rerank exchange on this 2-core machine (h11's parsing, its pool and models), the same for every
request form; a frontend in Go or Java spends far less. Timing both shows what the server
costs apart from the client.
"""

from __future__ import annotations

import socket


class LeanClient:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
        self.host = host
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """(status, answer body) of a JSON POST."""
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        self.sock.sendall(head + body)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            buffer += self._recv()
        answer_head, _, rest = buffer.partition(b"\r\n\r\n")
        length = 0
        for line in answer_head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        chunks, got = [rest], len(rest)
        while got < length:
            chunk = self._recv()
            chunks.append(chunk)
            got += len(chunk)
        return int(answer_head[9:12]), b"".join(chunks)

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()
