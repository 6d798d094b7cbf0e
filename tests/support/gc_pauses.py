"""A fixture for tests that time a few hundred milliseconds in the pytest process itself.

By the time the whole suite has run, the pytest process holds millions of objects (models,
hypothesis databases, imported libraries) and one full garbage collection pauses it for
hundreds of milliseconds: a timing test that met that pause would blame the code under test.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def no_gc_pauses() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
