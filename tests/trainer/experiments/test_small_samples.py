"""Statistics at the edges: arms whose clicks never vary, one user per arm, no data, and an
interleaving experiment the candidate wins every time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from app.impressions.sink import feedback_record, impression_record, to_json
from app.registry.experiments import ExperimentRecord
from tests.support.experiments import interleave_spec
from tests.trainer.experiments.conftest import NF
from trainer.clicks.logs import read_logs
from trainer.experiments.analysis import ExperimentAnalysis, analyse
from trainer.experiments.credit import credit_from_logs
from trainer.experiments.decision import DecisionPolicy, decide
from trainer.experiments.report import summary_lines
from trainer.experiments.statistics import ArmTotals, ab_result, interleaving_result

AB = interleave_spec(name="abx", salt="s", mode="ab")


def arm(n: int, clicks_each: float) -> ArmTotals:
    return ArmTotals(np.ones(n), np.full(n, clicks_each))


def ab_logs(path: Path, users_per_arm: int) -> Path:
    """The tester's log: one impression per user, the candidate's always clicked, the
    control's never."""
    lines: list[bytes] = []
    features = np.zeros((2, NF), dtype=np.float32)
    for i in range(users_per_arm):
        for side in ("control", "candidate"):
            rid = f"{side}-{i}"
            experiment: dict[str, Any] = {"name": AB.name, "mode": "ab", "arm": side}
            record = impression_record(
                rid, "q", f"u-{rid}", None, "m", "v1", ["a", "b"], features, 1e9 + i, experiment
            )
            lines.append(to_json(record))
            if side == "candidate":
                events = [{"id": "a", "type": "click", "value": None}]
                lines.append(to_json(feedback_record(rid, events, ts=1e9 + i + 0.5)))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_arms_without_variance_still_test_their_difference() -> None:
    r = ab_result("clicks", arm(200, 0.0), arm(200, 1.0))
    assert (r.control, r.candidate, r.difference) == (0.0, 1.0, 1.0)
    # The pooled two-proportion z-test (p = 1/2; with the delta method's n / (n - 1)).
    z = 1 / math.sqrt(2 * 0.25 / 200 * 200 / 199)
    assert r.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-6, abs=0)
    assert r.p_always_valid < 1e-10
    # Agresti-Caffo: (201 - 1) / 202 +- 1.96 sqrt(2 (1/202)(201/202) / 202).
    assert r.ci_low == pytest.approx(0.9764, abs=2e-3) and 0.999 < r.ci_high < 1.01
    assert math.isnan(r.relative)
    assert orjson.loads(orjson.dumps(r.to_json()))["relative"] is None
    same = ab_result("clicks", arm(200, 0.0), arm(200, 0.0))
    assert same.p_value == 1.0 and same.p_always_valid == 1.0
    assert same.ci_low < 0 < same.ci_high  # 0 clicks in 200 does not prove a rate of 0


def test_one_user_per_arm_shows_its_mean_and_no_interval() -> None:
    r = ab_result("clicks", arm(1, 0.0), arm(1, 1.0))
    assert (r.control, r.candidate, r.difference) == (0.0, 1.0, 1.0)
    assert math.isnan(r.ci_low) and math.isnan(r.ci_high)
    assert r.p_value == 1.0 and r.p_always_valid == 1.0
    empty = ab_result("clicks", arm(0, 0.0), arm(0, 0.0))
    assert math.isnan(empty.control) and math.isnan(empty.ci_low)
    assert empty.p_value == 1.0 and empty.p_always_valid == 1.0
    out = orjson.loads(orjson.dumps(empty.to_json()))
    assert out["control"] is None and out["ci_low"] is None and out["p_value"] == 1.0


def test_report_and_decide_on_the_testers_logs(tmp_path: Path) -> None:
    record = ExperimentRecord(spec=AB)
    analysis = analyse(credit_from_logs(read_logs(ab_logs(tmp_path / "a.jsonl", 200)), AB))
    (clicks_line,) = [line for line in summary_lines(record, analysis) if "clicks/" in line]
    assert "control 0.0000 candidate 1.0000 diff +1.0000 (95 % CI +0.97" in clicks_line
    assert "relative change n/a" in clicks_line and "+0.0 %" not in clicks_line
    decision = decide(analysis, DecisionPolicy(min_impressions=100))
    assert decision.action == "promote"
    tiny = analyse(credit_from_logs(read_logs(ab_logs(tmp_path / "b.jsonl", 1)), AB))
    lines = summary_lines(record, tiny)
    assert any("control 0.0000 candidate 1.0000" in line for line in lines)
    assert any("95 % CI n/a (too few users)" in line for line in lines)
    (tmp_path / "c.jsonl").write_bytes(b"")
    empty = analyse(credit_from_logs(read_logs(tmp_path / "c.jsonl"), AB))
    lines = summary_lines(record, empty)
    assert any("control n/a candidate n/a" in line for line in lines), lines
    assert not any("nan" in line or "+0.0000 .. +0.0000" in line for line in lines)
    assert decide(empty, DecisionPolicy(min_impressions=1)).action == "continue"
    lonely = ab_result("clicks", arm(0, 0.0), arm(5, 1.0))  # no control impression yet
    arms = {"control": 0, "candidate": 5}
    only_candidate = ExperimentAnalysis("ab", 5, None, {"clicks": lonely}, arms)
    decision = decide(only_candidate, DecisionPolicy(min_impressions=1))
    assert decision.action == "continue" and "difference n/a" in decision.reason


@pytest.mark.parametrize(("n", "low"), [(200, 0.4812), (20, 0.3389), (5, 0.0655)])
def test_an_interleaving_sweep_has_a_wilson_interval(n: int, low: float) -> None:
    r = interleaving_result(np.ones(n, dtype=np.int8))
    # Wilson's lower bound for n of n is n / (n + z^2); the preference is the share - 1/2.
    assert r.ci_low == pytest.approx(n / (n + 1.959963984540054**2) - 0.5, abs=1e-9)
    assert r.ci_low == pytest.approx(low, abs=1e-4) and r.ci_high == 0.5
    lost = interleaving_result(-np.ones(n, dtype=np.int8))
    assert (lost.ci_low, lost.ci_high) == pytest.approx((-0.5, -r.ci_low))


def test_interleaving_intervals_hold_the_estimate_and_none_without_clicks() -> None:
    rng = np.random.default_rng(0)
    s = rng.choice(np.array([-1, 0, 1]), size=300, p=[0.3, 0.2, 0.5])
    r = interleaving_result(s)
    assert r.ci_low < r.preference < r.ci_high
    assert r.ci_high - r.ci_low == pytest.approx(2 * 1.96 * math.sqrt(0.25 / 300), rel=0.1)
    none = interleaving_result(np.array([], dtype=np.int8), impressions=4)
    assert math.isnan(none.ci_low) and math.isnan(none.ci_high)
    assert orjson.loads(orjson.dumps(none.to_json()))["ci_low"] is None
