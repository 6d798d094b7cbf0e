"""The service's event loop: uvloop, with TCP servers that accept every waiting connection.

libuv 1.45 (uvloop 0.18 and later) accepts one connection per turn of the loop and relies on
level-triggered polling for the next (libuv pull request 3696, "unix: don't accept()
connections in a loop"). On an idle loop a turn is microseconds and nothing changes; on a
worker saturated by overload a turn takes 10-30 ms, so the worker took in 30-100 new
connections a second whatever arrived. The rest waited in the kernel's accept queue, where the
latency budget cannot see them (its clock starts when a request is read): measured on one
worker at 1.3x its sustainable rate of 100-candidate requests, 150-400 connections queued for
the whole phase, a fresh connection's `GET /livez` took 0.5-5.9 s while a kept-alive one took
0.14 s, and 1 % of the answers took 4-6 s although every answer the service wrote was within
its budget. Past the listen backlog the kernel drops SYNs and clients wait 1, 3 and 7 s for
their retries: the collapse bench_overload recorded at 3x on slower machines.

Here a TCP server's listening sockets are read the way asyncio's own loop reads them: on each
readiness, up to `ACCEPTS_PER_TURN` connections, each handed to uvloop as an accepted socket,
so they are read, admitted and answered (or shed) within their budget. TLS servers and Unix
sockets keep uvloop's own server. Without uvloop the standard loop is used, which already
accepts this way.

Closing a server (a worker stopping) first accepts every connection already in the kernel's
accept queue, then closes the listening socket. The kernel completes handshakes for a
listening socket on its own; when the last process holding the socket closed it, the
connections still queued were reset, after their clients had sent the request: a stop under
new-connection load lost 2-4 requests. Accepted here, they are answered; a connection
arriving after the close is refused (which clients retry safely). A connection taken in that
has not sent its request yet is answered once before it closes (app.stopping_connections).
A socket this process made (one worker, nobody else holds it) first refuses new handshakes
(app.handshake_filter), so none completes between the last accept and the close; a
supervisor's shared socket is made to refuse them by the supervisor (app.supervisor).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from app.handshake_filter import refuse_new_handshakes
from app.stopping_connections import answer_first_request

log = logging.getLogger(__name__)

# Per readiness of one listening socket: at 20 ms a turn, 6,400 connections a second; the
# rest waits for the next turn (the socket stays readable).
ACCEPTS_PER_TURN = 128
# After the process runs out of descriptors or memory for a new socket, as asyncio does: stop
# accepting for a second rather than spin on a listening socket that stays readable.
RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
RESOURCE_PAUSE_S = 1.0
# Once new handshakes are refused, the ones under way complete within a round trip: the queue
# is drained for this long before the close.
HANDSHAKE_SETTLE_S = 0.02
LOOP_FACTORY = "app.accept_loop:new_event_loop"  # uvicorn's `loop` option


class AcceptingServer(asyncio.AbstractServer):
    """Listening sockets whose connections are accepted greedily and served by
    `protocol_factory`'s protocols on `loop` (the `asyncio.Server` uvicorn uses)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: Iterable[socket.socket],
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        *,
        sole_holder: bool = False,
    ) -> None:
        """`sole_holder`: no other process holds `sockets` (they were made here), so closing
        them ends their accept queues."""
        self._loop = loop
        self._sockets = list(sockets)
        self._sole_holder = sole_holder
        self._protocol_factory = protocol_factory
        self._serving = False
        self._closed = asyncio.Event()
        self._connecting: set[asyncio.Task[Any]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._listen()

    def _listen(self) -> None:
        if self._serving or self._closed.is_set():
            return
        self._serving = True
        for sock in self._sockets:
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket, most: int = ACCEPTS_PER_TURN) -> None:
        for _ in range(most):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the client gave up before it was accepted
            except OSError as exc:
                if exc.errno not in RESOURCE_ERRORS:
                    raise
                log.error("cannot accept connections (%s); pausing for %g s", exc, RESOURCE_PAUSE_S)
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(RESOURCE_PAUSE_S, self._resume, sock)
                return
            conn.setblocking(False)
            task = self._loop.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _resume(self, sock: socket.socket) -> None:
        if self._serving:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._new_protocol, conn)
        except OSError:  # the peer reset before the transport was made
            conn.close()

    def _new_protocol(self) -> asyncio.BaseProtocol:
        return answer_first_request(self._protocol_factory(), self._loop)

    def close(self) -> None:
        if self._closed.is_set():
            return
        was_serving, self._serving = self._serving, False
        for sock in self._sockets:
            if sock.fileno() != -1:
                self._loop.remove_reader(sock.fileno())
                if was_serving:  # (non-blocking since _listen)
                    self._drain(sock)
                sock.close()
        self._closed.set()

    def _drain(self, sock: socket.socket) -> None:
        """Accept everything queued, in one go (the backlog bounds it), right before the close:
        the kernel resets what is still queued when the last holder closes."""
        if self._sole_holder and refuse_new_handshakes(sock):
            settled = time.monotonic() + HANDSHAKE_SETTLE_S
            while time.monotonic() < settled:
                self._accept(sock, most=sys.maxsize)
                time.sleep(HANDSHAKE_SETTLE_S / 10)
        self._accept(sock, most=sys.maxsize)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def serve_forever(self) -> None:
        self._listen()
        await self._closed.wait()


def listening_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Bound, listening sockets for `host` (None or "": every interface) and `port`, one per
    address it resolves to, as asyncio's `create_server` makes them (`socket.create_server`:
    SO_REUSEADDR; IPv6 sockets IPv6 only)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    made: list[socket.socket] = []
    try:
        for family, address in dict.fromkeys((info[0], info[4]) for info in infos):
            made.append(socket.create_server(address, family=family, backlog=backlog))
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return made


def _accepting_loop_class() -> type[asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None

    class AcceptingLoop(uvloop.Loop):
        """uvloop, whose plain TCP servers accept greedily (AcceptingServer)."""

        async def create_server(  # type: ignore[override]
            self,
            protocol_factory: Callable[[], asyncio.BaseProtocol],
            host: str | None = None,
            port: int | None = None,
            *,
            sock: socket.socket | None = None,
            backlog: int = 100,
            ssl: Any = None,
            start_serving: bool = True,
            **kwargs: Any,
        ) -> asyncio.AbstractServer:
            plain = ssl is None and not kwargs
            if plain and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.listen(backlog)
                sockets = [sock]
            elif plain and sock is None and port is not None:
                sockets = listening_sockets(host, port, backlog)
            else:
                own: Any = super()  # uvloop's stubs type each form of the call apart
                return await own.create_server(
                    protocol_factory,
                    host,
                    port,
                    sock=sock,
                    backlog=backlog,
                    ssl=ssl,
                    start_serving=start_serving,
                    **kwargs,
                )
            server = AcceptingServer(self, sockets, protocol_factory, sole_holder=sock is None)
            if start_serving:
                await server.start_serving()
            return server

    return AcceptingLoop


_LOOP_CLASS = _accepting_loop_class()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory (`loop="app.accept_loop:new_event_loop"`)."""
    if _LOOP_CLASS is None:
        return asyncio.new_event_loop()
    return _LOOP_CLASS()
