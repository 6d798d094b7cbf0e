"""Health probes on their own port, answered by a thread: `/livez`, `/readyz`, `/metrics`.

Under overload the event loop has a backlog (big bodies to read, requests to shed), and a
probe sent to the service's port waits behind it: seconds, enough for a liveness probe's
timeout to restart a healthy pod and push its traffic onto the others. A thread with its own
listening socket gets the GIL at the loop thread's next switch point: within the switch
interval (LTR_GIL_SWITCH_INTERVAL_MS) while that thread runs Python code, only after a long
call into compiled code that keeps the GIL (decoding a very large body). So probes answer in
milliseconds usually, in a few hundred at worst (25 MB bodies, docs/OPERATIONS.md), not
within a bound. It reads the same state the routes do (app.health): liveness is "the loop
still runs", readiness "a model is loaded and this worker is not shedding".

Each worker process of `ltr serve --workers N` binds the same port with SO_REUSEPORT; the
kernel gives each probe connection to one of them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from app import metrics
from app.accept_loop import HANDSHAKE_SETTLE_S
from app.handshake_filter import refuse_new_handshakes
from app.health import Answer

log = logging.getLogger(__name__)

# A connection has this long to send a request's whole head, counted from its opening or from
# its previous answer (keep-alive): a client dribbling header bytes or sitting idle is dropped,
# 408 if it had sent part of a head. The main port's `LTR_HEADER_READ_TIMEOUT_SECONDS` has the
# same default; app.main does not pass it here (a probe sends its head in one packet, so there
# is no reason to tune the two apart).
HEAD_TIMEOUT_S = 5.0
# Handler threads at once (one per connection). At the cap a new connection closes the one that
# has waited longest for its head, so hundreds of hostile connections hold at most this many
# threads and kubelet's probes, whose heads arrive at once, are still answered.
MAX_CONNECTIONS = 64
# A client going away before its answer is written is not an error of this service.
_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)
_ROUTE_METHODS = ("GET", "HEAD")
# At a stop, the probes drained from the accept queue are answered within this long (a probe
# sends its head at once): the process may exit after it.
DRAIN_ANSWER_S = 1.0


class _Listener(ThreadingHTTPServer):
    allow_reuse_address = True
    allow_reuse_port = True
    daemon_threads = True
    block_on_close = False
    # listen()'s backlog: at socketserver's 5, a burst of connections made the kernel drop SYNs
    # and each probe caught in it waited for the client's 1 s retransmission.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._lock = threading.Lock()
        # Each open connection: since when it has waited for a request's head, None while its
        # request is answered.
        self._open: dict[socket.socket, float | None] = {}
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer's own asks DNS for the host's full name: a stall for nothing here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if len(self._open) >= MAX_CONNECTIONS:
                waiting = [(since, s) for s, since in self._open.items() if since is not None]
                if not waiting:  # every thread is answering: this one goes
                    log.debug(
                        "probe connection from %s refused: %d open", client_address, MAX_CONNECTIONS
                    )
                    self.shutdown_request(request)
                    return
                oldest = min(waiting, key=lambda pair: pair[0])[1]
                del self._open[oldest]
                # Its thread's read returns at once; that thread closes the socket.
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)
            self._open[request] = time.monotonic()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: socket.socket) -> None:
        with self._lock:
            self._open.pop(request, None)

    def mark(self, request: socket.socket, waiting: bool) -> None:
        with self._lock:
            if request in self._open:  # not when it was closed for a newer connection
                self._open[request] = time.monotonic() if waiting else None

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, _CLIENT_GONE):
            log.debug("probe client %s went away: %r", client_address, error)
        else:  # socketserver's own prints the traceback on stderr, outside the logs
            log.exception("probe connection from %s failed", client_address)


class _HeadReader(io.RawIOBase):
    """The connection's bytes, every read bounded by what is left until `deadline`: the
    handler's socket timeout alone bounds each read, so a byte every few seconds kept a
    connection (and its thread) forever."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline = 0.0
        self.received = 0  # since `arm`
        self.expired = False

    def arm(self, timeout_s: float) -> None:
        self.deadline, self.received, self.expired = time.monotonic() + timeout_s, 0, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("no complete request head in time")
            self._sock.settimeout(left)
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            self.expired = True
            raise
        self.received += n
        return n


