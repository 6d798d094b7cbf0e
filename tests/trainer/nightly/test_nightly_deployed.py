"""With a model deployed, `ltr nightly` fails closed: no demo model over it, no candidate that
could not be compared with it, none gated against a version that is no longer CURRENT, and a
refusal says so with its own exit code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import trainer.nightly.run as nightly_run
from app.artifacts.store import read_current
from tests.trainer.nightly.conftest import DEMO, write_config
from trainer.cli import app
from trainer.commands.errors import CommandError
from trainer.data.letor import write_letor
from trainer.data.loader import load_dataset
from trainer.nightly.config import load_config
from trainer.nightly.run import NightlyRefused, run_nightly


def _with_demo_fallback(tmp_path: Path, data_dir: Path) -> Path:
    """write_config's file with the shipped config's `bundled_demo = true`."""
    path = write_config(tmp_path, data_dir)
    path.write_text(path.read_text().replace("[data]\n", "[data]\nbundled_demo = true\n"))
    return path


@pytest.mark.parametrize("empty", [False, True], ids=["missing", "empty"])
def test_no_data_is_an_error_over_a_deployed_model(
    deployed: Path, tmp_path: Path, empty: bool
) -> None:
    before = read_current(deployed, "nightly")
    data_dir = tmp_path / "no-data-tonight"
    if empty:
        data_dir.mkdir()
    # A gate as lenient as can be: before the fix the demo model replaced the deployed one.
    lenient = {"gate.relative_tolerance": 1.0}
    config = load_config(_with_demo_fallback(tmp_path, data_dir), lenient)
    assert config.data.bundled_demo
    with pytest.raises(CommandError, match="no-data-tonight: training data directory") as info:
        run_nightly(config)
    assert "bundled_demo applies only before a first model is deployed" in str(info.value)
    assert read_current(deployed, "nightly") == before


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Partitions of the demo data with only its first 40 features: other columns than the
    deployed model's."""
    root = tmp_path_factory.mktemp("narrow")
    data = load_dataset(DEMO / "rank.train")
    data = type(data)(
        features=np.ascontiguousarray(data.features[:, :40]),
        labels=data.labels,
        group_offsets=data.group_offsets,
        query_ids=data.query_ids,
    )
    halves = np.array_split(np.arange(data.num_queries), 2)
    for day, queries in zip(("2026-11-22", "2026-11-23"), halves, strict=True):
        (root / day).mkdir()
        write_letor(data.subset_queries(queries), root / day / "part-0.txt")
    return root


def test_a_candidate_the_deployed_model_cannot_score_is_refused(
    deployed: Path, narrow: Path, tmp_path: Path
) -> None:
    before = read_current(deployed, "nightly")
    config = write_config(tmp_path, narrow)
    with pytest.raises(NightlyRefused, match=r"gate\.allow_feature_change"):
        run_nightly(load_config(config))
    assert read_current(deployed, "nightly") == before
    # The operator opts in for one run: published, and the report says it was not compared.
    result = CliRunner().invoke(
        app, ["nightly", "--config", str(config), "--allow-feature-change", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["status"] == "published" and out["previous"] == before
    assert any("cannot score" in n for n in out["gate"]["notes"])


def test_a_deployed_model_that_does_not_load_refuses_unless_allowed(
    deployed: Path, partitioned: Path, tmp_path: Path
) -> None:
    before = read_current(deployed, "nightly")
    assert before is not None
    model = deployed / "nightly" / before / "model.json"
    model.write_bytes(model.read_bytes().replace(b"{", b"{ ", 1))  # sha256 no longer matches
    config = write_config(tmp_path, partitioned)
    with pytest.raises(NightlyRefused, match="deployed model does not load"):
        run_nightly(load_config(config))
    assert read_current(deployed, "nightly") == before
    allowed = run_nightly(load_config(config, {"gate.allow_broken_deployed": True}))
    assert allowed.published.previous == before


def test_current_moved_during_the_gate_refuses(
    deployed: Path, partitioned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = read_current(deployed, "nightly")
    # Both runs pass the gate: only the order of events refuses the first.
    config = load_config(write_config(tmp_path, partitioned), {"gate.relative_tolerance": 1.0})
    real_gate = nightly_run.run_gate
    other: list[str] = []

    def gate_while_another_run_publishes(*args: object, **kwargs: object) -> object:
        result = real_gate(*args, **kwargs)  # type: ignore[arg-type]
        if not other:  # the other run: it starts and finishes while this one gates
            other.append("running")
            other.append(run_nightly(config).published.version)
        return result

    monkeypatch.setattr(nightly_run, "run_gate", gate_while_another_run_publishes)
    with pytest.raises(NightlyRefused, match="deployed model changed during the run") as info:
        run_nightly(config)
    assert other[-1] != before and read_current(deployed, "nightly") == other[-1]
    assert f"gated against {before}" in str(info.value)
    report = json.loads((info.value.report_dir / "report.json").read_text())
    assert not report["gate"]["passed"]


def test_a_refusal_has_its_own_exit_code_and_json(
    deployed: Path, partitioned: Path, tmp_path: Path
) -> None:
    before = read_current(deployed, "nightly")
    config = write_config(tmp_path, partitioned, num_trees=1, num_leaves=2)
    result = CliRunner().invoke(app, ["nightly", "--config", str(config), "--json"])
    assert result.exit_code == 3, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["status"] == "refused" and out["previous"] == before
    assert any("below the deployed model" in r for r in out["reasons"])
    assert Path(out["report"]).is_file()
    assert read_current(deployed, "nightly") == before
    # Bad input stays 2.
    bad = CliRunner().invoke(app, ["nightly", "--config", str(tmp_path / "missing.toml")])
    assert bad.exit_code == 2


def test_help_states_the_exit_codes_and_what_bootstrap_trains_on() -> None:
    output = CliRunner().invoke(app, ["nightly", "--help"]).output
    text = " ".join(output.replace("│", " ").split())
    assert "3 refused" in text and "2 bad input" in text and "1 unexpected crash" in text
    assert "on the data's partitions when there are some" in text
