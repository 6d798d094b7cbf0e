"""Health probes on their own port, answered by a thread: `/livez`, `/readyz`, `/metrics`.

Under overload the event loop has a backlog (big bodies to read, requests to shed), and a
probe sent to the service's port waits behind it: seconds, enough for a liveness probe's
timeout to restart a healthy pod and push its traffic onto the others. A thread with its own
listening socket is scheduled by the interpreter at least every switch interval (5 ms by
default) however busy the loop is, so probes answer in milliseconds. It reads the same state
the routes do (app.health): liveness is "the loop still runs", readiness "a model is loaded
and this worker is not shedding".

Each worker process of `ltr serve --workers N` binds the same port with SO_REUSEPORT; the
kernel gives each probe connection to one of them.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from app import metrics
from app.health import Answer

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0  # a probe that does not send its request line in time is dropped


class _Listener(ThreadingHTTPServer):
    allow_reuse_address = True
    allow_reuse_port = True
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer's own asks DNS for the host's full name: a stall for nothing here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


class ProbeServer:
    """Serves `livez()` and `readyz()` answers and the metrics exposition on `host:port`."""

    def __init__(
        self,
        host: str,
        port: int,
        livez: Callable[[], Answer],
        readyz: Callable[[], Answer],
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, bytes, str]]] = {
            "/livez": lambda: _json(livez()),
            "/readyz": lambda: _json(readyz()),
            "/metrics": _metrics,
        }

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_S
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm the second waits
            # for the client's delayed ACK, 40 ms on Linux.
            disable_nagle_algorithm = True

            def do_HEAD(self) -> None:
                self._answer(with_body=False)

            def do_GET(self) -> None:
                self._answer(with_body=True)

            def _answer(self, with_body: bool) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, body, kind = 404, b'{"detail":"not found"}', "application/json"
                else:
                    try:
                        status, body, kind = route()
                    except Exception as exc:  # a probe must get an answer, never a hang
                        log.exception("probe %s failed", self.path)
                        status, body, kind = _json((503, {"detail": str(exc)}))
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None  # probes every few seconds would flood the access log

        self.server = _Listener((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="probe-server", daemon=True
        )

    def start(self) -> ProbeServer:
        self._thread.start()
        log.info("health probes also on port %d", self.port)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


def _json(answer: Answer) -> tuple[int, bytes, str]:
    status, body = answer
    return status, orjson.dumps(body), "application/json"


def _metrics() -> tuple[int, bytes, str]:
    body, content_type = metrics.exposition()
    return 200, body, content_type