class ProbeServer:
    """Serves `livez()` and `readyz()` answers and the metrics exposition on `host:port`."""

    def __init__(
        self,
        host: str,
        port: int,
        livez: Callable[[], Answer],
        readyz: Callable[[], Answer],
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, bytes, str]]] = {
            "/livez": lambda: _json(livez()),
            "/readyz": lambda: _json(readyz()),
            "/metrics": _metrics,
        }

        class Handler(BaseHTTPRequestHandler):
            server: _Listener
            timeout = head_timeout_s  # for writing an answer
            protocol_version = "HTTP/1.1"
            # A request line that does not parse gets an answer with a status line and headers
            # (http.server's default, HTTP/0.9, sends the body alone).
            default_request_version = "HTTP/1.0"
            # Headers and body go out in two writes: with Nagle's algorithm the second waits
            # for the client's delayed ACK, 40 ms on Linux.
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                self._head = _HeadReader(self.connection)
                self.rfile = io.BufferedReader(self._head)

            def handle_one_request(self) -> None:
                self._head.arm(head_timeout_s)
                # Not the previous request's (nor missing) should this one time out.
                self.command = self.requestline = self.path = ""
                self.request_version = self.default_request_version
                self.server.mark(self.connection, waiting=True)
                super().handle_one_request()  # a timeout closes the connection
                if self._head.expired and self._head.received:
                    # the main port's answer (app.api.http_protocol)
                    self.send_error(
                        HTTPStatus.REQUEST_TIMEOUT, "request headers not received in time"
                    )

            def parse_request(self) -> bool:
                if not super().parse_request():
                    return False  # answered by send_error
                self.server.mark(self.connection, waiting=False)
                if self.command in _ROUTE_METHODS:
                    return True
                # Any other method: 404 or 405 rather than http.server's 501. Its body is not
                # read, so the connection closes after the answer.
                self.close_connection = True
                if self._route() is None:
                    self._error(HTTPStatus.NOT_FOUND)
                else:
                    self._error(HTTPStatus.METHOD_NOT_ALLOWED, allow=", ".join(_ROUTE_METHODS))
                return False

            def do_HEAD(self) -> None:
                self._answer(with_body=False)

            def do_GET(self) -> None:
                self._answer(with_body=True)

            def _route(self) -> Callable[[], tuple[int, bytes, str]] | None:
                return routes.get(self.path.split("?", 1)[0])

            def _answer(self, with_body: bool) -> None:
                if self.headers.get("content-length", "0").strip() not in ("", "0") or (
                    "transfer-encoding" in self.headers
                ):
                    self.close_connection = True  # a body this handler does not read
                route = self._route()
                if route is None:
                    self._error(HTTPStatus.NOT_FOUND)
                    return
                try:
                    status, body, kind = route()
                except Exception as exc:  # a probe must get an answer, never a hang
                    log.exception("probe %s failed", self.path)
                    status, body, kind = _json((503, {"detail": str(exc)}))
                self._send(status, body, kind, with_body)

            def send_error(
                self, code: int, message: str | None = None, explain: str | None = None
            ) -> None:
                # http.server's own answers (400, 408, 414, 431, 505...) in the service's error
                # shape; what follows a request it could not read is not trusted.
                self.close_connection = True
                self._error(HTTPStatus(code), message)

            def _error(
                self, status: HTTPStatus, detail: str | None = None, allow: str | None = None
            ) -> None:
                body = orjson.dumps({"detail": detail or status.phrase})
                extra = {"allow": allow} if allow else {}
                self._send(status, body, "application/json", self.command != "HEAD", extra)

            def _send(
                self,
                status: int,
                body: bytes,
                kind: str,
                with_body: bool,
                extra: dict[str, str] | None = None,
            ) -> None:
                self.connection.settimeout(self.timeout)  # the head's deadline is for reading
                # Counted before it is sent, so a client that has its answer finds it counted.
                path = self.path.split("?", 1)[0]
                label = path if path in routes else "unmatched"
                metrics.PROBE_REQUESTS.labels(label, str(status)).inc()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                if self.close_connection:
                    self.send_header("connection", "close")
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
        """Stop listening without resetting a probe: the kernel resets the connections still
        in a listening socket's accept queue when it is closed (a trial: a /livez and a /readyz
        reset at each SIGHUP and SIGTERM of 2 workers), so new handshakes are refused first
        (app.handshake_filter: a probe's SYN is sent again in 1 s, to a sibling or a new
        worker), the queue is drained and its connections are answered, then it closes."""
        self.server.shutdown()
        sock = self.server.socket
        answering = []
        with contextlib.suppress(OSError):
            sock.setblocking(False)
            settled = time.monotonic() + (HANDSHAKE_SETTLE_S if refuse_new_handshakes(sock) else 0)
            while True:
                answering += self._drain(sock)
                if time.monotonic() >= settled:
                    break
                time.sleep(HANDSHAKE_SETTLE_S / 10)
        self.server.server_close()
        deadline = time.monotonic() + DRAIN_ANSWER_S
        for thread in answering:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        self._thread.join(timeout=5)

    def _drain(self, sock: socket.socket) -> list[threading.Thread]:
        """A thread answering each connection queued on `sock` now."""
        threads: list[threading.Thread] = []
        while True:
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return threads
            conn.setblocking(True)
            thread = threading.Thread(
                target=self.server.process_request_thread, args=(conn, address), daemon=True
            )
            thread.start()
            threads.append(thread)


def _json(answer: Answer) -> tuple[int, bytes, str]:
    status, body = answer
    return status, orjson.dumps(body), "application/json"


def _metrics() -> tuple[int, bytes, str]:
    body, content_type = metrics.exposition()
    return 200, body, content_type
