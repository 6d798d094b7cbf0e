from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from pydantic import ValidationError

from app.experiments.assignment import assign, unit_hash
from app.experiments.spec import CANDIDATE, CONTROL, ExperimentSpec


def spec(mode: str = "ab", traffic: float = 0.2, salt: str = "s1") -> ExperimentSpec:
    return ExperimentSpec(
        name="e1",
        model="m",
        control="v1",
        candidate="v2",
        mode=mode,  # type: ignore[arg-type]
        traffic=traffic,
        salt=salt,
        started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )


def test_assignment_is_stable_and_takes_the_traffic_share() -> None:
    s = spec(traffic=0.2)
    users = [f"u{i}" for i in range(20_000)]
    arms = [assign(s, u, "req") for u in users]
    assert arms == [
        assign(s, u, "other-request") for u in users
    ]  # the user decides, not the request
    inside = [a for a in arms if a is not None]
    assert 0.18 < len(inside) / len(users) < 0.22
    assert 0.45 < inside.count(CANDIDATE) / len(inside) < 0.55
    assert set(inside) == {CONTROL, CANDIDATE}


def test_request_id_is_the_unit_without_a_user() -> None:
    s = spec(traffic=0.5)
    assert assign(s, None, "r1") == assign(s, "r1", "ignored")
    assert assign(s, "", "r1") == assign(s, None, "r1")


def test_salts_give_independent_assignments() -> None:
    a = np.array([unit_hash("s1", f"u{i}") for i in range(5000)])
    b = np.array([unit_hash("s2", f"u{i}") for i in range(5000)])
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05
    assert a.min() >= 0.0 and a.max() < 1.0


def test_spec_refuses_bad_values() -> None:
    with pytest.raises(ValidationError):
        spec(traffic=0.0)
    with pytest.raises(ValidationError):
        spec(traffic=1.5)
    with pytest.raises(ValidationError, match="control version itself"):
        ExperimentSpec(**{**spec().model_dump(), "candidate": "v1"})
