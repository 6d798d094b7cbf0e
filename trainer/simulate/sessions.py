"""Click logs of several sessions per query, in the service's own log format.

Head queries come back in real traffic: each training query of a simulated dataset is served
`sessions` times. Session 0 is the simulator's own log (the positions and clicks written with
the train split); every further session replays its logging ranker and click model
(trainer.simulate.clicks) with fresh noise. Every session is written as the service writes
impressions and click feedback (app.impressions.sink, JSONL), so `ltr dataset --from-logs`
reads it as it reads production logs: one list per session and query, served at time
`session * n_queries + query` (Unix seconds), the feedback half a second later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.impressions.sink import feedback_record, impression_record, to_json
from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset
from trainer.simulate.clicks import ClickModel
from trainer.simulate.writer import split_file_name

MODEL_NAME, MODEL_VERSION = "sim", "1"  # what the logs say served the lists


@dataclass(frozen=True)
class SessionLogs:
    train: RankingDataset  # the train split with its true relevance grades
    theta: np.ndarray  # float64 [max_docs]: the true examination by position
    attractiveness: np.ndarray  # float64 [5]: click probability of an examined grade
    impressions: int
    clicks: int


def _first_session_clicks(path: Path) -> np.ndarray:
    """The simulator's own clicks, int8 [n_docs]: the Parquet column or the `.click` file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        column = pq.read_table(path, columns=["click"]).column("click")
        return np.asarray(column.to_numpy(), dtype=np.int8)
    return np.loadtxt(f"{path}.click", dtype=np.int8, ndmin=1)


def write_session_logs(sim_dir: Path, fmt: str, sessions: int, seed: int, out: Path) -> SessionLogs:
    """Write `sessions` serves of every train query of the `ltr simulate --clicks` output in
    `sim_dir` (format `fmt`) to the JSONL file `out`."""
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}")
    truth = json.loads((sim_dir / "truth.json").read_text())["clicks"]
    if truth is None:
        raise ValueError(f"{sim_dir}: simulated without clicks")
    model = ClickModel(truth["eta"], truth["epsilon"], truth["logging_policy"]["logging_noise"])
    path = sim_dir / split_file_name("train", fmt)
    data = load_dataset(path)
    first = _first_session_clicks(path)
    if data.positions is None or first.shape != (data.num_docs,):
        raise ValueError(f"{path}: no served positions and clicks to replay")
    offsets = data.group_offsets
    query_index = np.repeat(np.arange(data.num_queries), np.diff(offsets))
    labels = data.labels.astype(np.int64)
    users = data.user_ids
    rng = np.random.default_rng(seed)
    impressions = total_clicks = 0
    with out.open("wb") as log:
        for s in range(sessions):
            if s == 0:
                positions, clicks = data.positions, first
            else:
                positions = model.serve(data.features, query_index, offsets, rng)
                clicks = model.click(positions, labels, rng)
            total_clicks += int(clicks.sum())
            for q in range(data.num_queries):
                lo, hi = offsets[q], offsets[q + 1]
                order = lo + np.argsort(positions[lo:hi], kind="stable")
                rid = f"s{s}q{q}"
                ts = float(s * data.num_queries + q)
                user = None if users is None else str(users[q])
                ids = [int(i) for i in order]
                imp = impression_record(
                    rid, q, user, None, MODEL_NAME, MODEL_VERSION, ids, data.features[order], ts
                )
                log.write(to_json(imp) + b"\n")
                impressions += 1
                clicked = [
                    {"id": int(i), "type": "click", "value": None} for i in order[clicks[order] > 0]
                ]
                if clicked:
                    log.write(to_json(feedback_record(rid, clicked, ts=ts + 0.5)) + b"\n")
    return SessionLogs(
        train=data,
        theta=np.asarray(truth["theta"], dtype=np.float64),
        attractiveness=np.asarray(truth["attractiveness"], dtype=np.float64),
        impressions=impressions,
        clicks=total_clicks,
    )
