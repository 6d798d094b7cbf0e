"""uvicorn's httptools protocol plus the request-head timeout it lacks, and body read-ahead.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but waits forever for the
headers of a request that has begun, so a client sending one header byte now and then holds a
connection (and its buffers) as long as it likes (slowloris). Here the head of every request
must be complete `LTR_HEADER_READ_TIMEOUT_SECONDS` after its first byte (or after the
connection opened), else the answer is 408 and the connection is closed. The body's own
timeout is the service middleware's (app.api.middleware). Those 408s, and uvicorn's 400 for
bytes its parser refuses, are counted in the request metrics as the middleware counts the
app's answers (app.api.protocol_answers).

uvicorn stops reading a connection once 64 KiB of its body wait unread, until the application
asks for more: a 1 MB body then crosses the event loop in many hand-offs (one per socket
read, of up to 256 KiB with uvloop), each waiting for the loop's next turn. Under overload
those turns are slow, and bodies pile up in the socket buffers before the budget's clock
starts. Here a request's body is read ahead up to its declared length (at most
`LTR_BODY_READ_AHEAD_BYTES`), in as few turns as the socket allows, once the service
middleware has reserved that length against the worker's buffer cap; until then no more of it
is read than uvicorn reads (what came with the head, then up to 64 KiB; with reception lanes,
below, the lanes pace it instead, as before). Reading every body ahead as it came, before its
reservation, let a flood of 1.7 MB bodies at 1,500/s (12x what one worker scores) hold 3.1-3.4
GB in one worker, the cap bounding only the bodies reserved, and answer in 4.6-6 s at the
median (0.9-1.1 GB and 1.2-1.4 s held back); reading ahead before the reservation while such
bodies totalled under the cap kept 1.4-1.6 GB and 2-3 s, and gained nothing at 3x.

A body of a declared length is also copied once, not four times: uvicorn has httptools copy
every socket read's body bytes into a new object, appends that to a bytearray and copies the
bytearray into bytes for the application. Here, once the head is parsed, the socket's reads
are kept as they are and joined once when the body is complete (or the read-ahead is full);
the parser, which would still count the bytes it did not see, is replaced by a fresh one for
the connection's next request. A 954 KB body cost the event loop ~0.2 ms less (~12 % of the
loop's time at 3x overload, where every shed request's body is read too). From a body's
second read on, when what is left is at least 64 KiB and fits the read-ahead, the kernel
writes it straight into the `bytes` the application gets (app.api.body_reader): the socket
reads' copies and the join are gone (memmove 17 % -> 7 % of a worker's CPU answering such
bodies with 404).

An answer given before its request's body has all arrived (413, a full buffer's 503, a body
timeout's 408, all with `connection: close`) is followed by a lingering close, as nginx and
Apache do: the server sends its FIN after the answer and reads and drops what the client still
sends, until the client closes or LINGER_SECONDS pass. Closing at once, with the rest of the
body arriving, made the kernel answer with a reset that discarded the answer at the client: a
burst of 100 requests of 2.4 MB at one worker got 16 connection errors where the server had
sent 503. Reading costs the loop, though: a connection with more than LINGER_MOST_BYTES still to
come is closed at once, as before, and a lingering one at that many bytes. Without that cap, 40
clients uploading 32 MiB again and again (bench_overload's hostile clients) took a valid
request's p99 from 2x to 15.6x its idle p99.

With `LTR_RECEPTION_LANES`, a body of at least LANE_MIN_BYTES that does not come with its head
is read in a reception lane (app.api.reception_lanes) or waits for one, its socket unread: when
many large bodies arrive together, a few are read at a time, the newest first while admission
has room.

`uvicorn_options(settings)` gives it, with uvicorn's own slow-client options, to `ltr serve` and
`python -m app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import weakref
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app import metrics
from app.accept_loop import LOOP_FACTORY
from app.api import body_reader
from app.api.body_reader import BodyReader, writable_bytes
from app.api.middleware import (
    ARRIVED_STATE,
    BODY_METHODS,
    FIRST_READ_BYTES,
    LANE_STATE,
    RESERVED_STATE,
    WRITTEN_STATE,
)
from app.api.protocol_answers import ProtocolAnswers
from app.api.reception_lanes import LANES
from app.settings import Settings

PROTOCOL = "app.api.http_protocol:HeaderTimeoutProtocol"
LINGER_SECONDS = 2.0  # how long a closed connection keeps reading a body it answered early
LINGER_MOST_BYTES = 4 * 1024 * 1024  # and how many bytes of it, at most
# Bodies from this size that are not in after their request's first read take a reception
# lane (app.api.reception_lanes): one socket read of uvloop's, at most.
LANE_MIN_BYTES = FIRST_READ_BYTES
_BODY = b'{"detail":"request headers not received in time"}'
_RESPONSE_408 = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: application/json\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\n"
    b"connection: close\r\n\r\n" + _BODY
)


class HeaderTimeoutProtocol(HttpToolsProtocol):
    header_timeout: float | None = None  # read from the settings once per process
    read_ahead_most = HIGH_WATER_LIMIT
    max_pipelined = 100
    answers = ProtocolAnswers()  # counts what this protocol answers itself, per process

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if HeaderTimeoutProtocol.header_timeout is None:
            settings = Settings()
            HeaderTimeoutProtocol.header_timeout = settings.header_read_timeout_seconds
            HeaderTimeoutProtocol.read_ahead_most = settings.body_read_ahead_bytes
            HeaderTimeoutProtocol.max_pipelined = settings.max_pipelined
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_since = 0.0  # loop time the head timer counts from
        self._head_open = False  # a request's head has begun and is not complete
        self._target_pieces = 0  # calls of on_url for that request (see _target_read)
        self._read_ahead = HIGH_WATER_LIMIT
        # The read-ahead the body gets once the service middleware has reserved it, and
        # whether it is held back until then (meanwhile nothing is handed over).
        self._granted = HIGH_WATER_LIMIT
        self._held_back = False
        # The body's bytes not yet handed to the application, and how many.
        self._chunks: list[bytes] = []
        self._held = 0
        # Bytes of a declared-length body still to come; None: the parser takes what comes.
        self._body_left: int | None = None
        self._linger_timer: asyncio.TimerHandle | None = None  # set while lingering
        self._linger_left = 0  # bytes a lingering connection may still read
        self._declared = 0  # the body's declared length
        self._in_lanes = False  # this request's body entered the reception lanes
        self._waiting_lane = False  # ... and waits for a lane, its socket unread
        self._lane_open: asyncio.Future[None] | None = None  # done when its lane opens
        self._reader: BodyReader | None = None  # the connection's protocol while it reads
        # A 400 for bytes after a request still being answered: (message, whether the error was
        # in a request target), sent once the answers before it are out.
        self._refused_later: tuple[str, bool] | None = None
        # The worker is stopping (app.stopping_connections): a request that begins is the
        # connection's last, answered with `Connection: close`.
        self.stopping = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _LaneFlow(transport, self)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # The loop has just read the request's first bytes: its latency budget counts from
        # here (app.api.middleware), not from when its task first runs, which under overload
        # waits behind every request read in the same turn.
        self.scope["state"][ARRIVED_STATE] = time.perf_counter()
        self._head_open = True
        self._target_pieces = 0
        self._arm()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._target_pieces += 1

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._disarm()
        # Only bodies the service middleware reads, having reserved their declared length.
        declared = _declared_length(self.headers)
        if declared is not None and self.parser.get_method().decode("ascii", "replace") in (
            BODY_METHODS
        ):
            self._granted = max(HIGH_WATER_LIMIT, min(declared, self.read_ahead_most))
        else:
            self._granted = HIGH_WATER_LIMIT
        self._read_ahead = HIGH_WATER_LIMIT
        self._chunks, self._held = [], 0
        upgrade = self.parser.should_upgrade()
        super().on_headers_complete()
        self._body_left = None if upgrade else declared
        self._declared = declared or 0
        self._held_back = False
        if self.cycle is not None and self._granted > HIGH_WATER_LIMIT and not upgrade:
            if LANES.enabled:  # the reception lanes pace the reading of large bodies
                self._read_ahead = self._granted
            else:
                self._held_back = True
                self.scope["state"][RESERVED_STATE] = _Reserved(self, self.cycle)
        if self.cycle is not None:
            self.cycle.transport = _LingeringClose(self.transport, self)  # type: ignore[assignment]
            if self.stopping:
                self.cycle.keep_alive = False
        if len(self.pipeline) > self.max_pipelined and not self.transport.is_closing():
            self._drop_pipeline()
        elif self.transport.is_closing():
            self.pipeline.clear()  # the rest of a read after the drop: never run

    def _drop_pipeline(self) -> None:
        """A client that queues more requests than LTR_MAX_PIPELINED without reading the
        answers: the connection closes, and what it queued is never run. One connection
        writing `GET /livez` without reading took a worker from 278 MB to 1.3 GB in 10 s (a
        held-out review: a 256 KB read holds ~8,700 such requests, each ~1.8 KB queued)."""
        metrics.SLOW_CLIENTS.labels("pipelined").inc()
        self.pipeline.clear()
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._received(data)
        if self._body_left is not None and self._body_left >= body_reader.MIN_BYTES:
            self._read_directly()
        if (
            not self._in_lanes
            and self._body_left
            and self._declared >= LANE_MIN_BYTES
            and self.cycle is not None
            and not self.cycle.response_complete
        ):
            # The body did not come with its head: it is read in a lane, or waits for one.
            self._in_lanes = True
            if not LANES.enter(self):
                self._waiting_lane = True
                if not self.flow.read_paused:
                    self.transport.pause_reading()
                # The service middleware reserves the rest of the body once it opens.
                self._lane_open = self.loop.create_future()
                self.scope["state"][LANE_STATE] = self._lane_open

    def _read_directly(self) -> None:
        """The rest of the body is read into the body's own `bytes` (app.api.body_reader),
        when nothing else has a say in how it is read."""
        cycle = self.cycle
        left = self._body_left
        if (
            writable_bytes is None
            or LANES.enabled
            or left is None
            or cycle is None
            or cycle.response_complete
            or self._linger_timer is not None
            or self._declared > self._read_ahead  # handed over in parts: read as it comes
            or self._held != self._declared - left
            or self.flow.read_paused
        ):
            return
        self._unset_keepalive_if_required()
        body, view = writable_bytes(self._declared)
        filled = 0
        for chunk in self._chunks:
            view[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        self._chunks, self._held = [], 0
        self._reader = BodyReader(self, body, view, filled)
        self.transport.set_protocol(self._reader)

    def _body_reserved(self, cycle: Any) -> None:
        """The service middleware has reserved the body's declared length: it is read ahead
        from now on, straight into its own `bytes` where it can be."""
        if cycle is not self.cycle or not self._held_back:
            return
        self._held_back = False
        self._read_ahead = self._granted
        if cycle.response_complete or self._body_left is None:
            return
        self.flow.resume_reading()
        self._read_directly()

    def body_wanted(self) -> None:
        """The application asks for the body (or the connection reads on) without the
        middleware's reservation: what is held back is handed over, as uvicorn would."""
        if self._held_back:
            self._held_back = False
            if self.cycle is not None and not self.cycle.response_complete:
                self._hand_over()

    def body_progress(self, n: int) -> None:
        if self._body_left is not None:
            self._body_left -= n

    def body_read(self, body: bytes) -> None:
        """The reader's body is complete: the connection is this protocol's again."""
        self._stop_reading_directly()
        self._body_left = None
        self._chunks, self._held = [body], len(body)
        self._message_complete()
        self.parser = _parser(self)  # the old one still waits for the bytes it did not see

    def _stop_reading_directly(self) -> None:
        """Back to reading the socket here (what is left of a body answered before it was in
        is then dropped, or lingered over, as ever)."""
        if self._reader is not None:
            self._reader = None
            if not self.transport.is_closing():
                self.transport.set_protocol(self)

    def resume_body(self) -> None:
        """Its lane's turn (app.api.reception_lanes): the body is read on."""
        self._waiting_lane = False
        if self._lane_open is not None:
            if not self._lane_open.done():
                self._lane_open.set_result(None)
            self._lane_open = None
        if not self.flow.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def _leave_lanes(self) -> None:
        if self._in_lanes:
            self._in_lanes = False
            LANES.leave(self)

    def _received(self, data: bytes) -> None:
        if self._linger_timer is not None:  # the rest of a body already answered
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self.transport.close()
            return
        left = self._body_left
        if not left or self.cycle is None:
            super().data_received(data)
            return
        # The rest of a declared-length body: the socket's bytes as they are.
        self._unset_keepalive_if_required()
        body, rest = (data, b"") if len(data) <= left else (data[:left], data[left:])
        self._body_left = left - len(body)
        if not self.cycle.response_complete:  # else, as uvicorn: answered before it was read
            self._keep(body)
        if self._body_left == 0:
            self._body_left = None
            self._message_complete()
            self.parser = _parser(self)  # the old one still waits for the bytes it did not see
            if rest:
                self.data_received(rest)  # a pipelined request

    def on_body(self, body: bytes) -> None:
        if self._body_left is not None:
            self._body_left -= len(body)
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return  # as uvicorn: an upgrade's bytes, or a body answered before it was read
        self._keep(body)

    def on_message_complete(self) -> None:
        self._body_left = None
        self._message_complete()

    def _keep(self, body: bytes) -> None:
        self._chunks.append(body)
        self._held += len(body)
        if self._held > self._read_ahead:
            if not self._held_back:
                self._hand_over()
            self.flow.pause_reading()

    def _hand_over(self) -> None:
        """The bytes kept so far, to the application's next `receive()` (uvicorn's cycle
        copies its body with bytes(), which returns a bytes object itself)."""
        chunks = self._chunks
        if not chunks:
            return
        joined = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks, self._held = [], 0
        cycle = self.cycle
        cycle.body = bytes(cycle.body) + joined if cycle.body else joined  # type: ignore[assignment]
        cycle.message_event.set()

    def _message_complete(self) -> None:
        self._leave_lanes()
        self._hand_over()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._linger_timer is not None:
            # This answer closes the connection: requests pipelined behind it are never run
            # (uvicorn, closing at once, drops them too; run here, they wrote after our FIN).
            self.pipeline.clear()
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            # The request whose body is being read was answered before its body was in. An
            # earlier pipelined request's answer, completing meanwhile, leaves that read be.
            self._stop_reading_directly()
            self._leave_lanes()
        self._disarm()  # the keep-alive timer takes over until the next request begins
        refused = self._refused_later
        if refused is not None and not self.pipeline and not self.transport.is_closing():
            self._refused_later = None
            self._refuse(*refused)  # the answers before it are out
        super().on_response_complete()

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio's: bool | None
        """A client that half-closes its connection once its request is sent (`nc -N`, some
        proxies) gets its answer, then the close. uvicorn let the transport close at the FIN:
        answers that took longer than the FIN to come were lost (every one from ~290 KB up in a
        trial, where the body's rest is read into its own bytes). A FIN before the body is
        complete still closes the connection: that body can no longer come."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            return None
        cycle.keep_alive = False  # the last request's answer closes the connection
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._reader = None
        self._leave_lanes()
        self._disarm()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)
        # The flow control and the lingering close refer back to this protocol: cycles that
        # only the garbage collector frees. 2,000 slow clients cut off every 5 s left ~28,000
        # objects for each full collection to free, a 20-60 ms pause of the event loop every
        # few seconds (bench_overload's hostile clients); broken here, each connection is
        # freed as it goes.
        if isinstance(self.flow, _LaneFlow):
            self.flow.detach()
        if self.cycle is not None and isinstance(self.cycle.transport, _LingeringClose):
            self.cycle.transport.detach()

    def close_after_body(self) -> None:
        """Closes the connection once the client has sent what it was sending (or at most
        LINGER_SECONDS from now): the answer and a FIN go out now, what arrives meanwhile is
        dropped unread."""
        self._stop_reading_directly()
        self._leave_lanes()
        transport = self.transport
        cycle = self.cycle
        body_coming = cycle is not None and cycle.more_body
        left = self._body_left  # None: a chunked body, read up to the cap
        if (
            not body_coming
            or (left is not None and left > LINGER_MOST_BYTES)
            or transport.is_closing()
            or not transport.can_write_eof()
        ):
            transport.close()
            return
        if self._linger_timer is None:
            self._linger_left = LINGER_MOST_BYTES
            transport.write_eof()
            self._linger_timer = self.loop.call_later(LINGER_SECONDS, transport.close)
            self.flow.resume_reading()

    def _arm(self) -> None:
        if self._head_timer is None and self.header_timeout is not None:
            self._head_since = self.loop.time()
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being served: its head was complete
        metrics.SLOW_CLIENTS.labels("header_timeout").inc()
        target_read = self._target_read()
        self._count_own(408, target_read, self._target_pieces > 0)
        self.transport.write(_RESPONSE_408)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refused (called while handling the error)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            # The bytes follow a request received whole and not answered yet (pipelined after
            # it, or past a Content-Length shorter than what was sent): its answer goes out
            # first, then this 400, which closes the connection. uvicorn closed at once and
            # that request's answer was lost (a trial: a valid request with stray bytes after
            # it in the same write got only the 400).
            if self._refused_later is None:
                in_target = isinstance(sys.exc_info()[1], httptools.HttpParserInvalidURLError)
                self._refused_later = (msg, in_target)
            self.flow.pause_reading()
            return
        if not self._head_open and cycle is not None and not cycle.response_complete:
            # A body the parser refused: its request's answer is this one (the connection
            # closes), unless the app's answer had begun.
            if not cycle.response_started:
                cycle.scope["state"][WRITTEN_STATE] = 400
        else:
            # The parser stopped at the error: a target it was reading is not handed over,
            # and an error in it is an invalid URL's, after the method.
            in_target = isinstance(sys.exc_info()[1], httptools.HttpParserInvalidURLError)
            self._refuse(msg, in_target)
            return
        super().send_400_response(msg)

    def _refuse(self, msg: str, in_target: bool) -> None:
        """The 400 for bytes that do not begin a request, counted, and the close."""
        read = self._target_pieces > 0
        self._count_own(400, read and not in_target, read or in_target)
        super().send_400_response(msg)

    def _count_own(self, status: int, target_read: bool, method_read: bool) -> None:
        """Counts an answer this protocol writes to the request whose head is incomplete (or
        to a connection with none): under its route once its target was read whole."""
        target = self.url if self._head_open and target_read else None
        method = self.parser.get_method() if self._head_open and method_read else None
        seconds = self.loop.time() - self._head_since
        self.answers.count(self.app, target, method, status, seconds, self.client)

    def _target_read(self) -> bool:
        """Whether the request target was read whole. llhttp hands a target it is still
        reading to on_url at the end of every feed, an empty feed's included (tested)."""
        if not self._head_open or not self._target_pieces:
            return False
        pieces = self._target_pieces
        with contextlib.suppress(httptools.HttpParserError):
            self.parser.feed_data(b"")  # the connection closes next: the parser is done
        return self._target_pieces == pieces


