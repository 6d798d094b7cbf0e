"""The explainers' warm-up leaves numba and the GIL to the kernels /readyz waits for."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from app.background_kernel import BackgroundKernel
from app.explain import warm


def test_explainers_warm_after_the_body_scans_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    scans = BackgroundKernel("body-scan", lambda: release.wait(10))
    scans.compile_later()
    warmed = threading.Event()

    def record(model: Any) -> bool:
        warmed.set()
        return True

    monkeypatch.setattr(warm, "BODY_SCAN", scans)
    monkeypatch.setattr(warm, "warm", record)
    model = SimpleNamespace(manifest=SimpleNamespace(kind="lambdamart"), name="m", version="v")
    # What the warm-up thread does with each model it is given (its queue is the process's).
    worker = threading.Thread(target=warm._warm_queued, args=(model, False), daemon=True)
    worker.start()
    time.sleep(0.3)
    assert not warmed.is_set()
    release.set()
    assert warmed.wait(10)
    worker.join(10)
