from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.artifacts.manifest import Manifest, MissingValueRule
from tests.trainer.clicks.conftest import feedback, impression, write_log, write_pbm_log
from tests.trainer.commands.conftest import one_error_line
from trainer.cli import app
from trainer.commands.dataset import parse_time
from trainer.data.parquet import read_parquet


def _logs(tmp_path: Path, n: int = 40) -> Path:
    records = []
    for i in range(n):
        records.append(impression(f"r{i}", ["a", "b", "c"], 1000.0 + i))
        if i % 2 == 0:
            records.append(feedback(f"r{i}", ("a", "click"), ("c", "purchase")))
    return write_log(tmp_path / "logs" / "service.jsonl", records)


def _manifest(tmp_path: Path, names: list[str], **fields: Any) -> Path:
    manifest = Manifest(
        **fields,
        name="m",
        version="v1",
        kind="lambdamart",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        feature_names=names,
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
    )
    folder = tmp_path / "v1"
    folder.mkdir()
    (folder / "manifest.json").write_text(manifest.model_dump_json())
    return folder


def test_writes_parquet_split_by_time_and_propensities(runner: CliRunner, tmp_path: Path) -> None:
    _logs(tmp_path)
    out = tmp_path / "data"
    model_dir = _manifest(tmp_path, ["ts", "slot"])
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(out)]
    result = runner.invoke(
        app, [*args, "--manifest", str(model_dir), "--valid-fraction", "0.25", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["train_lists"], summary["valid_lists"]) == (30, 10)
    assert summary["train_until"] < summary["valid_from"]
    train, valid = read_parquet(out / "train.parquet"), read_parquet(out / "valid.parquet")
    assert train.feature_names == ["ts", "slot"]
    assert train.features[:, 0].max() < valid.features[:, 0].min()  # no leakage
    np.testing.assert_array_equal(train.labels[:6], [1, 0, 2, 0, 0, 0])
    assert train.positions is not None and train.positions[:3].tolist() == [1, 2, 3]
    assert pq.read_schema(out / "train.parquet").names[:3] == ["qid", "label", "ts"]
    theta = json.loads((out / "propensities.json").read_text())["theta"]
    assert theta[0] == 1.0 and len(theta) == 3


def test_a_dataset_is_never_written_over_another(runner: CliRunner, tmp_path: Path) -> None:
    """A second run into the same --out wrote over the data and left the first run's
    propensities.json beside it (a held-out trial): it is refused, and nothing half-written is
    left under --out's parent."""
    _logs(tmp_path)
    out = tmp_path / "data"
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(out)]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    again = runner.invoke(app, [*args, "--no-propensities"])
    assert again.exit_code == 2
    assert again.stderr.startswith(f"error: --out {out}: not empty")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written
    (tmp_path / "empty").mkdir()
    args[-1] = str(tmp_path / "empty")
    assert runner.invoke(app, args).exit_code == 0  # an empty directory is taken
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "empty", "logs"]


def test_a_model_with_query_features_is_told_how_to_keep_them(
    runner: CliRunner, tmp_path: Path
) -> None:
    _logs(tmp_path)
    model_dir = _manifest(tmp_path, ["ts", "slot"], feature_sources={"slot": "query"})
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "data")]
    result = runner.invoke(app, [*args, "--manifest", str(model_dir)])
    assert result.exit_code == 0, result.output
    assert "note: m's query and item-store features are plain columns here" in result.stderr
    (tmp_path / "plain").mkdir()
    plain = _manifest(tmp_path / "plain", ["ts", "slot"])
    result = runner.invoke(app, [*args[:-1], str(tmp_path / "d2"), "--manifest", str(plain)])
    assert result.exit_code == 0 and "note:" not in result.stderr


def test_valid_after_iso_time(runner: CliRunner, tmp_path: Path) -> None:
    _logs(tmp_path)
    cut = dt.datetime.fromtimestamp(1029.0, dt.UTC).isoformat()
    args = ["dataset", "--from-logs", str(tmp_path / "logs" / "service.jsonl")]
    args += ["--out", str(tmp_path / "d"), "--valid-after", cut, "--no-propensities", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["train_lists"], summary["valid_lists"]) == (30, 10)
    assert not (tmp_path / "d" / "propensities.json").exists()


def test_propensities_from_pbm_logs(runner: CliRunner, tmp_path: Path) -> None:
    sim = write_pbm_log(tmp_path / "l.jsonl", 1500, docs=6, seed=5)
    args = ["dataset", "--from-logs", str(tmp_path / "l.jsonl"), "--out", str(tmp_path / "d")]
    result = runner.invoke(app, [*args, "--valid-fraction", "0.1", "--json"])
    assert result.exit_code == 0, result.output
    theta = np.array(orjson.loads(result.stdout)["propensities"]["theta"])
    assert np.abs(theta - sim.theta).max() < 0.1, theta


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--valid-after", "5", "--valid-fraction", "0.2"], "not both"),
        (["--valid-after", "yesterday"], "expected Unix seconds or an ISO 8601"),
        (["--valid-after", "99999"], "no logged list was served after"),
        (["--valid-fraction", "1.5"], "valid_fraction must be in (0, 1)"),
        (["--manifest", "nowhere"], "nowhere: no such file"),
        # Grades the training data readers take: a purchase worth 100 was written, then refused.
        (["--purchase", "100"], "--purchase 100: a relevance grade 0..31"),
        (["--click", "-1"], "--click -1: a relevance grade 0..31"),
        (["--dwell", "nan"], "--dwell nan: a relevance grade 0..31"),
        (["--dwell-seconds", "inf"], "--dwell-seconds inf: a number of seconds >= 0"),
    ],
)
def test_errors(runner: CliRunner, tmp_path: Path, extra: list[str], message: str) -> None:
    _logs(tmp_path)
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "d")]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 2
    assert message in one_error_line(result.stderr)


