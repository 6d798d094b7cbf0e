"""One pure-ASGI middleware in front of every route: request id, arrival time, body limits,
metrics.

The body limit is enforced before anything parses: a Content-Length over the limit is refused
at once, and a body without one (chunked) is counted as it streams in and refused as soon as it
passes the limit, without reading the rest. The accepted body is handed to the app in one
message. A body must arrive within `body_read_timeout` (else 408), and the bodies this worker
holds at once are capped at `max_buffered` bytes (a declared length is reserved up front), so
stalled uploads cannot pin memory. A request that does not fit waits for the requests ahead to
give room back (the waiting take it in arrival order, each that fits), until `buffer_wait`
seconds after it arrived; then 503. Under overload by well-behaved clients room comes back
within milliseconds, as answers go out: 100 clients sending 1.8 MB bodies to one worker got
96-179 answers 503 in 5 s when refused at once, none when let wait. Only bodies of up to
`wait_most_bytes` (what the protocol reads ahead) wait: 40 clients uploading 32 MiB again
and again, each let wait, took the worker's RSS up by 1.3 GB, where refused at once it grew
~175 MB (measured while waiting bodies were still read on; the HTTP protocol now reads no
more of a body than uvicorn would until it is reserved here, app.api.http_protocol). The
metrics record the status that was really sent (nothing sent: 500 if the app failed, 499 if
the client left); so does the access log, when on (`LTR_ACCESS_LOG`), with the request id
the answer carried and its duration. The metrics label is the route's path template; an
answer given before routing (413, 415, 408, 501, a 400 for `Upgrade`, a 503, a shed /rerank)
is labelled with the template its path matches among the app's routes, and a path no route
matches is "unmatched". The HTTP protocol counts the answers it writes itself the same way
(app.api.protocol_answers).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from random import getrandbits
from typing import Any

import fastapi.routing
import orjson
from starlette.datastructures import MutableHeaders
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.errors import LtrError
from app.settings import LARGE_BODY_BYTES, LARGE_SHARE

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # bodies read (and reserved) here
# HEAD is answered as GET without the body (RFC 9110 9.3.2) on the read-only routes that
# probes and load balancers check; the methods metrics label by name (any other: "other", so
# a client cannot add label values).
HEAD_AS_GET = frozenset({"/livez", "/readyz", "/metrics", "/models"})
METHOD_LABELS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
ARRIVED_STATE = "arrived"  # scope state: time.perf_counter() when the request began to arrive
# Scope state: a future done when the body's reception lane opens (app.api.reception_lanes);
# until then the body waits in its socket, but for the first read, of at most FIRST_READ_BYTES.
LANE_STATE = "reception_lane"
FIRST_READ_BYTES = 256 * 1024
# Scope state: a callable, called once the body's declared length is reserved against the
# worker's buffer cap; until then the HTTP protocol reads no more of it than uvicorn would
# (app.api.http_protocol).
RESERVED_STATE = "body_reserved"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CLIENT_CLOSED = 499  # nginx's code for "client went away before the response", metrics only
UNMATCHED = "unmatched"  # the metrics label of a path no route matches
# Scope state: the status of an answer the HTTP protocol wrote itself for this request (a 400
# for a body it could not parse), which is what the client got, whatever the app sent.
WRITTEN_STATE = "protocol_answer"
access_log = logging.getLogger("app.access")


# A request waiting for room under the cap: (bytes it needs, its count of bytes held, woken).
_Waiter = tuple[int, list[int], "asyncio.Future[None]"]


class BodyTooLarge(LtrError):
    pass


class BodyTimeout(LtrError):
    pass


class BufferFull(LtrError):
    pass


class UnsupportedEncoding(LtrError):
    """A body sent with a content coding (RFC 9110 8.4) other than `identity`."""

    def __init__(self, coding: str) -> None:
        super().__init__(coding)
        self.coding = coding


class UnsupportedTransferCoding(LtrError):
    """A body framed with a transfer coding besides `chunked` (`gzip, chunked`): the HTTP
    parser takes the chunks off, but what they carry is still compressed (RFC 9112 6.1: a
    server answers 501 for a transfer coding it does not implement)."""

    def __init__(self, coding: str) -> None:
        super().__init__(coding)
        self.coding = coding


class UnsupportedUpgrade(LtrError):
    """A body sent with `Upgrade` (curl --http2 offers h2c): the HTTP parser takes what
    follows the head for the new protocol, so the body never reaches the application."""

    def __init__(self, protocol: str) -> None:
        super().__init__(protocol)
        self.protocol = protocol


class ServiceMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_read_timeout: float = 10.0,
        max_buffered: int | None = None,
        refuse_early: Callable[[Scope], str | None] | None = None,
        admit: Callable[[Scope, bytes], Awaitable[ASGIApp | None]] | None = None,
        release: Callable[[Scope], None] | None = None,
        buffer_wait: float = 0.0,
        wait_most_bytes: int = 0,
        log_access: bool = False,
    ) -> None:
        self.app = app
        self.log_access = log_access  # a line per request (uvicorn's own has no request id)
        # A 503 detail for a request to refuse before its body is read (shedding in 503 mode).
        self.refuse_early = refuse_early
        # Admission once the body is in (app.api.early_admission): an answer for a request
        # shed before routing, else None; `release` gives back what it took, at the end.
        self.admit = admit
        self.release = release
        self.max_body_bytes = max_body_bytes
        self.body_read_timeout = body_read_timeout
        self.max_buffered = max_buffered if max_buffered is not None else 8 * max_body_bytes
        self.buffered = 0  # body bytes held (or reserved) by requests of this worker
        self.buffered_large = 0  # the part held by bodies of LARGE_BODY_BYTES or more
        self.buffer_wait = buffer_wait
        self.wait_most_bytes = wait_most_bytes  # larger bodies are refused at once
        self._waiting: deque[_Waiter] = deque()  # in arrival order
        self._labels: RouteLabels | None = None  # the app's route templates, read at first use

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = _request_id(scope)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        # The latency budget counts from the request's first bytes (our HTTP protocol notes
        # when the loop read them), else from now.
        started = state.setdefault(ARRIVED_STATE, started)
        status: int | None = None
        sent_id = request_id  # the x-request-id the answer carried
        failed = False
        label = UNMATCHED  # the route's path, for the metrics
        # As routing first saw it: a mount moves the scope's root path to its own.
        unrouted = {
            "app": scope.get("app"),
            "path": scope["path"],
            "root_path": scope.get("root_path", ""),
        }
        held = [0]  # bytes this request counts against the buffer cap

        async def send_with_id(message: Message) -> None:
            nonlocal status, sent_id
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if message["status"] == 405 and scope["path"] in HEAD_AS_GET:
                    # The route says GET; HEAD is served too (below), as the probe port says.
                    headers["allow"] = "GET, HEAD"
                if safe_request_id(headers.get("x-request-id", "")) is None:
                    del headers["x-request-id"]
                    # The body's request_id once it was read (an error answer's too), else
                    # the header's, else the generated one.
                    headers.append("x-request-id", state["request_id"])
                sent_id = headers["x-request-id"]
                await send(message)
                status = message["status"]  # only once it was really sent
                return
            await send(message)

        try:
            refusal = self.refuse_early(scope) if self.refuse_early is not None else None
            if refusal is not None:
                await _send_error(send_with_id, 503, refusal, retry_after=True)
                return
            if scope["method"] in BODY_METHODS:
                body = await self._read_body(scope, receive, held)
                if body is None:
                    status = CLIENT_CLOSED
                    return
                answer = None if self.admit is None else await self.admit(scope, body)
                if answer is not None:  # answered before routing
                    await answer(scope, receive, send_with_id)
                    return
                receive = _replay(body, receive)
            if scope["method"] == "HEAD" and scope["path"] in HEAD_AS_GET:
                as_get = {**scope, "method": "GET"}
                await self.app(as_get, receive, _bodiless(send_with_id))
                label = getattr(as_get.get("route"), "path", label)
                return
            await self.app(scope, receive, send_with_id)
        except BodyTooLarge:
            detail = f"request body larger than {self.max_body_bytes} bytes"
            await _send_error(send_with_id, 413, detail)
        except BodyTimeout:
            metrics.SLOW_CLIENTS.labels("body_timeout").inc()
            detail = f"request body not received within {self.body_read_timeout:g} s"
            await _send_error(send_with_id, 408, detail)
        except UnsupportedEncoding as exc:
            # Read as it came, a gzip body failed as "invalid JSON: str is not valid UTF-8".
            detail = f"Content-Encoding {exc.coding!r} is not supported: send the body uncompressed"
            await _send_error(send_with_id, 415, detail, accept_encoding=True)
        except UnsupportedTransferCoding as exc:
            detail = (
                f"Transfer-Encoding {exc.coding!r} is not supported: send the body with "
                "Content-Length or Transfer-Encoding: chunked alone, uncompressed"
            )
            await _send_error(send_with_id, 501, detail)
        except UnsupportedUpgrade as exc:
            detail = (
                f"Upgrade {exc.protocol!r} is not supported with a request body: send plain "
                "HTTP/1.1 (curl: leave out --http2)"
            )
            await _send_error(send_with_id, 400, detail)
        except BufferFull:
            metrics.SLOW_CLIENTS.labels("buffer_full").inc()
            detail = "too many request bytes in flight on this worker; retry"
            await _send_error(send_with_id, 503, detail, retry_after=True)
        except BaseException:
            failed = True
            raise
        finally:
            if self.release is not None:
                self.release(scope)
            self.buffered -= held[0]
            if held[0] >= LARGE_BODY_BYTES:
                self.buffered_large -= held[0]
            if held[0] and self._waiting:
                self._make_room()
            route = scope.get("route") or _plain_route(scope)
            label = getattr(route, "path", label)
            if route is None:
                # Before: every such answer (a 415 to POST /rerank) was "unmatched", which an
                # alert on a route's errors did not see; so was every file the docs' assets
                # mount served (routing puts no route in the scope for a mount).
                label = self._route_label(unrouted)
            status = state.get(WRITTEN_STATE, status)
            if status is None:
                status = 500 if failed else CLIENT_CLOSED
            elapsed = time.perf_counter() - started
            count_answer(label, scope["method"], status, elapsed)
            if self.log_access:
                _log_access(scope, status, elapsed, sent_id)

    def _route_label(self, scope: Scope) -> str:
        """The path template of the app's route that `scope`'s path matches, whatever the
        method (routing would answer 405 under that route), for an answer given before
        routing; UNMATCHED for a path no route matches, so a client cannot add label values."""
        app = scope.get("app")
        labels = self._labels
        if labels is None or labels.app is not app:
            labels = self._labels = RouteLabels(app)
        return labels.find(_route_path(scope))

    async def _read_body(self, scope: Scope, receive: Receive, held: list[int]) -> bytes | None:
        """The whole body, None if the client disconnected; BodyTooLarge past the limit,
        BodyTimeout when it is not in within the read timeout, BufferFull past the cap."""
        limit = self.max_body_bytes
        declared = 0
        upgrade = None
        for name, value in scope["headers"]:
            if name == b"content-encoding":
                coding = value.decode("latin-1").strip()
                if coding.lower() not in ("", "identity"):
                    raise UnsupportedEncoding(coding[:64])
            elif name == b"upgrade":
                upgrade = value.decode("latin-1").strip()[:64]
            elif name == b"transfer-encoding":
                coding = value.decode("latin-1").strip()
                if any(part.strip().lower() != "chunked" for part in coding.split(",")):
                    raise UnsupportedTransferCoding(coding[:64])
            elif name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0  # the server rejects a malformed length itself
                if declared > limit:
                    raise BodyTooLarge
        if upgrade and declared:
            raise UnsupportedUpgrade(upgrade)
        lane = scope["state"].get(LANE_STATE)
        if lane is not None and not lane.done():
            # Its body waits in its socket for a reception lane: only what was read with the
            # head counts against the cap meanwhile (else the waiting would fill it).
            self._hold(held, min(declared, FIRST_READ_BYTES))
            await lane
        await self._hold_waiting(held, declared - held[0], scope["state"][ARRIVED_STATE])
        reserved = scope["state"].get(RESERVED_STATE)
        if reserved is not None:
            reserved()
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_read_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge
                    if size > held[0]:
                        self._hold(held, size - held[0])
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except TimeoutError:
            raise BodyTimeout from None

    async def _hold_waiting(self, held: list[int], more: int, arrived: float) -> None:
        """_hold, waiting for room until `buffer_wait` after the request's arrival
        (time.perf_counter()): the wait is part of its latency budget. A request that fits
        goes ahead of those waiting (a large one waiting must not hold small ones back: the
        large share keeps their room)."""
        try:
            self._hold(held, more)
            return
        except BufferFull:
            wait = arrived + self.buffer_wait - time.perf_counter()
            if wait <= 0 or more > self.wait_most_bytes:
                raise
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter: _Waiter = (more, held, woken)
        self._waiting.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(woken), wait)
        except TimeoutError:
            if not woken.done():
                self._give_up(waiter)
                raise BufferFull from None
        except BaseException:  # the client went away while waiting
            self._give_up(waiter)
            raise

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter leaves the queue (woken already: it holds its room, given back at its end)."""
        if waiter[2].cancel():
            self._waiting.remove(waiter)

    def _make_room(self) -> None:
        """Room given back: the requests waiting take it in arrival order, each that fits."""
        still: deque[_Waiter] = deque()
        for waiter in self._waiting:
            more, held, woken = waiter
            if self.buffered >= self.max_buffered:  # full again: nobody else fits
                still.append(waiter)
                continue
            try:
                self._hold(held, more)
            except BufferFull:
                still.append(waiter)
                continue
            woken.set_result(None)
        self._waiting = still

    def _hold(self, held: list[int], more: int) -> None:
        """Count `more` bytes of this request against the cap; BufferFull beyond it. Large
        bodies may fill only LARGE_SHARE of the cap, so that stalled big uploads cannot lock
        out the usual small requests."""
        if more <= 0:
            return
        total = held[0] + more
        if self.buffered + more > self.max_buffered:
            raise BufferFull
        if total >= LARGE_BODY_BYTES:
            moved = more if held[0] >= LARGE_BODY_BYTES else total  # it just became large
            if self.buffered_large + moved > LARGE_SHARE * self.max_buffered:
                raise BufferFull
            self.buffered_large += moved
        self.buffered += more
        held[0] = total


