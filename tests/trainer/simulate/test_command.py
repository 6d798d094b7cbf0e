"""`ltr simulate` end to end through the console app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainer.cli import app

runner = CliRunner()


def test_json_summary_matches_the_files(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--rows", "2000", "--users", "40", "--seed", "5"]
    result = runner.invoke(app, [*args, "--format", "letor", "--clicks", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows"] == 2000 and summary["users"] == 40 and summary["format"] == "letor"
    lines = sum(len((out / s["file"]).read_text().splitlines()) for s in summary["splits"].values())
    assert lines == 2000
    assert (out / "users.csv").read_text().splitlines()[0].startswith("user_id,country,age")
    assert (out / "train.txt.position").is_file() and (out / "train.txt.click").is_file()
    assert json.loads((out / "truth.json").read_text())["config"]["seed"] == 5


def test_plain_output_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path), "--rows", "500"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("wrote 500 rows (train ")
    assert (tmp_path / "train.parquet").is_file()


def test_bad_settings_give_one_clear_line(tmp_path: Path) -> None:
    cases = {
        ("--rows", "0"): "rows: Input should be greater than or equal to 1",
        ("--split", "0.5,0.5"): "--split '0.5,0.5': expected three fractions",
        ("--split", "a,b,c"): "expected three numbers",
        ("--min-docs", "9", "--max-docs", "3"): "docs_per_query must satisfy",
        ("--eta", "-1"): "eta: Input should be greater than or equal to 0",
    }
    for extra, message in cases.items():
        result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "x"), *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr


def test_out_must_be_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("")
    result = runner.invoke(app, ["simulate", "--out", str(target), "--rows", "100"])
    assert result.exit_code == 2
    assert "exists and is not a directory" in result.stderr


def test_out_holding_other_data_is_refused_and_the_same_run_repeats(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--rows", "300", "--users", "20"]
    assert runner.invoke(app, args).exit_code == 0
    first = (out / "train.parquet").read_bytes()
    again = runner.invoke(app, args)  # the same settings rewrite the same bytes
    assert again.exit_code == 0, again.output
    assert (out / "train.parquet").read_bytes() == first
    other = runner.invoke(app, [*args, "--seed", "1"])
    assert other.exit_code == 2
    assert "holds a dataset simulated with other settings" in other.stderr
    assert (out / "train.parquet").read_bytes() == first
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    refused = runner.invoke(app, ["simulate", "--out", str(busy), "--rows", "300"])
    assert refused.exit_code == 2 and "not empty and not a simulated dataset" in refused.stderr
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]


def test_fewer_rows_than_one_query_are_refused_and_empty_splits_named(tmp_path: Path) -> None:
    few = runner.invoke(app, ["simulate", "--out", str(tmp_path / "a"), "--rows", "5"])
    assert few.exit_code == 2 and "--rows 5: fewer than --min-docs 10" in few.stderr
    small = runner.invoke(app, ["simulate", "--out", str(tmp_path / "b"), "--rows", "12"])
    assert small.exit_code == 0, small.output
    assert "warning: vali got no queries" in small.stderr


def test_a_run_stopped_part_way_leaves_out_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C left a cut train.txt (56 MB, no truth.json) that `ltr train` took for a dataset
    (a held-out trial); an interrupted rerun of the same simulation then removed the whole
    earlier one. Now the run writes beside --out and renames at the end."""
    from trainer.simulate import generator

    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--rows", "2000"]
    assert runner.invoke(app, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = generator.open_split_writer
    calls = {"n": 0}

    def stopping(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:  # the first split's file is open and written to
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(generator, "open_split_writer", stopping)
    assert runner.invoke(app, args).exit_code != 0  # a rerun of the same simulation, stopped
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    calls["n"] = -100
    fresh = tmp_path / "fresh"
    assert runner.invoke(app, ["simulate", "--out", str(fresh), "--rows", "2000"]).exit_code == 0
    calls["n"] = 1
    assert runner.invoke(app, ["simulate", "--out", str(tmp_path / "new")]).exit_code != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "sim"]  # nothing hidden


def test_sigterm_leaves_nothing_half_written(tmp_path: Path) -> None:
    """`timeout`, `docker stop` and `kill` send SIGTERM, which ended the process where it
    stood: cut split files, no truth.json."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--rows", "3000000", "--format", "letor"]
    proc = subprocess.Popen([sys.executable, "-m", "trainer", *args], stderr=subprocess.PIPE)
    hidden = tmp_path / f".sim.writing-{proc.pid}"
    deadline = time.monotonic() + 60
    while not (hidden / "train.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert b"Traceback" not in err
    assert list(tmp_path.iterdir()) == []
