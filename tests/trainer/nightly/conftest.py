"""Shared nightly fixtures: the bundled demo data cut into daily partitions, a small config,
and a registry with a model deployed (trained once per session, copied per test)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from trainer.data.letor import write_letor
from trainer.data.loader import load_dataset

DEMO = Path(__file__).resolve().parents[3] / "trainer" / "demo_data"


@pytest.fixture(scope="session")
def partitioned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo data cut into three daily partitions (plus an undated file that is ignored)."""
    root = tmp_path_factory.mktemp("data")
    data = load_dataset(DEMO / "rank.train")
    thirds = np.array_split(np.arange(data.num_queries), 3)
    for day, queries in zip(("2026-11-19", "2026-11-20", "2026-11-21"), thirds, strict=True):
        (root / day).mkdir()
        write_letor(data.subset_queries(queries), root / day / "part-0.txt")
    (root / "notes.txt").write_text("not a partition")
    return root


def write_config(tmp_path: Path, data_dir: Path, **model: object) -> Path:
    lambdamart = {"num_trees": 20, "num_leaves": 15, "learning_rate": 0.1, "min_data_in_leaf": 5}
    lambdamart.update(model)  # type: ignore[arg-type]
    lines = [
        f'work_dir = "{tmp_path / "work"}"',
        "[data]",
        f'dir = "{data_dir}"',
        "partitions = 3",
        "[model]",
        'name = "nightly"',
        "[model.lambdamart]",
        *(f"{k} = {v}" for k, v in lambdamart.items()),
        "[gate]",
        "tolerance = 0.0",
        "[publish]",
        f'registry = "{tmp_path / "registry"}"',
        "keep = 3",
    ]
    path = tmp_path / "nightly.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_logs_config(tmp_path: Path, source: str, name: str, num_trees: int = 10) -> Path:
    """A small config training on the service's logs at `source` (file, directory or URL),
    the newest quarter of the lists held out."""
    lines = [
        f'work_dir = "{tmp_path / "work"}"',
        "[data]",
        'source = "logs"',
        f'dir = "{source}"',
        "holdout_fraction = 0.25",
        "[model]",
        f'name = "{name}"',
        "[model.lambdamart]",
        f"num_trees = {num_trees}",
        "num_leaves = 4",
        "min_data_in_leaf = 5",
        "[publish]",
        f'registry = "{tmp_path / "registry"}"',
    ]
    path = tmp_path / "nightly.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def deployed_template(tmp_path_factory: pytest.TempPathFactory, partitioned: Path) -> Path:
    """A registry where run_nightly published `nightly` once (60 trees), for copying."""
    from trainer.nightly.config import load_config
    from trainer.nightly.run import run_nightly

    root = tmp_path_factory.mktemp("deployed")
    run_nightly(load_config(write_config(root, partitioned, num_trees=60)))
    return root / "registry"


@pytest.fixture
def deployed(deployed_template: Path, tmp_path: Path) -> Path:
    """This test's registry, with the template's model deployed (the same path write_config
    points at)."""
    shutil.copytree(deployed_template, tmp_path / "registry")
    return tmp_path / "registry"
