"""The compiled item lookup's handle (app.features.item_lookup_kernel): what it reads, and the
kernel, loaded in the background so that importing the service does not import numba."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.background_kernel import BackgroundKernel

OK = 0  # the kernel's status for a lookup it did


@dataclass(frozen=True)
class IdTokens:
    """A request's candidate ids as its body wrote them: `count` JSON tokens (a string with
    its quotes, or an integer), comma-separated, in `buf[begin:end]`."""

    buf: np.ndarray  # uint8
    begin: int
    end: int
    count: int


@dataclass(frozen=True)
class LookupKernels:
    find_rows: Callable[..., int]


def _load() -> LookupKernels:
    from app.features.item_lookup_kernel import find_rows

    buf = np.frombuffer(b'"a",7', dtype=np.uint8)  # read-only, as ItemIndex passes both
    points = np.zeros((1, 1), dtype=np.uint32)
    points.flags.writeable = False
    starts = np.zeros(3, dtype=np.int32)
    hashes = np.zeros(1, dtype=np.uint64)
    rows = np.empty(2, dtype=np.int64)
    constants = np.ones(1, dtype=np.uint64)
    for index in (np.int32, np.int64):  # the index's dtype follows the snapshot's size
        find_rows(
            buf,
            0,
            5,
            2,
            constants,
            np.uint64(63),
            starts.astype(index),
            hashes,
            starts.astype(index),
            points,
            rows,
        )
    return LookupKernels(find_rows)


KERNEL = BackgroundKernel("item-lookup", _load)
