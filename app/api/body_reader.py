"""A request body of a declared length read from its socket straight into the `bytes` object the
application gets: no copy in user space.

Read as uvicorn reads it, each of the body's socket reads lands in uvloop's buffer, is copied
into a new `bytes`, and the parts are then joined into one: a 954 KB body crossed memory three
times (the kernel's copy and two here), and memmove was 17 % of the CPU of a worker that read
such bodies and answered 404. Here the connection is handed, for the rest of the body, to a
`BufferedProtocol` whose buffer is the body's own storage: uvloop has the kernel write into it.

The storage is a `bytes` object created empty (`PyBytes_FromStringAndSize(NULL, n)`, which the
C API lets its creator fill) and written only until it is handed over, before anything has
hashed or shared it. CPython only; elsewhere `writable_bytes` is None and bodies are read as
before.
"""

from __future__ import annotations

import asyncio
import ctypes
import platform
from collections.abc import Callable
from typing import Protocol

# Bodies whose rest is at least this large are read this way; smaller ones cost more in the
# protocol switch than the copies.
MIN_BYTES = 64 * 1024


def _bytes_maker() -> Callable[[int], tuple[bytes, memoryview]] | None:
    if platform.python_implementation() != "CPython":
        return None
    make = ctypes.pythonapi.PyBytes_FromStringAndSize
    make.restype = ctypes.py_object
    make.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
    offset = bytes.__basicsize__ - 1  # ob_sval: the header, less the one byte it counts

    def writable_bytes(size: int) -> tuple[bytes, memoryview]:
        """A new `bytes` of `size` unset bytes and a writable view of its storage (keep the
        object alive while the view is used)."""
        made: bytes = make(None, size)
        storage = (ctypes.c_char * size).from_address(id(made) + offset)
        return made, memoryview(storage).cast("B")

    return writable_bytes


writable_bytes = _bytes_maker()


class BodyOwner(Protocol):
    """What the HTTP protocol gives its body reader."""

    def body_read(self, body: bytes) -> None: ...
    def body_progress(self, n: int) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def eof_received(self) -> bool | None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...


class BodyReader(asyncio.BufferedProtocol):
    """The connection's protocol while the rest of one body is read: the kernel writes into
    `body` from byte `filled` on; the owner gets the whole body when it is complete (and the
    connection back: `transport.set_protocol`), and every other event meanwhile."""

    def __init__(self, owner: BodyOwner, body: bytes, view: memoryview, filled: int) -> None:
        self.owner = owner
        self.body = body
        self._view = view
        self._filled = filled

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view[self._filled :]  # the body's rest only: a pipelined request waits

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        self.owner.body_progress(nbytes)
        if self._filled == len(self.body):
            self.owner.body_read(self.body)

    def eof_received(self) -> bool | None:
        return self.owner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.owner.pause_writing()

    def resume_writing(self) -> None:
        self.owner.resume_writing()
