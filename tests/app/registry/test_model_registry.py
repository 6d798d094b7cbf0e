from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

from app import metrics
from app.artifacts.store import set_current
from app.registry import (
    AmbiguousModel,
    ModelNotAvailable,
    ModelRegistry,
    UnknownModel,
)
from app.settings import Settings
from tests.support import ReferenceScorer, publish, random_ensemble, reference_loader

NF = 4


def failures(name: str = "m") -> float:
    return metrics.RELOAD_FAILURES.labels(name)._value.get()


def make_registry(tmp_path: Path, loader=reference_loader, **kw) -> ModelRegistry:
    return ModelRegistry(
        Settings(registry=tmp_path, parallel_min_rows=16, **kw), scorer_loader=loader
    )


def reload(registry: ModelRegistry, name: str | None = None, force: bool = False):
    return asyncio.run(registry.reload(name, force=force))


def test_loads_current_and_swaps_to_a_new_version(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    registry = make_registry(tmp_path)
    assert not registry.ready
    with pytest.raises(ModelNotAvailable):
        registry.get()
    report = reload(registry)
    assert report.loaded == [("m", "v1")] and registry.ready
    old = registry.get()
    assert old.version == "v1" and registry.get("m") is old

    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    assert reload(registry).loaded == [("m", "v2")]
    new = registry.get()
    assert new.version == "v2"
    # The old model a request may still hold is untouched and still scores.
    x = np.zeros((2, NF), dtype=np.float32)
    assert old.version == "v1" and old.scorer.score(x).shape == (2,)
    assert reload(registry).unchanged == [("m", "v2")]
    assert metrics.MODEL_INFO.labels("m", "v2", "lambdamart")._value.get() == 1


def test_a_corrupt_version_is_refused_once_and_the_old_one_keeps_serving(
    tmp_path: Path,
) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    publish(tmp_path, random_ensemble(NF, seed=3), version="v2")
    model_file = tmp_path / "m" / "v2" / "model.json"
    model_file.write_bytes(model_file.read_bytes()[:-100])  # truncated
    before = failures()
    report = reload(registry)
    assert report.failed and report.failed[0][:2] == ("m", "v2")
    assert "sha256" in report.failed[0][2]
    assert registry.get().version == "v1" and registry.ready
    assert failures() == before + 1
    assert "v2" in registry.errors()["m"]
    reload(registry)  # the poll does not retry the same refused version
    assert failures() == before + 1
    reload(registry, force=True)  # an explicit trigger does
    assert failures() == before + 2


@pytest.mark.parametrize("problem", ["missing_version", "bad_version_id", "wrong_name"])
def test_bad_current_targets_are_refused(tmp_path: Path, problem: str) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    if problem == "wrong_name":
        publish(tmp_path, random_ensemble(NF), name="other", version="v9")
        (tmp_path / "other" / "v9").rename(tmp_path / "m" / "v9")
        set_current(tmp_path, "m", "v9")
    else:
        text = "v404" if problem == "missing_version" else "../../etc"
        (tmp_path / "m" / "CURRENT").write_text(text + "\n")
    report = reload(registry, "m")
    assert len(report.failed) == 1, report
    assert registry.get().version == "v1"


def test_scorers_that_disagree_with_the_manifest_or_misbehave_are_refused(
    tmp_path: Path,
) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")

    class Wide(ReferenceScorer):
        def __init__(self, ensemble):
            super().__init__(ensemble)
            self.num_features = NF + 1

    class NaNs(ReferenceScorer):
        def score(self, features, user=None):
            return np.full(features.shape[0], np.nan)

    class Short(ReferenceScorer):
        def score(self, features, user=None):
            return np.zeros(1)

    for cls in (Wide, NaNs, Short):
        registry = make_registry(
            tmp_path, loader=lambda a, cls=cls: cls(reference_loader(a).ensemble)
        )
        report = reload(registry)
        assert report.failed and not registry.ready, cls


def test_a_failing_on_load_hook_refuses_the_version(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")
    seen = []

    def hook(manifest, files):
        seen.append((manifest.version, sorted(files)))
        raise ValueError("embeddings.npy: bad")

    registry = ModelRegistry(
        Settings(registry=tmp_path), scorer_loader=reference_loader, on_load=hook
    )
    report = reload(registry)
    assert seen == [("v1", ["model.json"])]
    assert "embeddings.npy: bad" in report.failed[0][2]


def test_current_moving_during_a_load_ends_on_the_newest(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")
    publish(tmp_path, random_ensemble(NF), version="v2", current=False)
    calls = []

    def loader(artifact):
        calls.append(artifact.manifest.version)
        if len(calls) == 1:  # a publish lands while v1 loads
            set_current(tmp_path, "m", "v2")
        return reference_loader(artifact)

    registry = make_registry(tmp_path, loader=loader)
    report = reload(registry)
    assert calls == ["v1", "v2"] and report.loaded == [("m", "v2")]
    assert registry.get().version == "v2"


def test_rollback_is_followed_when_current_points_back(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    publish(tmp_path, random_ensemble(NF), version="v2")
    reload(registry)
    set_current(tmp_path, "m", "v1")
    reload(registry)
    assert registry.get().version == "v1"


def test_model_selection(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF), name="a", version="v1")
    publish(tmp_path, random_ensemble(NF), name="b", version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    assert {registry.get("a").name, registry.get("b").name} == {"a", "b"}
    with pytest.raises(AmbiguousModel):
        registry.get()
    with pytest.raises(UnknownModel):
        registry.get("c")
    chosen = make_registry(tmp_path, default_model="b")
    assert not chosen.ready
    reload(chosen, "a")
    assert not chosen.ready  # the default is not loaded yet
    reload(chosen)
    assert chosen.ready and chosen.get().name == "b"


def test_until_the_first_scan_ends_a_model_not_loaded_is_not_available(tmp_path: Path) -> None:
    """A compose trial: while the service loaded its models one by one, a request for the
    second got 404 "unknown model" for ~0.2 s, which reads as permanent; and one naming no
    model was scored by the first loaded, then refused as ambiguous once both were in."""
    publish(tmp_path, random_ensemble(NF), name="a", version="v1")
    publish(tmp_path, random_ensemble(NF), name="b", version="v1")
    registry = make_registry(tmp_path)
    reload(registry, "a")  # as the first scan, part way
    assert registry.get("a").name == "a"
    with pytest.raises(ModelNotAvailable, match="'b' is not available: not loaded yet"):
        registry.get("b")
    with pytest.raises(ModelNotAvailable, match="not all loaded yet"):
        registry.get()
    reload(registry)
    with pytest.raises(UnknownModel):
        registry.get("c")
    with pytest.raises(AmbiguousModel):
        registry.get()


def test_a_model_that_failed_to_load_is_unavailable_not_unknown(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF), name="a", version="v1")
    publish(tmp_path, random_ensemble(NF), name="b", version="v1")
    (tmp_path / "b" / "v1" / "model.json").write_bytes(b"{}")
    registry = make_registry(tmp_path)
    reload(registry)
    with pytest.raises(ModelNotAvailable, match="sha256"):
        registry.get("b")


def test_the_poll_picks_up_a_new_version(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF), version="v1")
    registry = make_registry(tmp_path)

    async def scenario() -> str:
        await registry.reload()
        watcher = asyncio.create_task(registry.watch(0.02))
        try:
            await asyncio.to_thread(publish, tmp_path, random_ensemble(NF), version="v2")
            for _ in range(500):
                if registry.get().version == "v2":
                    break
                await asyncio.sleep(0.01)
        finally:
            watcher.cancel()
        return registry.get().version

    assert asyncio.run(scenario()) == "v2"


def test_an_empty_or_missing_registry_loads_nothing(tmp_path: Path) -> None:
    registry = make_registry(tmp_path / "nothing-here")
    report = reload(registry)
    assert report.loaded == report.failed == [] and not registry.ready


def test_why_nothing_serves_is_said_without_the_path_and_logged_with_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mistyped LTR_REGISTRY served 503 "no model loaded yet" with nothing in the log."""
    root = tmp_path / "reg"
    registry = make_registry(root)
    assert registry.why_none() == "no model loaded yet"  # before the first scan
    steps = [  # (a change, why nothing serves then, whether the scan logs it)
        (lambda: None, "the registry directory does not exist", True),
        (lambda: root.mkdir(), "the registry holds no model", True),
        (lambda: None, "the registry holds no model", False),  # the poll again: logged once
        (lambda: (root / "m" / "v1").mkdir(parents=True), "no model in the registry has a", True),
    ]
    for change, why, logs in steps:
        change()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="app.registry.model_registry"):
            reload(registry)
        assert registry.why_none().startswith(f"no model loaded yet: {why}")
        assert str(tmp_path) not in registry.why_none()
        with pytest.raises(ModelNotAvailable, match=why):
            registry.get()
        logged = [r.getMessage() for r in caplog.records]
        assert len(logged) == logs and all(why in m and str(root) in m for m in logged), logged
    publish(root, random_ensemble(NF), version="v2", name="m")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.registry.model_registry"):
        reload(registry)
    assert registry.ready and not caplog.records


def test_the_older_version_served_is_the_one_current_named_before_not_by_name(
    tmp_path: Path,
) -> None:
    # Free-form names: "v10" sorts before "v9", and "a-first" before both.
    publish(tmp_path, random_ensemble(NF, seed=1), version="v9")
    publish(tmp_path, random_ensemble(NF, seed=2), version="a-first", current=False)
    publish(tmp_path, random_ensemble(NF, seed=3), version="v10")
    (tmp_path / "m" / "v10" / "model.json").write_bytes(b"{}")
    registry = make_registry(tmp_path.resolve())
    reload(registry)
    assert registry.ready and registry.get().version == "v9"


def test_a_refused_current_at_start_serves_the_newest_valid_older_version(
    tmp_path: Path,
) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    publish(tmp_path, random_ensemble(NF, seed=3), version="v3")
    (tmp_path / "m" / "v2" / "model.json").write_bytes(b"{}")  # also broken
    (tmp_path / "m" / "v3" / "model.json").write_bytes(b"{}")
    registry = make_registry(tmp_path.resolve())
    report = reload(registry)
    assert registry.ready and registry.get().version == "v1"
    assert [f[1] for f in report.failed] == ["v3"] and report.loaded == [("m", "v1")]
    error = registry.errors()["m"]
    assert "version v3 refused" in error and "serving the older version v1" in error
    # Public texts name files relative to the registry, never the absolute path.
    assert str(tmp_path.resolve()) not in error and "m/v3/model.json" in error
    assert reload(registry).loaded == []  # the poll does not retry v3 (or step back again)
    publish(tmp_path, random_ensemble(NF, seed=4), version="v4")
    assert reload(registry).loaded == [("m", "v4")] and registry.errors() == {}


def test_an_unreadable_registry_keeps_serving_counts_failures_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator trial: a registry made unreadable logged a 20-line traceback every poll,
    counted no reload failure (the documented alert) and said nothing in /models."""
    import app.registry.model_registry as module

    publish(tmp_path, random_ensemble(NF), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    denied = PermissionError(13, "Permission denied", str(tmp_path))
    real_list = module.list_models

    def unreadable(root: Path) -> list[str]:
        raise denied

    monkeypatch.setattr(module, "list_models", unreadable)
    before = failures()

    async def polls(n: int) -> None:
        watcher = asyncio.create_task(registry.watch(0.01))
        for _ in range(500):
            if failures() >= before + n:
                break
            await asyncio.sleep(0.01)
        watcher.cancel()

    with caplog.at_level(logging.INFO, logger="app.registry.model_registry"):
        asyncio.run(polls(3))
    assert failures() >= before + 3 and registry.get().version == "v1" and registry.ready
    assert registry.errors()["m"].startswith("cannot read the registry: PermissionError")
    assert str(tmp_path) not in registry.errors()["m"]  # public: the log has the path
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None  # once, one line
    assert "still serving m/v1" in errors[0].getMessage()
    monkeypatch.setattr(module, "list_models", real_list)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="app.registry.model_registry"):
        reload(registry)
    assert "m" not in registry.errors()
    assert any("the registry readable again" in r.getMessage() for r in caplog.records)


def test_one_unreadable_model_directory_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.registry.model_registry as module

    publish(tmp_path, random_ensemble(NF), version="v1", name="a")
    publish(tmp_path, random_ensemble(NF), version="v1", name="b")
    registry = make_registry(tmp_path)
    real_read = module.read_current

    def read(root: Path, name: str) -> str | None:
        if name == "a":
            raise PermissionError(13, "Permission denied", str(root / name))
        return real_read(root, name)

    monkeypatch.setattr(module, "read_current", read)
    before = failures("a")
    reload(registry)
    publish(tmp_path, random_ensemble(NF, seed=5), version="v2", name="b")
    reload(registry)
    assert registry.get("b").version == "v2"  # b moved on although a cannot be read
    assert failures("a") == before + 2
    assert registry.errors()["a"].startswith("cannot read model a's directory")


def test_a_default_model_the_registry_does_not_serve_is_named_as_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """LTR_DEFAULT_MODEL=abc (a typo) answered /readyz 503 "no model loaded yet", logging
    nothing, while model m was loaded."""
    publish(tmp_path, random_ensemble(NF), version="v1")
    registry = make_registry(tmp_path, default_model="abc")
    with caplog.at_level(logging.WARNING, logger="app.registry.model_registry"):
        reload(registry)
        reload(registry)
    assert not registry.ready
    why = "the default model 'abc' (LTR_DEFAULT_MODEL) is not served; loaded: m"
    assert why in registry.why_none()
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and why in logged[0]  # once, though the scan ran twice
