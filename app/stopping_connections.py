"""A stopping worker answers the first request of a connection it has just accepted.

uvicorn's graceful shutdown asks every open connection to close: one answering a request
finishes it first, but one that has no request yet (no head parsed: `cycle` is None) is
closed at once. A client that has just connected has its request on the way, or already in
the socket unread, so that close discarded it (with a reset when bytes were unread): the last
connections a stopping worker accepted, the ones it drains from the accept queue included
(app.accept_loop), were lost. Here such a connection's shutdown waits until its first request
has begun (then it is answered and closed, as uvicorn closes one in progress) or
FIRST_REQUEST_GRACE_S have passed (a client that sends nothing is closed as before).

An idle keep-alive connection (its last answer complete) was closed at once too, and a busy
client's next request, already on its way, was reset (an operations trial: about one request
per keep-alive connection under load at SIGTERM). It now waits NEXT_REQUEST_GRACE_S for that
request: the protocol (app.api.http_protocol), told the worker is stopping, answers it with
`Connection: close` and then closes, so the client learns to reconnect from the answer, not
from a reset. A connection still idle after the grace is closed as before.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

P = TypeVar("P", bound=asyncio.BaseProtocol)

FIRST_REQUEST_GRACE_S = 2.0
# A busy keep-alive client sends its next request within milliseconds of an answer; one idle
# longer is closed (a request racing that close is the client's to retry, as at any idle close).
NEXT_REQUEST_GRACE_S = 1.0
CHECK_EVERY_S = 0.005


def answer_first_request(protocol: P, loop: asyncio.AbstractEventLoop) -> P:
    """`protocol` (uvicorn's HTTP protocol) with a `shutdown()` that spares a new connection's
    first request; any other protocol as it is."""
    shutdown = getattr(protocol, "shutdown", None)
    if shutdown is None or not hasattr(protocol, "cycle"):
        return protocol
    proto: Any = protocol

    def deferred() -> None:
        transport = getattr(proto, "transport", None)
        last = proto.cycle
        if hasattr(proto, "stopping"):
            proto.stopping = True  # a request that begins from now is answered, then closed
        in_progress = last is not None and not getattr(last, "response_complete", True)
        if in_progress or transport is None:
            shutdown()
            return
        grace = FIRST_REQUEST_GRACE_S if last is None else NEXT_REQUEST_GRACE_S
        deadline = loop.time() + grace

        def when_begun() -> None:
            if proto.cycle is not last or loop.time() > deadline:
                shutdown()  # uvicorn's: an answer in progress finishes, then the close
            elif not transport.is_closing():
                loop.call_later(CHECK_EVERY_S, when_begun)

        when_begun()

    proto.shutdown = deferred
    return protocol
