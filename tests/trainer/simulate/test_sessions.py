"""`ltr simulate --clicks --sessions N`: multi-session click logs in the service's format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trainer.cli import app
from trainer.clicks.join import join_logs
from trainer.clicks.logs import read_logs
from trainer.data.loader import load_dataset

runner = CliRunner()


@pytest.mark.parametrize("fmt", ["parquet", "letor"])
def test_sessions_are_written_as_service_logs(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--rows", "1200", "--users", "30", "--clicks"]
    result = runner.invoke(app, [*args, "--sessions", "3", "--format", fmt, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    train_file = out / summary["splits"]["train"]["file"]
    train = load_dataset(train_file)
    log = summary["click_log"]
    assert (log["file"], log["sessions"]) == ("click_logs.jsonl", 3)
    assert log["impressions"] == 3 * train.num_queries

    joined = join_logs(read_logs(out / "click_logs.jsonl"))
    data = joined.dataset
    assert data.num_queries == 3 * train.num_queries and data.num_docs == 3 * train.num_docs
    assert int((data.labels > 0).sum()) == log["clicks"]
    assert np.all(np.diff(joined.times) > 0)  # sessions one after another, lists in order
    # Session 0 is the simulator's own log: the train file's positions and clicks.
    first = data.subset_queries(np.arange(train.num_queries))
    assert first.positions is not None and train.positions is not None
    for q in range(0, train.num_queries, 7):
        lo, hi = train.group_offsets[q], train.group_offsets[q + 1]
        order = np.argsort(train.positions[lo:hi], kind="stable")
        flo, fhi = first.group_offsets[q], first.group_offsets[q + 1]
        np.testing.assert_array_equal(first.features[flo:fhi], train.features[lo:hi][order])
    if fmt == "letor":
        clicks = np.loadtxt(f"{train_file}.click")
    else:
        clicks = pq.read_table(train_file).column("click").to_numpy()
    assert int((first.labels > 0).sum()) == int(clicks.sum())
    # Later sessions replay the logging ranker with fresh noise: other orders, other clicks.
    second = data.subset_queries(np.arange(train.num_queries, 2 * train.num_queries))
    assert not np.array_equal(second.features, first.features)


def test_the_logs_feed_ltr_dataset(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--rows", "1500", "--users", "30", "--clicks"]
    result = runner.invoke(app, [*args, "--sessions", "2"])
    assert result.exit_code == 0, result.output
    assert "(2 sessions per train query" in result.stdout
    data_dir = tmp_path / "data"
    args = ["dataset", "--from-logs", str(out / "click_logs.jsonl"), "--out", str(data_dir)]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["skipped"] == "" and summary["valid_lists"] > 0
    theta = json.loads((data_dir / "propensities.json").read_text())["theta"]
    assert theta[0] == 1.0 and theta[1] < 0.9  # examination falls with position


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sessions", "2"], "--sessions 2: give a number >= 1, with --clicks"),
        (["--clicks", "--sessions", "0"], "--sessions 0: give a number >= 1"),
    ],
)
def test_bad_sessions(tmp_path: Path, extra: list[str], message: str) -> None:
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "x"), *extra])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert not (tmp_path / "x").exists()
