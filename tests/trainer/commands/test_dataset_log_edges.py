"""`ltr dataset --from-logs` on logs at their edges: a cut last line, a request id logged twice,
ties at the cut-off time, bad times, positions with few clicks."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from tests.trainer.clicks.conftest import feedback, impression, write_log, write_pbm_log
from tests.trainer.commands.conftest import one_error_line
from trainer.cli import app
from trainer.data.parquet import read_parquet


def _records(n: int = 40, t0: float = 1000.0) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        out.append(impression(f"r{i}", ["a", "b", "c"], t0 + i))
        out.append(feedback(f"r{i}", ("a", "click")))
    return out


def _dataset(runner: CliRunner, source: Path, out: Path, *extra: str) -> object:
    args = ["dataset", "--from-logs", str(source), "--out", str(out), "--no-propensities"]
    return runner.invoke(app, [*args, *extra])


def test_a_cut_last_line_is_skipped_with_a_warning_and_counted(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = write_log(tmp_path / "logs" / "a.jsonl", _records())
    with path.open("ab") as f:
        f.write(b'{"kind":"feedback","request_id":"r1","ts":1.0,"ev')  # the writer was killed
    write_log(tmp_path / "logs" / "b.jsonl", [impression("r99", ["a", "b"], 5000.0)])
    for source, lists in ((path, 40), (tmp_path / "logs", 41)):
        result = _dataset(runner, source, tmp_path / f"o{lists}", "--json")
        assert result.exit_code == 0, result.output
        assert f"warning: {path}:81: skipped an unreadable last line" in result.stderr
        summary = orjson.loads(result.stdout)
        assert summary["lines_truncated"] == 1 and summary["truncated_at"] == [f"{path}:81"]
        assert summary["train_lists"] + summary["valid_lists"] == lists
    clean = write_log(tmp_path / "clean.jsonl", _records())
    result = _dataset(runner, clean, tmp_path / "c", "--json")
    assert result.exit_code == 0 and "warning" not in result.stderr
    assert orjson.loads(result.stdout)["lines_truncated"] == 0


def test_a_request_id_logged_twice_keeps_the_earliest_in_time(
    runner: CliRunner, tmp_path: Path
) -> None:
    late = impression("r0", ["a_other", "b_other", "c_other"], 11_000.0)
    path = write_log(tmp_path / "l.jsonl", [late, *_records()])  # first in the file, not in time
    result = _dataset(runner, path, tmp_path / "o", "--json")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["feedback_orphans_not_served"] == 0 and summary["skipped_repeated"] == 1
    train = read_parquet(tmp_path / "o" / "train.parquet")
    assert train.query_ids[0] == "r0" and train.labels[:3].tolist() == [1, 0, 0]


def test_ties_at_the_cut_off_still_split(runner: CliRunner, tmp_path: Path) -> None:
    records = [impression(f"r{i}", ["a", "b"], 1000.0 if i < 30 else 2000.0) for i in range(40)]
    result = _dataset(runner, write_log(tmp_path / "l.jsonl", records), tmp_path / "o", "--json")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["train_lists"], summary["valid_lists"]) == (30, 10)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--valid-after", "nan"], "--valid-after 'nan': expected Unix seconds or an ISO 8601"),
        (["--valid-after", "inf"], "--valid-after 'inf': expected Unix seconds or an ISO 8601"),
        (["--valid-fraction", "0.99"], "0.99 of the 40 logged lists leaves none to train on"),
    ],
)
def test_bad_split_arguments(
    runner: CliRunner, tmp_path: Path, extra: list[str], message: str
) -> None:
    path = write_log(tmp_path / "l.jsonl", _records())
    result = _dataset(runner, path, tmp_path / "o", *extra)
    assert result.exit_code == 2
    assert message in one_error_line(result.stderr)


def test_a_null_time_says_ts_must_be_a_number(runner: CliRunner, tmp_path: Path) -> None:
    records = _records()
    records[3]["ts"] = None
    result = _dataset(runner, write_log(tmp_path / "l.jsonl", records), tmp_path / "o")
    assert result.exit_code == 2
    assert "l.jsonl:4: bad log record: 'ts' must be a number (Unix seconds), got None" in (
        one_error_line(result.stderr)
    )


def test_positions_with_few_clicks_are_pooled_and_named(runner: CliRunner, tmp_path: Path) -> None:
    # 300 lists of 30 under PBM (theta_k = 1/k): the deep positions get a click or none.
    path = tmp_path / "l.jsonl"
    write_pbm_log(path, 300, docs=30, seed=0)
    args = ["dataset", "--from-logs", str(path), "--out", str(tmp_path / "o"), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "o" / "propensities.json").read_text())
    # Before: theta 1e-06 at every position without a training click, a weight of 10^6.
    assert min(doc["theta"]) > 0.01, doc["theta"]
    assert all(a >= b for a, b in zip(doc["theta"], doc["theta"][1:], strict=False))
    last_group = doc["pooled_positions"][-1]
    assert last_group[1] == 30
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: fewer than 10 training clicks at positions ")
    assert f"{last_group[0]}-30)" in warning
