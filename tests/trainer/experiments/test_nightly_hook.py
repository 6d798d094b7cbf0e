"""The nightly job's experiment steps: decide the running experiment, start a new one."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.artifacts.store import read_current
from app.registry.experiments import find_record, read_active
from tests.support import publish, random_ensemble
from tests.trainer.experiments.conftest import NF, write_logs
from trainer.commands.errors import CommandError
from trainer.experiments.lifecycle import start_experiment
from trainer.experiments.nightly import decide_running, start_for_candidate
from trainer.nightly.config import NightlyConfig, load_config
from trainer.publish import PublishResult


def config(registry: Path, logs: Path) -> NightlyConfig:
    return NightlyConfig.model_validate(
        {
            "model": {"name": "m"},
            "publish": {"registry": str(registry)},
            "experiment": {"enabled": True, "logs": str(logs), "min_impressions": 500},
        }
    )


def test_experiment_needs_logs(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text("[experiment]\nenabled = true\n")
    with pytest.raises(CommandError, match=r"experiment\.enabled needs experiment\.logs"):
        load_config(path)


def test_nightly_decides_the_running_experiment(registry: Path, tmp_path: Path) -> None:
    spec = start_experiment(registry, "m", "v2", mode="interleave", traffic=0.5)
    logs = write_logs(tmp_path / "imp.jsonl", spec, 1200, candidate_share=0.7)
    cfg = config(registry, logs)
    decided = decide_running(cfg)
    assert decided is not None and decided["action"] == "promote"
    assert read_current(registry, "m") == "v2" and read_active(registry, "m") is None
    assert find_record(registry, spec.name).status == "promoted"
    assert decide_running(cfg) is None  # nothing runs any more


def test_a_new_candidate_waits_while_an_experiment_runs(registry: Path, tmp_path: Path) -> None:
    cfg = config(registry, tmp_path / "imp.jsonl")
    installed = PublishResult("m", "v2", "v1", registry / "m" / "v2", [], False)
    started = start_for_candidate(cfg, installed)
    assert started is not None and started["candidate"] == "v2" and started["control"] == "v1"
    publish(registry, random_ensemble(NF, seed=9), version="v3", current=False)
    later = PublishResult("m", "v3", "v1", registry / "m" / "v3", [], False)
    assert start_for_candidate(cfg, later) is None
    running = read_active(registry, "m")
    assert running is not None and running.candidate == "v2"
