"""One pure-ASGI middleware in front of every route: request id, body limit, metrics.

The body limit is enforced before anything parses: a Content-Length over the limit is refused
at once, and a body without one (chunked) is counted as it streams in and refused as soon as it
passes the limit, without reading the rest. The accepted body is handed to the app in one
message.
"""

from __future__ import annotations

import re
import time
import uuid

import orjson
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.errors import LtrError

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
CLIENT_CLOSED = 499  # nginx's code for "client went away before the response", metrics only


class BodyTooLarge(LtrError):
    pass


class ServiceMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                if "x-request-id" not in headers:
                    headers.append("x-request-id", request_id)
            await send(message)

        try:
            if scope["method"] in _BODY_METHODS:
                body = await self._read_body(scope, receive)
                if body is None:
                    status = CLIENT_CLOSED
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send_with_id)
        except BodyTooLarge:
            await _send_413(send_with_id, self.max_body_bytes)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", "unmatched")
            code = str(status)
            elapsed = time.perf_counter() - started
            metrics.REQUESTS.labels(label, scope["method"], code).inc()
            metrics.REQUEST_SECONDS.labels(label, scope["method"], code).observe(elapsed)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, None if the client disconnected; BodyTooLarge past the limit."""
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0  # the server rejects a malformed length itself
                if declared > limit:
                    raise BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if _REQUEST_ID.match(text):
                return text
    return uuid.uuid4().hex


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would

    return replay


async def _send_413(send: Send, limit: int) -> None:
    body = orjson.dumps({"detail": f"request body larger than {limit} bytes"})
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body was not read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
