"""Click logs written by the service's own record format, and position-based-model clicks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.impressions.sink import feedback_record, impression_record, to_json


def write_log(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(to_json(r) + b"\n" for r in records))
    return path


def impression(
    request_id: str, ids: list[Any], ts: float, nf: int = 2, **kw: Any
) -> dict[str, Any]:
    """Row j of the features is (ts, j, ...): rows can be traced back after the join."""
    rows = np.zeros((len(ids), nf), dtype=np.float32)
    rows[:, 0] = ts
    rows[:, 1] = np.arange(len(ids))
    options = {
        "query_id": "q",
        "user_id": None,
        "user_cluster": None,
        "model": "m",
        "version": "v1",
    }
    options.update(kw)
    return impression_record(
        request_id,
        options["query_id"],
        options["user_id"],
        options["user_cluster"],
        options["model"],
        options["version"],
        ids,
        rows,
        ts=ts,
    )


def feedback(
    request_id: str, *events: tuple[Any, str] | tuple[Any, str, float], ts: float = 0.0
) -> dict[str, Any]:
    return feedback_record(
        request_id,
        [{"id": e[0], "type": e[1], "value": e[2] if len(e) > 2 else None} for e in events],
        ts=ts,
    )


@dataclass(frozen=True)
class PBMClicks:
    positions: np.ndarray  # int64 [n], 1-based
    clicks: np.ndarray  # int8 [n]
    features: np.ndarray  # float32 [n, 2]
    relevance: np.ndarray  # float64 [n], P(click | examined)
    offsets: np.ndarray  # int64 [n_queries + 1]
    theta: np.ndarray  # float64 [docs_per_query], the true examination


def pbm_clicks(n_queries: int, docs: int = 10, eta: float = 1.0, seed: int = 0) -> PBMClicks:
    """Each query: `docs` documents with a relevance feature and a noise feature; a noisy
    logging ranker orders them by the relevance feature; clicks follow PBM."""
    rng = np.random.default_rng(seed)
    n = n_queries * docs
    x = rng.normal(size=(n, 2)).astype(np.float32)
    relevance = 1.0 / (1.0 + np.exp(-(2.0 * x[:, 0] - 1.0)))
    logging_score = x[:, 0] + rng.gumbel(size=n)
    order = np.argsort(-logging_score.reshape(n_queries, docs), axis=1, kind="stable")
    positions = np.empty((n_queries, docs), dtype=np.int64)
    np.put_along_axis(positions, order, np.arange(1, docs + 1)[None, :], axis=1)
    positions = positions.ravel()
    theta = (1.0 / np.arange(1, docs + 1)) ** eta
    clicks = (rng.random(n) < theta[positions - 1] * relevance).astype(np.int8)
    offsets = np.arange(0, n + 1, docs, dtype=np.int64)
    return PBMClicks(positions, clicks, x, relevance, offsets, theta)


def write_pbm_log(path: Path, n_queries: int, docs: int, seed: int) -> PBMClicks:
    """Write a log of `n_queries` served lists with clicks from the position-based model (each
    list in served order, a feedback record for its clicked candidates); returns the clicks."""
    sim = pbm_clicks(n_queries, docs=docs, seed=seed)
    records = []
    for q in range(n_queries):
        rows = slice(q * docs, q * docs + docs)
        order = np.argsort(sim.positions[rows])
        ids = [int(i) for i in order]
        rec = impression(f"r{q}", ids, float(q))
        rec["features"] = sim.features[rows][order]
        records.append(rec)
        clicked = [(i, "click") for i in ids if sim.clicks[rows][i]]
        if clicked:
            records.append(feedback(f"r{q}", *clicked))
    write_log(path, records)
    return sim
