"""An interleaving experiment spec for tests that only need one to exist."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.experiments.spec import ExperimentSpec


def interleave_spec(**overrides: Any) -> ExperimentSpec:
    """Model `m`, control `v1`, candidate `v2`, all traffic, started 2026-01-01."""
    fields: dict[str, Any] = {
        "name": "test",
        "model": "m",
        "control": "v1",
        "candidate": "v2",
        "mode": "interleave",
        "traffic": 1.0,
        "salt": "salt",
        "started_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    }
    return ExperimentSpec(**{**fields, **overrides})