class _Reserved:
    """The middleware's call once it has reserved a body, to its connection's protocol. Held
    in the request's scope, it refers to the protocol and the cycle weakly: a strong reference
    made a cycle (protocol, scope, this) that kept each request's objects, its body's
    included, until the garbage collector's next full pass (+250 MB of RSS at 3x overload)."""

    __slots__ = ("_cycle", "_protocol")

    def __init__(self, protocol: HeaderTimeoutProtocol, cycle: Any) -> None:
        self._protocol = weakref.ref(protocol)
        self._cycle = weakref.ref(cycle)

    def __call__(self) -> None:
        protocol, cycle = self._protocol(), self._cycle()
        if protocol is not None and cycle is not None:
            protocol._body_reserved(cycle)


class _LaneFlow(FlowControl):
    """uvicorn's flow control, which resumes reading whenever the application asks for more of
    the body: not while the body waits for a reception lane."""

    def __init__(self, transport: asyncio.Transport, protocol: HeaderTimeoutProtocol) -> None:
        super().__init__(transport)
        self._protocol: HeaderTimeoutProtocol | None = protocol

    def resume_reading(self) -> None:
        if self._protocol is not None:
            if self._protocol.pipeline:
                # Requests read and queued (pipelined) are answered first: uvicorn read on at
                # every answer, and a client that never read its answers queued requests
                # without bound. The request being served has its body whole already.
                return
            self._protocol.body_wanted()
        if self.read_paused:
            self.read_paused = False
            if self._protocol is None or not self._protocol._waiting_lane:
                self._transport.resume_reading()

    def detach(self) -> None:
        """Forget the protocol (its connection is lost): see HeaderTimeoutProtocol's
        connection_lost."""
        self._protocol = None