def count_answer(label: str, method: str, status: int, seconds: float) -> None:
    """One answer in the request metrics: its route label, method (any other than
    METHOD_LABELS as "other", so a client cannot add label values) and status as sent."""
    method = method if method in METHOD_LABELS else "other"
    code = str(status)
    metrics.REQUESTS.labels(label, method, code).inc()
    metrics.REQUEST_SECONDS.labels(label, method, code).observe(seconds)


def safe_request_id(text: str) -> str | None:
    """`text` if it may go into a header as it is (1-128 of [A-Za-z0-9._:-]), else None."""
    return text if _REQUEST_ID.fullmatch(text) else None


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = safe_request_id(value.decode("latin-1"))
            if text is not None:
                return text
    # 32 random hex digits, as uuid4().hex, from the Mersenne Twister (reseeded in every
    # worker process): os.urandom gives the GIL up, and on a busy worker the event loop's thread
    # then waited ~0.2 ms per request to get it back.
    return f"{getrandbits(128):032x}"


def _bodiless(send: Send) -> Send:
    """`send` with the body left out (a HEAD answer keeps the GET answer's headers)."""

    async def bodiless(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return bodiless


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would

    return replay


async def _send_error(
    send: Send, status: int, detail: str, retry_after: bool = False, accept_encoding: bool = False
) -> None:
    body = orjson.dumps({"detail": detail})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        # The rest of the body was not read: the connection cannot be reused.
        (b"connection", b"close"),
    ]
    if retry_after:
        headers.append((b"retry-after", b"1"))
    if accept_encoding:  # the codings a 415 for Content-Encoding accepts (RFC 9110 15.5.16)
        headers.append((b"accept-encoding", b"identity"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _plain_route(scope: Scope) -> Route | None:
    """The Starlette route (not an API route, which names itself in the scope) that answered:
    /openapi.json and the docs pages; matched by endpoint, so a path parameter never becomes
    a label of its own."""
    endpoint = scope.get("endpoint")
    app = scope.get("app")
    if endpoint is None or app is None:
        return None
    for route in getattr(app, "routes", ()):
        if isinstance(route, Route) and route.endpoint is endpoint:
            return route
    return None


def _route_path(scope: Scope) -> str:
    """The path routing matches: the request's, less the app's root path (as Starlette's)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) :]
    return path


class RouteLabels:
    """The metrics labels of an app's routes (the path templates of its Starlette and API
    routes, and a mount's path for what it serves, such as the docs assets): paths without
    parameters found in a dict, the others by their patterns, in routing order."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.exact: dict[str, str] = {}
        self.patterns: list[tuple[re.Pattern[str], str]] = []
        for path, regex, label in _route_templates(getattr(app, "routes", ())):
            if "{" not in path:
                self.exact.setdefault(path, label)
            else:
                self.patterns.append((regex, label))

    def find(self, path: str) -> str:
        label = self.exact.get(path)
        if label is not None:
            return label
        for regex, template in self.patterns:
            if regex.match(path):
                return template
        return UNMATCHED


def _route_templates(routes: Any) -> Iterator[tuple[str, re.Pattern[str], str]]:
    """(path as routed, its pattern, label) of each route that is a Starlette route: the label
    is the route's own path, as routing puts the route in the scope. FastAPI versions that keep
    an included router's routes under it list them through `iter_route_contexts`."""
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    for entry in contexts(routes) if contexts is not None else routes:
        original = getattr(entry, "original_route", entry)
        if isinstance(original, Route):
            path = getattr(entry, "path_format", None) or original.path_format
            regex = getattr(entry, "path_regex", None) or original.path_regex
            yield path, regex, original.path
        elif isinstance(original, Mount) and original.path:
            yield (
                original.path + "/{path}",
                re.compile(re.escape(original.path) + "/"),
                original.path,
            )


def _log_access(scope: Scope, status: int, elapsed: float, request_id: str) -> None:
    """uvicorn's access line (client, request line, status) with the duration and the request
    id the answer carried, so that a caller's id finds its line."""
    client = scope.get("client")
    where = f"{client[0]}:{client[1]}" if client else "-"
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    method, version = scope["method"], scope.get("http_version", "1.1")
    access_line(where, method, target.decode("latin-1"), version, status, elapsed, request_id)


def access_line(
    where: str,
    method: str,
    target: str,
    version: str,
    status: int,
    elapsed: float,
    request_id: str,
) -> None:
    """One access-log line: uvicorn's (client, request line, status), the duration and the
    request id; also for the answers the HTTP protocol writes itself (app.api.protocol_answers)."""
    access_log.info(
        '%s - "%s %s HTTP/%s" %d %.1f ms request_id=%s',
        where,
        method,
        target,
        version,
        status,
        elapsed * 1e3,
        request_id,
    )
