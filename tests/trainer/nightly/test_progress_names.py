"""Training on debiased click logs, validation is the mean DCG of IPW labels (often above 1):
the progress lines and the report name it so, not ndcg@10."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
from typer.testing import CliRunner

from tests.trainer.clicks.conftest import write_pbm_log
from tests.trainer.nightly.conftest import write_logs_config
from trainer.cli import app


def test_progress_names_ipw_dcg_on_debiased_logs(tmp_path: Path) -> None:
    log_file = tmp_path / "clicks.jsonl"
    write_pbm_log(log_file, 240, docs=6, seed=5)
    config = write_logs_config(tmp_path, str(log_file), "default", num_trees=5)
    result = CliRunner().invoke(app, ["nightly", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("iter ")]
    assert lines and all(
        re.match(r"iter \d+/5 train raw-click ndcg@10 [\d.]+ valid IPW dcg@10 [\d.]+", line)
        for line in lines
    ), lines
    version = orjson.loads(result.stdout)["version"]
    report_dir = tmp_path / "registry" / "default" / version
    report = orjson.loads((report_dir / "report.json").read_bytes())
    assert report["history_metrics"] == {"train": "raw-click ndcg@10", "valid": "IPW dcg@10"}
    assert "valid IPW dcg@10</text>" in (report_dir / "report.html").read_text()
