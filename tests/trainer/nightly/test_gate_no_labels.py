"""A held-out set without a single positive label (click logs whose newest lists got no click,
or data exported with all-zero labels) scores every ranking alike: the gate refuses instead of
passing on a tie. One list with a positive label is enough to compare, as before."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version, read_current
from tests.trainer.clicks.conftest import write_pbm_log
from tests.trainer.nightly.conftest import write_config, write_logs_config
from trainer.cli import app
from trainer.data.letor import write_letor
from trainer.data.loader import load_dataset
from trainer.nightly.config import GateConfig, load_config
from trainer.nightly.gate import run_gate
from trainer.nightly.run import NightlyRefused, run_nightly

LISTS, HELD_OUT = 240, 60  # holdout_fraction 0.25: the newest 60 lists (impression ts = q)


def _drop_feedback(log_file: Path, clicked_from: int, keep: set[str]) -> None:
    """No feedback for lists r{clicked_from}... (the holdout) except the request ids `keep`."""
    lines = log_file.read_bytes().splitlines()
    held = {f"r{q}" for q in range(clicked_from, LISTS)} - keep
    kept = [
        line
        for line in lines
        if not (
            (record := orjson.loads(line))["kind"] == "feedback" and record["request_id"] in held
        )
    ]
    assert len(kept) < len(lines)
    log_file.write_bytes(b"".join(line + b"\n" for line in kept))


def test_a_click_free_holdout_of_click_logs_is_refused(tmp_path: Path) -> None:
    log_file = tmp_path / "clicks.jsonl"
    write_pbm_log(log_file, LISTS, docs=6, seed=5)
    # "m": the model that served write_pbm_log's lists (a deployed model reads only its own).
    config = write_logs_config(tmp_path, str(log_file), "m")
    runner = CliRunner()
    first = runner.invoke(app, ["nightly", "--config", str(config)])
    assert first.exit_code == 0, first.output
    deployed = read_current(tmp_path / "registry", "m")
    _drop_feedback(log_file, LISTS - HELD_OUT, keep=set())  # feedback stopped arriving
    result = runner.invoke(app, ["nightly", "--config", str(config), "--json"])
    assert result.exit_code == 3, result.output
    out = orjson.loads(result.stdout)
    assert out["status"] == "refused"
    (reason,) = out["reasons"]
    assert reason.startswith(f"the held-out set's {HELD_OUT} lists have no positive label")
    assert "nothing to compare on (dcg@10 is 0 for any ranking)" in reason
    assert read_current(tmp_path / "registry", "m") == deployed
    assert "no positive label" in result.stderr


def test_one_clicked_list_in_the_holdout_compares_as_before(tmp_path: Path) -> None:
    log_file = tmp_path / "clicks.jsonl"
    sim = write_pbm_log(log_file, LISTS, docs=6, seed=5)
    config = load_config(write_logs_config(tmp_path, str(log_file), "m"))
    run_nightly(config)
    clicked = [q for q in range(LISTS - HELD_OUT, LISTS) if sim.clicks[q * 6 : q * 6 + 6].any()]
    _drop_feedback(log_file, LISTS - HELD_OUT, keep={f"r{clicked[0]}"})
    try:
        gate = run_nightly(config).gate
    except NightlyRefused as exc:
        assert exc.gate is not None
        gate = exc.gate
    assert not any("no positive label" in r for r in gate.reasons)
    assert gate.deployed is not None and gate.deployed["dcg@10"] > 0


@pytest.fixture
def dated(partitioned: Path, tmp_path: Path) -> Path:
    """The demo partitions, the newest one's labels all zero (an export that lost them)."""
    root = tmp_path / "data"
    shutil.copytree(partitioned, root)
    newest = root / "2026-11-21" / "part-0.txt"
    held = load_dataset(newest)
    write_letor(replace(held, labels=np.zeros_like(held.labels)), newest)
    return root


def test_file_data_with_an_all_zero_holdout_is_refused(
    deployed: Path, dated: Path, tmp_path: Path
) -> None:
    before = read_current(deployed, "nightly")
    with pytest.raises(NightlyRefused, match=r"lists have no positive label") as info:
        run_nightly(load_config(write_config(tmp_path, dated)))
    assert info.value.gate is not None and info.value.gate.deployed is not None
    assert read_current(deployed, "nightly") == before


@pytest.mark.parametrize("positives", [0, 1])
def test_the_gate_needs_one_positive_label(
    deployed: Path, partitioned: Path, positives: int
) -> None:
    model = load_version(deployed / "nightly" / str(read_current(deployed, "nightly")))
    held = load_dataset(partitioned / "2026-11-21" / "part-0.txt")
    labels = np.zeros_like(held.labels)
    labels[:positives] = 1.0  # the first list's first document
    holdout = replace(held, labels=labels)
    gate = run_gate(model, model, holdout, GateConfig(tolerance=0.0))
    assert gate.passed is (positives > 0)
    assert gate.reasons == ([] if positives else [gate.reasons[0]])
    if not positives:
        assert f"{held.num_queries} lists have no positive label" in gate.reasons[0]
    # Nothing deployed: nothing is compared, and the note says the metrics are empty.
    alone = run_gate(model, None, holdout, GateConfig())
    assert alone.passed
    assert any("no positive label" in n for n in alone.notes) is (positives == 0)
