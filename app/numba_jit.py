"""numba compilation as the service's kernels want it: without the GIL, NumPy's error model,
and cached on disk where a cache directory is writable (numba refuses caching outright when
none is, e.g. a read-only install without NUMBA_CACHE_DIR: such a process compiles each
time). numba is imported by the caller, never at the service's start.

The kernels' small helpers (a name's column, a string's end, a digit run) are compiled with
`inline="always"`: called as separate compiled functions, a call per value cost ~45 ns, more
than the work (filling 1,000 candidates x 46 named values took 2.7 ms with the name lookup
called, 0.6 ms with it inlined; the body scan of 1,000 x 136 listed values 2.3 against
1.95 ms)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba


def nogil_jit(fn: Callable[..., Any], signature: Any = None) -> Any:
    """`fn` compiled: lazily per argument types, or at once for an explicit `signature`."""
    try:
        return numba.njit(signature, cache=True, nogil=True, error_model="numpy")(fn)
    except RuntimeError:
        return numba.njit(signature, nogil=True, error_model="numpy")(fn)
