"""The service's compiled kernels, compiled once before any test runs: every server a test
starts then loads them from numba's disk cache in a fraction of a second instead of each
compiling them (seconds of CPU, partly holding the GIL) beside the requests it is measured on."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    from app.api import body_scan
    from app.features import item_lookup

    body_scan.KERNEL.compile_now()
    item_lookup.KERNEL.compile_now()
