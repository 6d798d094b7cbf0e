"""The registry serves the experiment EXPERIMENT names beside CURRENT, verified like models."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from app.artifacts.store import set_current
from app.experiments.spec import ExperimentSpec
from app.registry import ModelRegistry
from app.registry.experiments import experiment_path, write_active
from app.settings import Settings
from tests.support import publish, random_ensemble, reference_loader

NF = 4


def make(tmp_path: Path) -> ModelRegistry:
    settings = Settings(registry=tmp_path, parallel_min_rows=16)
    return ModelRegistry(settings, scorer_loader=reference_loader)


def reload(registry: ModelRegistry, force: bool = False) -> None:
    asyncio.run(registry.reload(force=force))


def spec(candidate: str = "v2", control: str = "v1", name: str = "e1") -> ExperimentSpec:
    return ExperimentSpec(
        name=name,
        model="m",
        control=control,
        candidate=candidate,
        mode="interleave",
        traffic=0.5,
        salt="abc",
        started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )


def test_candidate_is_loaded_and_served_beside_current(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2", current=False)
    registry = make(tmp_path)
    reload(registry)
    assert registry.experiment("m") is None
    write_active(tmp_path, spec())
    reload(registry)
    active = registry.experiment("m")
    assert active is not None and active.spec == spec()
    assert active.candidate.version == "v2" and registry.get("m").version == "v1"
    experiment_path(tmp_path, "m").unlink()
    reload(registry)
    assert registry.experiment("m") is None


def test_a_tampered_experiment_file_is_refused(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2", current=False)
    write_active(tmp_path, spec())
    path = experiment_path(tmp_path, "m")
    path.write_text(path.read_text().replace('"traffic": 0.5', '"traffic": 1.0'))
    registry = make(tmp_path)
    reload(registry)
    assert registry.experiment("m") is None
    assert "sha256" in registry.experiments.errors["m"]
    path.write_text("{not json")
    reload(registry)
    assert registry.experiment("m") is None and "not a valid" in registry.experiments.errors["m"]


def test_an_incompatible_or_broken_candidate_is_refused(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    other = [f"g{i}" for i in range(NF)]
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2", current=False, names=other)
    write_active(tmp_path, spec())
    registry = make(tmp_path)
    reload(registry)
    assert registry.experiment("m") is None
    assert "feature names differ" in registry.experiments.errors["m"]
    assert registry.get("m").version == "v1"  # the control keeps serving
    write_active(tmp_path, spec(candidate="v9", name="e2"))
    reload(registry)
    assert registry.experiment("m") is None and "v9" in registry.experiments.errors["m"]


def test_experiment_pauses_when_current_is_not_its_control(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2", current=False)
    publish(tmp_path, random_ensemble(NF, seed=3), version="v3", current=False)
    write_active(tmp_path, spec())
    registry = make(tmp_path)
    reload(registry)
    assert registry.experiment("m") is not None
    set_current(tmp_path, "m", "v3")
    reload(registry)
    assert registry.get("m").version == "v3" and registry.experiment("m") is None
    assert "not serving" in registry.experiments.errors["m"]


def test_a_candidate_removed_from_the_registry_stops_being_served(tmp_path: Path) -> None:
    """A trial moved the running candidate's directory away: the running worker kept serving
    it from memory while a new one refused the experiment. Put back, it serves again without
    a forced reload (its files changed again)."""
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2", current=False)
    write_active(tmp_path, spec())
    registry = make(tmp_path)
    reload(registry)
    assert registry.experiment("m") is not None
    (tmp_path / "m" / "v2").rename(tmp_path / "away")
    reload(registry)
    assert registry.experiment("m") is None
    assert "experiment e1 refused" in registry.experiments.errors["m"]
    restarted = make(tmp_path)
    reload(restarted)
    assert restarted.experiments.errors["m"] == registry.experiments.errors["m"]
    (tmp_path / "away").rename(tmp_path / "m" / "v2")
    reload(registry)
    active = registry.experiment("m")
    assert active is not None and active.candidate.version == "v2"
    assert "m" not in registry.experiments.errors
