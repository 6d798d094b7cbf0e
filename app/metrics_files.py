"""prometheus-client's multiprocess files with their disk space allocated, so a full disk never
kills a worker.

With several workers each keeps its values in files under `PROMETHEUS_MULTIPROC_DIR` that
prometheus-client maps into memory (`counter_<pid>.db`, ...), made sparse (`truncate`) and grown
by doubling. A page first written while that filesystem is full has no block to land in, and
the write kills the process with SIGBUS: a held-out review filled the directory, and every
worker that made a new series died, its replacement too, 583 deaths in 15 s and no answer,
with nothing in the log saying why.

So a file's blocks are allocated (`posix_fallocate`) when it is made or grown, where a full disk
is an OSError instead. Then, rather than failing the request that made a series: a file that
cannot be made is kept in memory (a memfd; its values are missing from /metrics), a series that
cannot grow its file is not recorded, and each worker logs that once.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from prometheus_client import values
from prometheus_client.mmap_dict import MmapedDict

log = logging.getLogger(__name__)

INITIAL_BYTES = 1 << 16  # prometheus-client's own first size


class _AllocatingFile:
    """The dict's file, whose `truncate` (only ever to grow it) allocates the blocks."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def truncate(self, size: int) -> None:
        os.posix_fallocate(self._file.fileno(), 0, size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class AllocatedMmapedDict(MmapedDict):
    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if read_mode:
            super().__init__(filename, read_mode)  # type: ignore[no-untyped-call]
            return
        size = -1
        try:
            with open(filename, "a+b") as file:
                size = os.fstat(file.fileno()).st_size
                os.posix_fallocate(file.fileno(), 0, max(size, INITIAL_BYTES))
        except OSError as exc:
            if size == 0:  # made here, empty: the collector cannot read that (500 at /metrics)
                with contextlib.suppress(OSError):
                    os.unlink(filename)
            _full(f"{filename} cannot be made ({exc.strerror}): its values are kept in memory")
            memory = os.memfd_create("ltr-metrics")
            try:
                super().__init__(f"/proc/self/fd/{memory}", read_mode)  # type: ignore[no-untyped-call]
            finally:
                os.close(memory)  # the file opened on it keeps it
        else:
            super().__init__(filename, read_mode)  # type: ignore[no-untyped-call]
        self._f = _AllocatingFile(self._f)  # type: ignore[assignment]
        self._unrecorded: set[str] = set()

    def read_value(self, key: str) -> tuple[float, float]:
        if key in self._unrecorded or not self._room_for(key):
            return 0.0, 0.0
        result: tuple[float, float] = super().read_value(key)  # type: ignore[no-untyped-call]
        return result

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        if key in self._unrecorded or not self._room_for(key):
            return
        super().write_value(key, value, timestamp)  # type: ignore[no-untyped-call]

    def _room_for(self, key: str) -> bool:
        """Whether `key` has its place in the file, made now if new; False if the file could
        not grow for it (it is then never recorded)."""
        if key in self._positions:
            return True
        try:
            self._init_value(key)  # type: ignore[no-untyped-call]
        except OSError as exc:
            self._capacity = len(self._m)  # it doubled before the allocation failed
            self._unrecorded.add(key)
            _full(f"{self._fname} cannot grow ({exc.strerror}): new series are not recorded")
            return False
        return True


_told = False


def _full(what: str) -> None:
    global _told
    if not _told:
        _told = True
        log.error("metrics directory full: %s (free space in PROMETHEUS_MULTIPROC_DIR)", what)


def install() -> None:
    """Have prometheus-client make its multiprocess files as AllocatedMmapedDict: before any
    metric of the process makes a value (app/__init__.py)."""
    values.MmapedDict = AllocatedMmapedDict  # type: ignore[attr-defined]
