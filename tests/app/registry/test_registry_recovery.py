"""A black-box trial: refusals that outlived their cause, and a registry lost in silence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app import metrics
from app.artifacts.store import set_current
from app.errors import LtrError
from app.registry import ModelRegistry
from app.settings import Settings
from tests.support import publish, random_ensemble, reference_loader

NF = 4
LOGGER = "app.registry.model_registry"


def failures(name: str = "m") -> float:
    return metrics.RELOAD_FAILURES.labels(name)._value.get()


def make_registry(root: Path) -> ModelRegistry:
    return ModelRegistry(
        Settings(registry=root, parallel_min_rows=16), scorer_loader=reference_loader
    )


def reload(registry: ModelRegistry) -> None:
    asyncio.run(registry.reload())


def corrupt(root: Path, version: str) -> bytes:
    """Truncate the version's model file (as `truncate -s` did); its original bytes."""
    model_file = root / "m" / version / "model.json"
    original = model_file.read_bytes()
    model_file.write_bytes(original[: len(original) // 2])
    return original


def test_a_refused_version_is_retried_by_the_poll_once_its_files_change(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    original = corrupt(tmp_path, "v2")
    before = failures()
    reload(registry)
    reload(registry)  # unchanged: not retried, not counted again
    assert registry.get().version == "v1" and failures() == before + 1
    assert "version v2 refused" in registry.errors()["m"]

    (tmp_path / "m" / "v2" / "model.json").write_bytes(original)  # repaired in place
    reload(registry)
    assert registry.get().version == "v2" and registry.errors() == {}


def refused_at_start(root: Path) -> ModelRegistry:
    """v1, then v2 (CURRENT) corrupted, and a service started on that: it serves v1."""
    publish(root, random_ensemble(NF, seed=1), version="v1")
    publish(root, random_ensemble(NF, seed=2), version="v2")
    corrupt(root, "v2")
    registry = make_registry(root)
    reload(registry)
    assert registry.get().version == "v1"
    return registry


def test_a_version_refused_at_start_loads_once_removed_and_published_again(
    tmp_path: Path,
) -> None:
    registry = refused_at_start(tmp_path)  # a restart: the older version serves
    assert "serving the older version v1" in registry.errors()["m"]
    reload(registry)
    assert registry.get().version == "v1"

    shutil.rmtree(tmp_path / "m" / "v2")  # what the trial did: rm -rf, then ltr publish
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    reload(registry)
    assert registry.get().version == "v2" and registry.errors() == {}


def test_a_retried_copy_still_broken_is_refused_again_and_keeps_the_older_one(
    tmp_path: Path,
) -> None:
    registry = refused_at_start(tmp_path)
    before = failures()
    (tmp_path / "m" / "v2" / "model.json").write_bytes(b"{}")  # changed, still broken
    reload(registry)
    assert failures() == before + 1 and registry.get().version == "v1"
    assert "serving the older version v1" in registry.errors()["m"]


@pytest.mark.parametrize("how", ["by_hand", "rollback"])
def test_a_refusal_goes_from_errors_once_current_names_the_served_version(
    tmp_path: Path, how: str
) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    registry = make_registry(tmp_path)
    reload(registry)
    if how == "by_hand":  # CURRENT pointed at a version that is not there, then back
        (tmp_path / "m" / "CURRENT").write_text("nosuch\n")
        reload(registry)
        assert "version nosuch refused" in registry.errors()["m"]
        set_current(tmp_path, "m", "v2")
    else:  # a refused CURRENT at start serves the older version; a rollback moves CURRENT there
        publish(tmp_path, random_ensemble(NF, seed=3), version="v3")
        corrupt(tmp_path, "v3")
        registry = make_registry(tmp_path)
        reload(registry)
        assert registry.get().version == "v2" and "v3 refused" in registry.errors()["m"]
        set_current(tmp_path, "m", "v2", rollback=True)
    reload(registry)
    assert registry.get().version == "v2" and registry.errors() == {}


def test_a_refusal_at_start_is_one_log_line_naming_the_older_version_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The trial's log: `refused m/v2 (...); still serving nothing`, then `serving m/v1`."""
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    corrupt(tmp_path, "v2")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reload(make_registry(tmp_path))
    lines = [r.getMessage() for r in caplog.records]
    assert not any("serving nothing" in line for line in lines), lines
    refusals = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(refusals) == 1, refusals
    assert "CURRENT v2 refused; serving the older v1" in refusals[0]
    assert "sha256 mismatch" in refusals[0]

    (tmp_path / "m" / "v1" / "model.json").write_bytes(b"{}")  # nothing older loads
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reload(make_registry(tmp_path))
    last = [r.getMessage() for r in caplog.records if "m/v2" in r.getMessage()][-1]
    assert last.startswith("refused m/v2") and last.endswith("still serving nothing")


def _moved(root: Path) -> Callable[[], None]:
    def undo() -> None:
        root.with_name("moved").rename(root)

    root.rename(root.with_name("moved"))
    return undo


def _emptied(root: Path) -> Callable[[], None]:
    root.rename(root.with_name("moved"))
    root.mkdir()

    def undo() -> None:
        root.rmdir()
        root.with_name("moved").rename(root)

    return undo


def _a_file(root: Path) -> Callable[[], None]:
    root.rename(root.with_name("moved"))
    root.write_text("")

    def undo() -> None:
        root.unlink()
        root.with_name("moved").rename(root)

    return undo


def _current_removed(root: Path) -> Callable[[], None]:
    current = root / "m" / "CURRENT"
    text = current.read_text()
    current.unlink()
    return lambda: current.write_text(text)


def _current_emptied(root: Path) -> Callable[[], None]:
    current = root / "m" / "CURRENT"
    text = current.read_text()
    current.write_text("")
    return lambda: current.write_text(text)


@pytest.mark.parametrize(
    ("lose", "public"),
    [
        (_moved, "the registry directory does not exist"),
        (_emptied, "m/ is missing from the registry"),
        (_a_file, "the registry path is not a directory"),
        (_current_removed, "m/CURRENT is missing"),
        (_current_emptied, "m/CURRENT is empty"),
    ],
)
def test_a_lost_registry_or_current_is_reported_while_the_model_keeps_serving(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    lose: Callable[[Path], Callable[[], None]],
    public: str,
) -> None:
    root = tmp_path / "reg"
    publish(root, random_ensemble(NF), version="v1")
    registry = make_registry(root)
    reload(registry)
    before = failures()
    undo = lose(root)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(3):  # three polls: counted each time, logged once
            reload(registry)
    assert registry.ready and registry.get().version == "v1"
    assert failures() == before + 3
    assert registry.errors() == {"m": public}  # relative to the registry: no absolute path
    logged = [r for r in caplog.records]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR, logged
    assert str(root.resolve()) in logged[0].getMessage()
    assert "still serving m/v1" in logged[0].getMessage()

    undo()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reload(registry)
        reload(registry)
    assert registry.errors() == {} and failures() == before + 3
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.INFO


def test_a_refusal_of_a_directory_that_went_away_goes_from_errors(tmp_path: Path) -> None:
    """`mv reg/m reg/m.x`, a poll, `mv` back: /models kept the refusal of "m.x" (its manifest
    names model m) for as long as the service ran."""
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    (tmp_path / "m").rename(tmp_path / "m.x")
    reload(registry)
    assert "m.x" in registry.errors()
    (tmp_path / "m.x").rename(tmp_path / "m")
    reload(registry)
    assert registry.errors() == {} and registry.get().version == "v1"


def test_registry_missing_names_what_is_wrong_without_the_path(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    publish(root, random_ensemble(NF, seed=1), version="v1")
    registry = make_registry(root)
    assert registry.registry_missing() is None
    root.rename(tmp_path / "moved")
    assert registry.registry_missing() == "the registry directory does not exist"
    root.write_text("a file")
    assert registry.registry_missing() == "the registry path is not a directory"


def test_several_workers_share_a_compiled_cache_without_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset, each of two workers compiled a new version itself: after POST /admin/reload the
    second served the old version for seconds while it compiled at the lowest priority."""
    from app.registry.model_registry import compiled_cache_dir

    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    assert compiled_cache_dir(Settings()) is None  # one worker: nothing to share
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path / "shared"))
    assert compiled_cache_dir(Settings()) == tmp_path / "shared" / "compiled"
    given = tmp_path / "mine"
    assert compiled_cache_dir(Settings(compiled_cache_dir=given)) == given


def test_a_current_of_bytes_that_are_not_utf8_freezes_no_other_model(tmp_path: Path) -> None:
    """A disk trial: `printf 'gar\\x00bage\\xff' > m/CURRENT` made every poll raise
    UnicodeDecodeError, which ended the loop over the models: `zzz`, after `m`, never moved
    to its new version, nothing was counted or reported; at a restart `zzz` never loaded."""
    for name in ("aaa", "m", "zzz"):
        publish(tmp_path, random_ensemble(NF, seed=1), name=name, version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    (tmp_path / "m" / "CURRENT").write_bytes(b"gar\x00bage\xff\n")
    for name in ("aaa", "zzz"):
        publish(tmp_path, random_ensemble(NF, seed=2), name=name, version="v2")
    before = failures()
    reload(registry)
    assert [registry.get(n).version for n in ("aaa", "m", "zzz")] == ["v2", "v1", "v2"]
    assert "invalid version" in registry.errors()["m"] and failures() == before + 1

    restarted = make_registry(tmp_path)  # a restart: the older version serves instead
    reload(restarted)
    assert [restarted.get(n).version for n in ("aaa", "m", "zzz")] == ["v2", "v1", "v2"]
    assert "serving the older version v1" in restarted.errors()["m"]


def test_a_blank_current_at_start_serves_what_history_last_named_and_says_so(
    tmp_path: Path,
) -> None:
    """A disk trial: with CURRENT emptied, a restarted service served the model's siblings and
    not it, silently: no log line, no /models error, no metric, 404 "unknown model"."""
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    publish(tmp_path, random_ensemble(NF, seed=2), version="v2")
    publish(tmp_path, random_ensemble(NF, seed=3), version="v3")
    set_current(tmp_path, "m", "v2", rollback=True)  # HISTORY: v1, v2
    (tmp_path / "m" / "CURRENT").write_bytes(b"\n")
    before = failures()
    registry = make_registry(tmp_path)
    reload(registry)
    assert registry.get("m").version == "v2" and failures() == before + 1
    assert registry.errors()["m"].startswith("CURRENT refused: ValueError: m/CURRENT names no")
    reload(registry)  # the next poll: still reported, not loaded again
    assert registry.get("m").version == "v2" and "CURRENT" in registry.errors()["m"]


def test_a_served_snapshot_written_in_place_is_checked_again(tmp_path: Path) -> None:
    """A trial wrote into a served version's items.npy: the mapping showed the written values
    (wrong scores, nothing reported) until a restart, and still after `ltr publish` repaired
    the file, as the worker kept mapping the old one."""
    import os

    import numpy as np

    from app.artifacts.manifest import FeatureSource
    from tests.support.sourced_model import item_table, publish_sourced

    names = ["bm25", "price", "ctr"]
    sources: dict[str, FeatureSource] = {"price": "item", "ctr": "item"}
    model = random_ensemble(len(names), seed=3)
    table = item_table(20, ["price", "ctr"], seed=1)
    publish_sourced(tmp_path, model, sources, table, feature_names=names, version="v1")
    publish_sourced(tmp_path, model, sources, table, feature_names=names, version="v2")
    # Mapped, however small: a snapshot read into memory is the next test's.
    registry = ModelRegistry(
        Settings(registry=tmp_path, parallel_min_rows=16, item_snapshot_map_min_bytes=0),
        scorer_loader=reference_loader,
    )
    reload(registry)
    served = registry.get()
    assert served.version == "v2" and served.item_snapshot is not None
    assert served.item_snapshot.mapped
    matrix = tmp_path / "m" / "v2" / "items.npy"
    original = matrix.read_bytes()
    with open(matrix, "r+b") as f:  # one value, in place: the mapping shows it at once
        f.seek(len(original) - 4)
        f.write(np.float32(999.0).tobytes())
    # A write moves the mtime; within the same clock tick as the load it may not, so a
    # second later here, as the trial's write came.
    stat = matrix.stat()
    os.utime(matrix, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    before = failures()
    reload(registry)
    # Refused (its sha256 fails): the older version serves, the error says why.
    assert registry.get().version == "v1" and failures() == before + 1
    assert "version v2 refused" in registry.errors()["m"]
    reload(registry)  # unchanged since: not retried
    assert failures() == before + 1

    replacement = matrix.with_suffix(".tmp")  # repaired as `ltr publish` does: a new file
    replacement.write_bytes(original)
    replacement.replace(matrix)
    reload(registry)
    assert registry.get().version == "v2" and registry.errors() == {}
    snapshot = registry.get().item_snapshot
    assert snapshot is not None
    assert not np.any(np.asarray(snapshot.matrix) == 999.0)


def test_a_snapshot_read_into_memory_survives_its_file_truncated_in_place(
    tmp_path: Path,
) -> None:
    """A held-out trial truncated a served version's items.npy in place: the next request
    that read the mapping killed the worker (SIGBUS), and with one worker the service. A
    snapshot below LTR_ITEM_SNAPSHOT_MAP_MIN_BYTES is read instead: the served rows stay as
    they were verified until the poll refuses the version and the older one serves."""
    import os

    import numpy as np

    from app.artifacts.manifest import FeatureSource
    from tests.support.sourced_model import item_table, publish_sourced

    names = ["bm25", "price", "ctr"]
    sources: dict[str, FeatureSource] = {"price": "item", "ctr": "item"}
    model = random_ensemble(len(names), seed=3)
    table = item_table(20, ["price", "ctr"], seed=1)
    for version in ("v1", "v2"):
        publish_sourced(tmp_path, model, sources, table, feature_names=names, version=version)
    registry = make_registry(tmp_path)  # the default threshold: 64 MiB
    reload(registry)
    served = registry.get()
    snapshot = served.item_snapshot
    assert served.version == "v2" and snapshot is not None and not snapshot.mapped
    ids = list(np.asarray(snapshot.ids)[:5])
    columns = np.arange(2)
    before, found = snapshot.lookup(ids, columns)
    assert found.all()
    for name in ("items.npy", "item_ids.npy"):
        path = tmp_path / "m" / "v2" / name
        stat = path.stat()
        os.truncate(path, 0)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    after, found = snapshot.lookup(ids, columns)  # mapped, this read was a SIGBUS
    np.testing.assert_array_equal(after, before)
    assert found.all()
    reload(registry)
    # Refused, and reported; the copy in memory, read before the truncation, serves on.
    assert registry.get() is served and "version v2 refused" in registry.errors()["m"]


@pytest.mark.parametrize("versions", [("v1", "v2"), ("v2",)])
def test_a_served_model_file_truncated_on_disk_is_reported_and_the_loaded_copy_serves_on(
    tmp_path: Path, versions: tuple[str, ...]
) -> None:
    """An operations trial truncated a served version's model.json: nothing said so (/models
    without errors, /readyz 200) until a worker restarted, which then served the older version
    while the others kept the newer one. Then every worker fell back to the older version
    (production rolled back to a model nobody chose) or, with none, answered 503 for a model
    intact in memory (a held-out trial). Now it is refused and said so, and serves on."""
    for version in versions:
        publish(tmp_path, random_ensemble(NF, seed=1), version=version)
    registry = make_registry(tmp_path)
    reload(registry)
    served = registry.get()
    assert served.version == "v2"
    original = corrupt(tmp_path, "v2")
    before = failures()
    reload(registry)
    assert registry.get() is served and failures() == before + 1
    error = registry.errors()["m"]
    assert error.startswith("version v2 refused: ") and "the loaded copy still serves" in error
    reload(registry)  # unchanged since: not loaded again, not counted again
    assert registry.get() is served and failures() == before + 1
    restarted = make_registry(tmp_path)  # as the error warns: a new worker cannot load it
    reload(restarted)
    with pytest.raises(LtrError) if versions == ("v2",) else contextlib.nullcontext():
        assert restarted.get().version == "v1"
    (tmp_path / "m" / "v2" / "model.json").write_bytes(original)  # repaired
    reload(registry)
    assert registry.get().version == "v2" and registry.errors() == {}


def test_a_report_written_beside_the_served_version_does_not_reload_it(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, seed=1), version="v1")
    registry = make_registry(tmp_path)
    reload(registry)
    served = registry.get()
    (tmp_path / "m" / "v1" / "report.json").write_text("{}")
    reload(registry)
    assert registry.get() is served


@pytest.mark.parametrize("versions", [("v1", "v2"), ("v2",)])
def test_a_served_version_moved_away_serves_on_from_memory(
    tmp_path: Path, versions: tuple[str, ...]
) -> None:
    """A trial moved the served version's directory away under load: 12-18 requests were
    answered 503 while the older version loaded, as the broken one was dropped first; with no
    older version, the model answered 503 from then on. Its model is in memory and nothing it
    maps was truncated: it serves on, reported, as for a registry gone missing."""
    for version in versions:
        publish(tmp_path, random_ensemble(NF, seed=1), version=version)
    registry = make_registry(tmp_path)
    reload(registry)
    served = registry.get()
    shutil.move(tmp_path / "m" / "v2", tmp_path / "moved-away")
    reload(registry)
    assert registry.get() is served
    error = registry.errors()["m"]
    assert "version v2 refused" in error and "the loaded copy still serves" in error
    shutil.move(tmp_path / "moved-away", tmp_path / "m" / "v2")  # put back
    reload(registry)
    assert registry.get().version == "v2" and registry.errors() == {}
