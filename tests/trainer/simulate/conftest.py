"""Small simulated datasets shared by the simulator tests (generated once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.simulate import SimulationConfig, SimulationSummary, simulate


@pytest.fixture(scope="session")
def parquet_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    out = tmp_path_factory.mktemp("sim_parquet")
    config = SimulationConfig(rows=20_000, users=500, seed=7, format="parquet", clicks=True)
    return out, simulate(config, out)


@pytest.fixture(scope="session")
def letor_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    out = tmp_path_factory.mktemp("sim_letor")
    config = SimulationConfig(rows=20_000, users=500, seed=7, format="letor", clicks=True)
    return out, simulate(config, out)
