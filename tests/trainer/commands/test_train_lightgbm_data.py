"""`ltr train --engine lightgbm` refusing what LightGBM's lambdarank refuses itself, naming the
file and line (or row) instead of LightGBM's bare message, and without LightGBM's own
`[LightGBM] [Fatal]` line on stderr; label 31, which the readers accept, trains."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner, Result

from app.artifacts.store import load_version
from trainer.cli import app

from .conftest import one_error_line

FAST = ["--engine", "lightgbm", "--num-trees", "3", "--num-leaves", "3", "--threads", "1"]


def _letor(path: Path, labels: list[list[float]], header: str = "") -> Path:
    """One query per inner list, documents with two features; `header` lines come first."""
    rng = np.random.default_rng(0)
    lines = [header] if header else []
    for qid, query in enumerate(labels):
        for label in query:
            a, b = rng.random(2)
            lines.append(f"{label:g} qid:{qid} 1:{a:.4f} 2:{b:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(runner: CliRunner, data: Path, out: Path, *extra: str) -> Result:
    args = ["train", "--train", str(data), "--out", str(out), *FAST, *extra]
    return runner.invoke(app, args)


def _graded(n_queries: int = 6, per_query: int = 8) -> list[list[float]]:
    return [[float(d % 4) for d in range(per_query)] for _ in range(n_queries)]


def _refusal(result: Result, capfd: pytest.CaptureFixture[str]) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    line = one_error_line(result.stderr)
    # LightGBM writes its fatal line to file descriptor 2 itself, past the runner.
    assert "[LightGBM]" not in capfd.readouterr().err
    return line


def test_a_fractional_label_is_refused_at_its_line(
    runner: CliRunner, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    labels = _graded()
    labels[2][3] = 1.5  # line 1 is the comment: 2 queries of 8, then the 4th document
    data = _letor(tmp_path / "train.txt", labels, header="# graded by hand")
    line = _refusal(_train(runner, data, tmp_path / "v"), capfd)
    assert line.startswith(f"error: {data}:21: label 1.5 is not a whole grade: "), line
    assert "--engine native" in line
    assert not (tmp_path / "v").exists()


def test_a_fractional_validation_label_is_refused_at_its_line(
    runner: CliRunner, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    train = _letor(tmp_path / "train.txt", _graded())
    labels = _graded(2)
    labels[1][0] = 0.25
    valid = _letor(tmp_path / "valid.txt", labels)
    line = _refusal(_train(runner, train, tmp_path / "v", "--valid", str(valid), "--json"), capfd)
    assert line.startswith(f"error: {valid}:9: label 0.25 is not a whole grade"), line


def test_a_fractional_label_in_parquet_is_refused_at_its_row(
    runner: CliRunner, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = np.array([q % 3 for q in range(40)], dtype=np.float64)
    labels[17] = 2.5
    table = pa.table(
        {
            "qid": np.repeat(np.arange(5), 8),
            "label": labels,
            "f1": np.random.default_rng(1).random(40),
        }
    )
    data = tmp_path / "train.parquet"
    pq.write_table(table, data)
    line = _refusal(_train(runner, data, tmp_path / "v"), capfd)
    assert line.startswith(f"error: {data}: row 18, column 'label': label 2.5 is not"), line


def test_label_31_trains(runner: CliRunner, tmp_path: Path) -> None:
    """The readers accept grades 0..31; LightGBM's default label_gain (31 entries) refused 31:
    `Label 31 is not less than the number of label mappings (31)`."""
    labels = _graded()
    labels[1][2] = 31
    data = _letor(tmp_path / "train.txt", labels)
    result = _train(runner, data, tmp_path / "v", "--json")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["engine"] == "lightgbm"
    assert load_version(Path(summary["model_dir"])).manifest.version == "v"


def test_a_query_beyond_lightgbms_limit_is_refused_with_the_native_engine_suggested(
    runner: CliRunner, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """LightGBM said only `Number of rows 10001 exceeds upper limit of 10000 for a query`."""
    labels = [[float(d % 3) for d in range(5)], [float(d % 4) for d in range(10_001)]]
    data = _letor(tmp_path / "train.txt", labels)
    line = _refusal(_train(runner, data, tmp_path / "v"), capfd)
    assert line.startswith(f"error: {data}:6: qid 1 has 10,001 documents: "), line
    assert "limits a query to 10,000 rows" in line and "--engine native" in line
