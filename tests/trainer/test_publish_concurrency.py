"""Publishes from several processes at once take turns (the model's lock), as the tester ran
them: CURRENT never names a pruned version and the same version twice is not an error."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from app.artifacts.store import list_versions, load_version, read_current, read_history
from tests.trainer.registry_versions import run_version
from trainer.publish import publish

_CTX = mp.get_context("fork")  # the children inherit the imported modules: starts fast


def _publish_all(runs: list[Path], registry: Path, keep: int, start: object, out: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    for run in runs:
        result = publish(run, registry, keep=keep)
        # Under the lock nothing may prune it between install and return.
        ok = read_current(registry, "m") is not None and result.path.is_dir()
        out.put((result.version, ok))  # type: ignore[attr-defined]


def _run(jobs: list[list[Path]], registry: Path, keep: int) -> list[tuple[str, bool]]:
    start, out = _CTX.Barrier(len(jobs)), _CTX.Queue()
    procs = [_CTX.Process(target=_publish_all, args=(j, registry, keep, start, out)) for j in jobs]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in range(sum(len(j) for j in jobs))]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def test_the_same_version_from_four_processes(tmp_path: Path) -> None:
    run = run_version(tmp_path / "runs", "v9")
    results = _run([[run]] * 4, tmp_path / "registry", keep=5)
    assert results == [("v9", True)] * 4
    assert read_current(tmp_path / "registry", "m") == "v9"
    assert list_versions(tmp_path / "registry", "m") == ["v9"]
    assert not [p for p in (tmp_path / "registry" / "m").iterdir() if p.name.startswith(".v9")]


def test_concurrent_publishes_leave_a_consistent_registry(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    jobs = [
        [run_version(tmp_path / "runs", f"p{p}v{i}", leaf=float(10 * p + i)) for i in range(4)]
        for p in range(6)
    ]
    results = _run(jobs, registry, keep=1)
    assert all(ok for _, ok in results)
    current = read_current(registry, "m")
    assert current is not None
    load_version(registry / "m" / current)
    history = read_history(registry, "m")
    assert history[-1] == current and len(history) == 24
    # Kept: CURRENT and the version before it (the rollback target), nothing else.
    assert set(list_versions(registry, "m")) == {history[-2], current}
