"""Impressions + feedback → query-grouped training data, split by time.

Each logged request is one query list (qid = request id) of the candidates it served, with
their served positions, the features the model scored and a label from the feedback:
the largest of click → `click`, purchase → `purchase`, dwell of at least `dwell_seconds` →
`dwell` (LabelRules); no feedback → 0. A request id logged twice keeps its earliest impression
by `ts` (the first in read order among equal times): the service checks feedback against the
first impression it served, and replicas' logs need not be read in time order. The same
(request, candidate, event type) counts once however often it was posted.

The validation part is the latest impressions: every validation list was served strictly
after every training list, so no training example comes from the validation period. Lists
served at the same time are never split between the two, so a fraction is met as closely as
the distinct times allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainer.clicks.logs import ClickLogs, Impression, LoggedFeedbackEvent, read_logs
from trainer.data.dataset import RankingDataset


@dataclass(frozen=True)
class LabelRules:
    click: float = 1.0
    purchase: float = 2.0
    dwell: float = 1.0
    dwell_seconds: float = 30.0  # shorter dwells count as no signal

    def label(self, event: LoggedFeedbackEvent) -> float:
        if event.type == "click":
            return self.click
        if event.type == "purchase":
            return self.purchase
        long_enough = event.value is not None and event.value >= self.dwell_seconds
        return self.dwell if long_enough else 0.0


@dataclass(frozen=True)
class JoinedLogs:
    dataset: RankingDataset  # query_ids = request ids; positions set
    times: np.ndarray  # float64 [n_queries], impression time (Unix seconds), non-decreasing
    stats: dict[str, int] = field(default_factory=dict)
    skipped: str = ""  # what was left out and why (Selection.describe), "" when nothing

    def subset(self, query_index: np.ndarray) -> JoinedLogs:
        return JoinedLogs(self.dataset.subset_queries(query_index), self.times[query_index])


def _labels(
    feedback: list[LoggedFeedbackEvent], rules: LabelRules
) -> tuple[dict[str, dict[object, float]], int]:
    """request id → candidate id → label, and how many events were repeats."""
    seen: set[tuple[str, object, str]] = set()
    labels: dict[str, dict[object, float]] = {}
    repeats = 0
    for event in feedback:
        key = (event.request_id, event.id, event.type)
        if key in seen:
            repeats += 1
            continue
        seen.add(key)
        per_request = labels.setdefault(event.request_id, {})
        per_request[event.id] = max(per_request.get(event.id, 0.0), rules.label(event))
    return labels, repeats


@dataclass
class Selection:
    """The impressions kept, and how many were left out for each reason."""

    chosen: list[Impression]
    empty: int = 0  # served no candidate
    repeated: int = 0  # a request id logged again
    other_models: dict[str, int] = field(default_factory=dict)  # model name → impressions
    other_widths: dict[int, int] = field(default_factory=dict)  # feature width → impressions

    @property
    def skipped(self) -> int:
        widths = sum(self.other_widths.values())
        return self.empty + self.repeated + sum(self.other_models.values()) + widths

    def describe(self, model: str | None, width: int | None) -> str:
        """What was left out and why, for a message; "" when nothing was."""
        parts = []
        if self.other_models:
            names = ", ".join(f"{n!r}: {c}" for n, c in sorted(self.other_models.items()))
            parts.append(
                f"{sum(self.other_models.values())} served by models other than {model!r} ({names})"
            )
        if self.other_widths:
            widths = ", ".join(f"{w}: {c}" for w, c in sorted(self.other_widths.items()))
            parts.append(
                f"{sum(self.other_widths.values())} with other feature widths than the "
                f"manifest's {width} ({widths})"
            )
        if self.repeated:
            parts.append(f"{self.repeated} repeating a logged request id")
        if self.empty:
            parts.append(f"{self.empty} with no candidates")
        return "; ".join(parts)


def _select(
    impressions: list[Impression], feature_names: list[str] | None, model: str | None
) -> Selection:
    """Impressions of the wanted model and feature width, the earliest per request id (by
    `ts`, then read order), sorted by time."""
    first: dict[str, Impression] = {}
    selection = Selection([])
    for imp in impressions:
        if not len(imp.ids):
            selection.empty += 1
        elif model is not None and imp.model != model:
            name = str(imp.model)
            selection.other_models[name] = selection.other_models.get(name, 0) + 1
        elif imp.request_id in first:
            selection.repeated += 1
            if imp.ts < first[imp.request_id].ts:
                first[imp.request_id] = imp
        else:
            first[imp.request_id] = imp
    chosen = list(first.values())
    widths = {imp.features.shape[1] for imp in chosen}
    if feature_names is not None:
        for imp in chosen:
            width = imp.features.shape[1]
            if width != len(feature_names):
                selection.other_widths[width] = selection.other_widths.get(width, 0) + 1
        chosen = [imp for imp in chosen if imp.features.shape[1] == len(feature_names)]
        if not chosen and widths:
            raise ValueError(
                f"no impression has {len(feature_names)} features (the manifest's feature "
                f"names); logged widths: {sorted(widths)}"
            )
    elif len(widths) > 1:
        raise ValueError(
            f"impressions have different feature widths {sorted(widths)}: choose one model "
            "(--model) or give its manifest (--manifest)"
        )
    chosen.sort(key=lambda imp: imp.ts)
    selection.chosen = chosen
    return selection


def join_logs(
    logs: ClickLogs,
    feature_names: list[str] | None = None,
    rules: LabelRules | None = None,
    model: str | None = None,
) -> JoinedLogs:
    """One query list per logged request, ordered by impression time."""
    rules = rules or LabelRules()
    selection = _select(logs.impressions, feature_names, model)
    impressions = selection.chosen
    if not impressions:
        width = None if feature_names is None else len(feature_names)
        left_out = selection.describe(model, width)
        raise ValueError(
            "the logs hold no impressions to train on"
            + (f": of {len(logs.impressions)} logged, {left_out}" if left_out else "")
        )
    labels, repeats = _labels(logs.feedback, rules)
    served = {imp.request_id: set(imp.ids) for imp in impressions}
    # Both kinds are dropped from the labels: count each, so the total matches what was lost.
    no_impression = sum(1 for e in logs.feedback if e.request_id not in served)
    not_served = sum(
        1 for e in logs.feedback if e.request_id in served and e.id not in served[e.request_id]
    )
    sizes = np.array([len(imp.ids) for imp in impressions], dtype=np.int64)
    label_rows = []
    for imp in impressions:
        given = labels.get(imp.request_id, {})
        label_rows.append(np.array([given.get(cid, 0.0) for cid in imp.ids], dtype=np.float64))
    users = [imp.user_id or imp.user_cluster for imp in impressions]
    dataset = RankingDataset(
        features=np.ascontiguousarray(np.concatenate([imp.features for imp in impressions])),
        labels=np.concatenate(label_rows),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.array([imp.request_id for imp in impressions], dtype=object),
        feature_names=feature_names,
        source="click logs",
        user_ids=None
        if all(u is None for u in users)
        else np.array(["" if u is None else str(u) for u in users], dtype=object),
        positions=np.concatenate([imp.positions for imp in impressions]),
        explored=np.array([imp.explored or 0 for imp in impressions], dtype=np.int64),
    )
    stats = {
        "impressions": len(impressions),
        "impressions_skipped": selection.skipped,
        "skipped_other_models": sum(selection.other_models.values()),
        "skipped_other_widths": sum(selection.other_widths.values()),
        "skipped_repeated": selection.repeated,
        "skipped_empty": selection.empty,
        "feedback_events": len(logs.feedback),
        "feedback_repeats": repeats,
        "feedback_orphans": no_impression + not_served,
        "feedback_orphans_no_impression": no_impression,
        "feedback_orphans_not_served": not_served,
        "clicked_lists": int(sum(1 for row in label_rows if row.max() > 0)),
    }
    times = np.array([imp.ts for imp in impressions], dtype=np.float64)
    width = None if feature_names is None else len(feature_names)
    return JoinedLogs(dataset, times, stats, selection.describe(model, width))


def split_by_time(
    joined: JoinedLogs, valid_after: float | None = None, valid_fraction: float | None = None
) -> tuple[JoinedLogs, JoinedLogs]:
    """(train, valid): valid = lists served after `valid_after` (Unix seconds), or the latest
    `valid_fraction` of them; lists served at the cut-off time all go to train."""
    if (valid_after is None) == (valid_fraction is None):
        raise ValueError("give exactly one of valid_after and valid_fraction")
    if valid_fraction is not None:
        valid_after = _fraction_cutoff(joined.times, valid_fraction)
    assert valid_after is not None
    if not math.isfinite(valid_after):
        raise ValueError(f"the cut-off time must be a finite number of seconds, got {valid_after}")
    is_valid = joined.times > valid_after
    if not is_valid.any() or is_valid.all():
        where = "after" if not is_valid.any() else "up to"
        raise ValueError(f"no logged list was served {where} the cut-off time {valid_after}")
    return joined.subset(np.flatnonzero(~is_valid)), joined.subset(np.flatnonzero(is_valid))


def _fraction_cutoff(times: np.ndarray, valid_fraction: float) -> float:
    """The cut-off time whose split of `times` [n] (non-decreasing) has validation lists
    closest in number to `valid_fraction` of them (at least one), both parts non-empty. A cut
    can only fall between two distinct times: lists served at the same second stay together."""
    n = times.size
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    if n < 2:
        raise ValueError(f"{n} logged list is too few to split")
    wanted = max(1, math.ceil(valid_fraction * n))
    if wanted >= n:
        raise ValueError(
            f"a validation fraction of {valid_fraction:g} of the {n} logged lists leaves none "
            f"to train on (at most {(n - 1) / n:.4g} leaves one)"
        )
    # Candidate training sizes: each index where the time steps up.
    cuts = np.flatnonzero(times[1:] > times[:-1]) + 1
    if cuts.size == 0:
        raise ValueError(
            f"all {n} logged lists were served at the same time {float(times[0])}: "
            "there is no time to split them at"
        )
    # Closest to the wanted validation size; on a tie, the larger training part.
    n_train = int(cuts[np.argmin(np.abs((n - cuts) - wanted) * 2 + (cuts < n - wanted))])
    return float(times[n_train - 1])


def dataset_from_logs(
    source: str | Path,
    manifest_feature_names: list[str] | None,
    valid_fraction: float,
    *,
    rules: LabelRules | None = None,
    model: str | None = None,
) -> tuple[RankingDataset, RankingDataset]:
    """(train, valid) from a log source (JSONL file or directory, or a redis:// URL): labels
    from feedback, served positions, validation = the latest `valid_fraction` of the lists."""
    joined = join_logs(read_logs(source), manifest_feature_names, rules, model)
    train, valid = split_by_time(joined, valid_fraction=valid_fraction)
    return train.dataset, valid.dataset
