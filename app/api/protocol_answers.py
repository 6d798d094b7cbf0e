"""The answers the HTTP protocol writes itself, in the request metrics beside the app's.

The protocol (app.api.http_protocol) answers some requests before any of it reaches the app
and its service middleware, which counts every other answer: a 408 for a head not complete in
time (a connection that sent nothing included), and uvicorn's plain-text 400 for bytes it
cannot parse. Uncounted, `ltr_http_requests_total` disagreed with what clients received (a
trial: 7 answers 408, 2 counted). Here each is counted under the route its path matches when
the request target was read whole, else `unmatched`, and under its method once that was read,
else "other".
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import httptools

from app.api.middleware import UNMATCHED, RouteLabels, access_line, count_answer

_WRAPPERS_MOST = 8  # uvicorn's own wrappers around the app (proxy headers, ASGI 2, trace log)


class ProtocolAnswers:
    """Counts a protocol's own answers; the route labels of the app it serves are read once
    (one app per worker process)."""

    def __init__(self) -> None:
        self._labels: RouteLabels | None = None

    def count(
        self,
        app: Any,
        target: bytes | None,
        method: bytes | None,
        status: int,
        seconds: float,
        client: tuple[str, int] | None = None,
    ) -> None:
        """`target`: the request target as read, None unless read whole; `method`: None
        unless read; `client`: the peer's address, for the access log's line."""
        routed = _routed_app(app)
        label = UNMATCHED if target is None else self._label(routed, target)
        name = "other" if method is None else method.decode("ascii", "replace")
        count_answer(label, name, status, seconds)
        settings = getattr(getattr(routed, "state", None), "settings", None)
        if getattr(settings, "access_log", False):  # "-" for what was not read
            where = f"{client[0]}:{client[1]}" if client else "-"
            shown = "-" if target is None else target.decode("latin-1")
            verb = "-" if method is None else name
            access_line(where, verb, shown, "1.1", status, seconds, "-")

    def _label(self, routed: Any, target: bytes) -> str:
        """`routed`: the app with the routes (None: not found under uvicorn's wrappers)."""
        path = _path(target)
        if path is None or routed is None:
            return UNMATCHED
        labels = self._labels
        if labels is None or labels.app is not routed:
            labels = self._labels = RouteLabels(routed)
        return labels.find(path)


def _path(target: bytes) -> str | None:
    """The path of a request target as uvicorn puts it in the scope, None if it has none."""
    try:
        path = httptools.parse_url(target).path
    except httptools.HttpParserInvalidURLError:
        return None
    if path is None:
        return None
    text = path.decode("ascii", "replace")
    return urllib.parse.unquote(text) if "%" in text else text


def _routed_app(app: Any) -> Any:
    """The app with the routes, under uvicorn's wrappers (each keeps what it wraps as `app`)."""
    for _ in range(_WRAPPERS_MOST):
        if app is None or hasattr(app, "routes"):
            return app
        app = getattr(app, "app", None)
    return None
