"""Click credit per impression of an experiment, from the service's logs.

Interleaving (team-draft credit, Radlinski et al. 2008): an impression is a win for the
candidate when results of its team got more clicks than the control's, a loss when fewer, a tie
when equal; the difference of the two teams' clicks is kept too (what decisions test). A/B:
clicks and click DCG (sum over clicked results of 1 / log2(1 + position)) per impression,
summed per assignment unit (the user, else the request) of each arm.

The array functions here are also what the simulator benchmark feeds, so the offline
experiment and the served one are credited by the same code.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.experiments.spec import CANDIDATE, CONTROL, ExperimentSpec
from trainer.clicks.logs import ClickLogs
from trainer.experiments.statistics import ArmTotals


def interleaving_outcomes(control_clicks: np.ndarray, candidate_clicks: np.ndarray) -> np.ndarray:
    """+1 / -1 / 0 per impression (int8 [m]) from each team's click count (int [m])."""
    return np.sign(np.asarray(candidate_clicks) - np.asarray(control_clicks)).astype(np.int8)


def team_clicks(clicks: np.ndarray, teams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clicks per team (int64 [m] each) from clicks (0/1 [m, n]) and teams (int [m, n]);
    clicks on BOTH (results either coin would have served alike:
    app.experiments.team_draft) count for neither."""
    c = np.asarray(clicks, dtype=np.int64)
    t = np.asarray(teams)
    return (c * (t == CONTROL)).sum(axis=1), (c * (t == CANDIDATE)).sum(axis=1)


def click_dcg(clicks: np.ndarray) -> np.ndarray:
    """Click DCG per impression (float64 [m]) of clicks (0/1 [m, n], by served position)."""
    c = np.asarray(clicks, dtype=np.float64)
    discount = 1.0 / np.log2(np.arange(2, c.shape[1] + 2))
    return c @ discount


def arm_totals(
    units: np.ndarray, arms: np.ndarray, metric: np.ndarray, arm: int, n_units: int
) -> ArmTotals:
    """Per-unit sums of one arm (units int [m] in 0..n_units-1, arms int [m], metric [m])."""
    mask = np.asarray(arms) == arm
    u = np.asarray(units)[mask]
    present = np.bincount(u, minlength=n_units) > 0
    return ArmTotals(
        impressions=np.bincount(u, minlength=n_units)[present].astype(np.float64),
        metric=np.bincount(u, weights=np.asarray(metric)[mask], minlength=n_units)[present],
    )


@dataclass(frozen=True)
class ExperimentCredit:
    """Everything the statistics need, one entry per impression of the experiment, by time."""

    spec: ExperimentSpec
    ts: np.ndarray  # float64 [m] unix seconds, sorted
    outcomes: np.ndarray  # int8 [m] (interleave; 0 without clicks)
    differences: np.ndarray  # float64 [m] (interleave): candidate-team minus control-team clicks
    clicked: np.ndarray  # bool [m]: the impression got any click
    arms: np.ndarray  # int8 [m] (ab)
    units: np.ndarray  # int64 [m] (ab), index of the assignment unit
    clicks: np.ndarray  # float64 [m]
    dcg: np.ndarray  # float64 [m]
    skipped: int  # impressions of the experiment that could not be credited (bad record)

    @property
    def impressions(self) -> int:
        return int(self.ts.size)


def credit_from_logs(logs: ClickLogs, spec: ExperimentSpec) -> ExperimentCredit:
    """Credit every impression of experiment `spec` in `logs` (clicks only count once per
    request and result, as /feedback already ensures)."""
    clicked_ids: dict[str, set[Any]] = defaultdict(set)
    for event in logs.feedback:
        if event.type == "click":
            clicked_ids[event.request_id].add(_key(event.id))
    unit_index: dict[str, int] = {}
    rows: list[tuple[float, int, int, int, int, float, int]] = []
    skipped = 0
    seen: set[str] = set()
    for imp in logs.impressions:
        exp = imp.experiment
        if exp is None or exp.get("name") != spec.name or imp.request_id in seen:
            continue
        seen.add(imp.request_id)
        hits = clicked_ids.get(imp.request_id, set())
        flags = np.fromiter((_key(i) in hits for i in imp.ids), dtype=bool, count=len(imp.ids))
        n_clicks = int(flags.sum())
        dcg = float((1.0 / np.log2(imp.positions[flags] + 1.0)).sum())
        unit = imp.user_id or imp.request_id
        index = unit_index.setdefault(unit, len(unit_index))
        if spec.mode == "interleave":
            teams = exp.get("teams")
            if teams is None:
                skipped += 1
                continue
            t = np.asarray(teams, dtype=np.int64)
            diff = int((flags & (t == CANDIDATE)).sum() - (flags & (t == CONTROL)).sum())
            rows.append((imp.ts, int(np.sign(diff)), 0, index, n_clicks, dcg, diff))
        else:
            arm = exp.get("arm")
            if arm not in ("control", "candidate"):
                skipped += 1
                continue
            rows.append((imp.ts, 0, int(arm == "candidate"), index, n_clicks, dcg, 0))
    rows.sort(key=lambda r: r[0])
    table = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    return ExperimentCredit(
        spec=spec,
        ts=table[:, 0],
        outcomes=table[:, 1].astype(np.int8),
        differences=table[:, 6],
        clicked=table[:, 4] > 0,
        arms=table[:, 2].astype(np.int8),
        units=table[:, 3].astype(np.int64),
        clicks=table[:, 4],
        dcg=table[:, 5],
        skipped=skipped,
    )


def _key(candidate_id: Any) -> Any:
    # JSON ids are str or int; a click on "7" is not a click on 7.
    return (type(candidate_id).__name__, candidate_id)