class _LingeringClose:
    """The transport as a request's cycle sees it: its `close()` is the protocol's
    `close_after_body()`; everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: HeaderTimeoutProtocol) -> None:
        self._transport = transport
        self._protocol: HeaderTimeoutProtocol | None = protocol

    def close(self) -> None:
        if self._protocol is None:  # the connection is lost already
            self._transport.close()
        else:
            self._protocol.close_after_body()

    def detach(self) -> None:
        self._protocol = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The body's Content-Length, when the request has one and no Transfer-Encoding (else the
    parser alone knows where the body ends, and the body is read as uvicorn reads it)."""
    length = None
    for name, value in headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
    return length


def _parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A parser for the connection's next request, set up as uvicorn sets up its own."""
    parser = httptools.HttpRequestParser(protocol)
    with contextlib.suppress(AttributeError):  # httptools < 0.6.3 has no leniencies
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The slow-client limits for `uvicorn.run`: this protocol (request-head timeout), the
    keep-alive timeout, and h11's cap on an incomplete head (if httptools is missing, uvicorn
    falls back to h11, which ignores the protocol's timeout); and the event loop that accepts
    every waiting connection (app.accept_loop); uvicorn's access log off (the service
    middleware writes its own, with request ids, when `LTR_ACCESS_LOG` asks for one); how long
    the supervisor of several workers waits for one to answer its ping; no WebSocket protocol
    (the service has no WebSocket route: uvicorn's upgraded every `Upgrade: websocket` request
    and logged each one's refusal at info, which no throttle of its warnings reached; an
    upgrade request is now answered as the plain HTTP request it also is). The body's limits
    are the service middleware's."""
    return {
        "http": PROTOCOL,
        "ws": "none",
        "loop": LOOP_FACTORY if settings.accept_greedily else "auto",
        "timeout_keep_alive": settings.keep_alive_timeout_seconds,
        "h11_max_incomplete_event_size": 64 * 1024,
        "access_log": False,
        "timeout_worker_healthcheck": settings.worker_healthcheck_timeout_seconds,
    }
