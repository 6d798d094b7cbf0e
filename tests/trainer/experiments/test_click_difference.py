"""`decide` on interleaving tests the click difference per clicked impression: credit keeps
each team's clicks, the statistics test their difference, the direction follows it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from app.impressions.sink import feedback_record, impression_record, to_json
from app.registry.experiments import ExperimentRecord
from tests.support.experiments import interleave_spec
from tests.trainer.experiments.conftest import NF
from trainer.clicks.logs import read_logs
from trainer.experiments.analysis import analyse
from trainer.experiments.credit import credit_from_logs
from trainer.experiments.decision import DecisionPolicy, decide
from trainer.experiments.report import summary_lines
from trainer.experiments.statistics import click_difference_result, interleaving_result

SPEC = interleave_spec(name="cd", salt="s")


def _logs(path: Path, clicks: list[list[int]], teams: list[int]) -> Path:
    """One impression per entry of `clicks` (the clicked positions), all with `teams`."""
    lines: list[bytes] = []
    ids = [f"d{j}" for j in range(len(teams))]
    features = np.zeros((len(teams), NF), dtype=np.float32)
    for i, positions in enumerate(clicks):
        experiment: dict[str, Any] = {"name": SPEC.name, "mode": "interleave", "teams": teams}
        record = impression_record(
            f"r{i}", i, f"u{i}", None, "m", "v1", ids, features, ts=1e9 + i, experiment=experiment
        )
        lines.append(to_json(record))
        if positions:
            events = [{"id": ids[p], "type": "click", "value": None} for p in positions]
            lines.append(to_json(feedback_record(f"r{i}", events, ts=1e9 + i + 0.5)))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_credit_keeps_each_teams_clicks(tmp_path: Path) -> None:
    teams = [2, 1, 0, 1, 0, 1]  # position 0 is the common prefix (credited to neither)
    clicks = [[0], [1, 3], [2], [1, 2], [], [0, 1, 3, 5, 2]]
    credit = credit_from_logs(read_logs(_logs(tmp_path / "log.jsonl", clicks, teams)), SPEC)
    assert credit.differences.tolist() == [0, 2, -1, 0, 0, 2]
    assert credit.outcomes.tolist() == [0, 1, -1, 0, 0, 1]
    assert credit.clicked.tolist() == [True, True, True, True, False, True]


def test_the_click_difference_is_what_is_tested() -> None:
    outcomes = np.array([1, 1, -1, 0, 1])
    differences = np.array([2, 1, -1, 0, 3])
    r = interleaving_result(outcomes, differences=differences)
    assert r.click_difference == differences.mean() and r.direction == r.click_difference
    assert r.p_always_valid == click_difference_result(differences)[1]
    assert r.p_value == interleaving_result(outcomes).p_value  # the sign test stays
    plain = interleaving_result(outcomes)
    assert math.isnan(plain.click_difference) and plain.direction == plain.preference
    assert orjson.loads(orjson.dumps(plain.to_json()))["click_difference"] is None


def test_decide_follows_the_click_difference(tmp_path: Path) -> None:
    teams = [1, 0] * 5
    rng = np.random.default_rng(0)
    # The candidate's team gets two clicks or none, the control's one: more wins for the
    # control, more clicks for the candidate.
    clicks = [[0, 2] if rng.random() < 0.45 else [1] for _ in range(3000)]
    credit = credit_from_logs(read_logs(_logs(tmp_path / "log.jsonl", clicks, teams)), SPEC)
    analysis = analyse(credit)
    il = analysis.interleaving
    assert il is not None and il.preference < 0 < il.click_difference
    decision = decide(analysis, DecisionPolicy(min_impressions=100))
    assert decision.action == "promote" and decision.p_always_valid < 0.05
    assert "click difference" in decision.reason


def test_report_without_clicks_says_so(tmp_path: Path) -> None:
    teams = [2, 1, 0]
    record = ExperimentRecord(spec=SPEC)
    quiet = analyse(credit_from_logs(read_logs(_logs(tmp_path / "a.jsonl", [[], []], teams)), SPEC))
    lines = summary_lines(record, quiet)
    assert "click difference per clicked impression: n/a (no clicks yet)" in lines
    assert not any("nan" in line for line in lines)
    clicked = credit_from_logs(read_logs(_logs(tmp_path / "b.jsonl", [[1], []], teams)), SPEC)
    assert "click difference per clicked impression: +1.0000" in summary_lines(
        record, analyse(clicked)
    )
