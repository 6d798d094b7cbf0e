from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.api.conftest import app_settings


@pytest.mark.parametrize(("interval_ms", "expected_s"), [(0.5, 0.0005), (2.0, 0.002), (0, None)])
def test_the_service_sets_the_gil_switch_interval(
    tmp_path: Path, interval_ms: float, expected_s: float | None
) -> None:
    saved = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.004)
        settings = app_settings(registry=tmp_path, gil_switch_interval_ms=interval_ms)
        with TestClient(create_app(settings)):
            assert sys.getswitchinterval() == pytest.approx(expected_s or 0.004)
    finally:
        sys.setswitchinterval(saved)


def test_an_app_is_freed_once_closed(tmp_path: Path) -> None:
    """Before: FastAPI's module-level endpoint cache held the /docs pages' closures over their
    app, so every app a process made stayed alive (64-128 MB each, with its ring of served
    ids): the test suite's pytest workers grew to 10 GB."""
    app = create_app(app_settings(registry=tmp_path))
    with TestClient(app) as client:
        assert client.get("/docs").status_code == 200
        assert client.get("/redoc").status_code == 200
    freed = weakref.ref(app)
    del app, client
    gc.collect()
    assert freed() is None