def test_bad_log_line_is_located(runner: CliRunner, tmp_path: Path) -> None:
    path = _logs(tmp_path)
    with path.open("ab") as f:
        f.write(b'{"kind": "nope"}\n')
    result = runner.invoke(app, ["dataset", "--from-logs", str(path), "--out", str(tmp_path / "d")])
    assert result.exit_code == 2
    assert "service.jsonl:61: bad log record" in one_error_line(result.stderr)


def test_parse_time() -> None:
    assert parse_time("12.5") == 12.5
    assert parse_time("1970-01-01T00:01:00") == 60.0
    assert parse_time("1970-01-01T01:00:00+01:00") == 0.0


def _two_models_logs(tmp_path: Path) -> Path:
    """20 lists served by model "m" and 20 by "other", alternating, all with clicks."""
    records = []
    for i in range(40):
        records.append(impression(f"r{i}", ["a", "b"], 1000.0 + i, model="m" if i % 2 else "other"))
        records.append(feedback(f"r{i}", ("a", "click")))
    return write_log(tmp_path / "logs" / "service.jsonl", records)


def test_manifest_filters_other_models_and_says_so(runner: CliRunner, tmp_path: Path) -> None:
    _two_models_logs(tmp_path)
    model_dir = _manifest(tmp_path, ["ts", "slot"])  # model name "m"
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--manifest", str(model_dir)]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "d"), "--no-propensities"])
    assert result.exit_code == 0, result.output
    assert "left out 20 impressions: 20 served by models other than 'm' ('other': 20)" in (
        result.stdout
    )
    result = runner.invoke(
        app, [*args, "--out", str(tmp_path / "e"), "--no-propensities", "--all-models", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["train_lists"] + summary["valid_lists"], summary["skipped"]) == (40, "")


def test_no_impression_of_the_manifests_model_names_the_others(
    runner: CliRunner, tmp_path: Path
) -> None:
    records = [impression(f"r{i}", ["a", "b"], 1000.0 + i, model="ranker-b") for i in range(5)]
    write_log(tmp_path / "logs" / "l.jsonl", records)
    model_dir = _manifest(tmp_path, ["ts", "slot"])
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "d")]
    result = runner.invoke(app, [*args, "--manifest", str(model_dir)])
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"error: {tmp_path / 'logs'}: the logs hold no impressions to train on: of 5 logged, "
        "5 served by models other than 'm' ('ranker-b': 5)"
    )
    result = runner.invoke(
        app, [*args, "--manifest", str(model_dir), "--model", "x", "--all-models"]
    )
    assert result.exit_code == 2
    assert "--model or --all-models, not both" in one_error_line(result.stderr)


@pytest.mark.parametrize("rotate", [False, True])
def test_logs_that_never_move_a_document_are_warned_about(
    runner: CliRunner, tmp_path: Path, rotate: bool
) -> None:
    """A held-out trial: on one fixed ranker's logs the estimate stayed near raw click ratios
    (0.43 at position 2 against a true 0.50), and nothing said why."""
    records = []
    for q in range(100):
        ids = [f"{q}-a", f"{q}-b", f"{q}-c"]
        for k in range(3):
            served = ids[k:] + ids[:k] if rotate else ids
            ts = 1000.0 + 3 * q + k
            records.append(impression(f"r{q}-{k}", served, ts, query_id=f"q{q}"))
            records.append(feedback(f"r{q}-{k}", (served[0], "click"), ts=ts + 0.5))
    write_log(tmp_path / "logs" / "service.jsonl", records)
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "d")]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    variation = orjson.loads(result.stdout)["propensities"]["position_variation"]
    assert variation == {
        "repeated_pairs": 300,
        "moved_pairs": 300 if rotate else 0,
        "explored_impressions": 0,
    }
    warned = "the logs hardly vary positions (one fixed ranker?)" in result.stderr
    assert warned is not rotate
    assert ("LTR_EXPLORATION_SHARE" in result.stderr) is not rotate


def test_explored_impressions_are_counted_and_a_bad_explored_field_refused(
    runner: CliRunner, tmp_path: Path
) -> None:
    records = []
    for q in range(10):
        ids = [f"{q}-a", f"{q}-b", f"{q}-c"]
        explored = ids[2:3] + ids[1:2] + ids[0:1] if q % 2 else ids  # the first swapped with 3
        records.append(
            {**impression(f"r{q}", explored, 1000.0 + q), **({"explored": 3} if q % 2 else {})}
        )
        records.append(feedback(f"r{q}", (explored[0], "click"), ts=1000.5 + q))
    write_log(tmp_path / "logs" / "service.jsonl", records)
    args = ["dataset", "--from-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "d")]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    variation = orjson.loads(result.stdout)["propensities"]["position_variation"]
    assert variation["explored_impressions"] == 5
    for bad in (1, 4, True, "3"):
        records[0] = {**records[0], "explored": bad}
        write_log(tmp_path / "bad" / "service.jsonl", records)
        out = ["dataset", "--from-logs", str(tmp_path / "bad"), "--out", str(tmp_path / "e")]
        result = runner.invoke(app, out)
        assert result.exit_code == 2
        line = one_error_line(result.stderr)
        assert "service.jsonl:1" in line and "'explored' must be a position from 2 to 3" in line
