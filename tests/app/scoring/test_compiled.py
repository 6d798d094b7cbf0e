from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.artifacts.tree_dump import MAX_DEPTH, ZERO_THRESHOLD, Tree, TreeEnsemble
from app.scoring import compiled, reference
from app.scoring.compiled import LANES, CompiledTreeScorer, scoring_beside
from app.scoring.compiler import binned_codegen, jit
from app.scoring.compiler.nodes import ZERO32, floor_float32
from app.scoring.cpu_headroom import CpuHeadroom
from tests.app.scoring.ensembles import ensemble_and_rows
from tests.support import random_ensemble

HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("binned", [True, False], ids=["codes", "float32"])
@HYPOTHESIS
@given(case=ensemble_and_rows())
def test_compiled_equals_reference_bit_for_bit(
    case: tuple[TreeEnsemble, np.ndarray], binned: bool
) -> None:
    ensemble, rows = case
    scorer = CompiledTreeScorer(ensemble, binned=binned)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ensemble_and_rows())
def test_code_split_over_compile_processes_equals_reference(
    case: tuple[TreeEnsemble, np.ndarray],
) -> None:
    # Big models compile in two processes and link two objects; force that on small ones.
    ensemble, rows = case
    saved = compiled.MIN_SPLITS_PER_PROCESS
    compiled.MIN_SPLITS_PER_PROCESS = 1
    try:
        scorer = CompiledTreeScorer(ensemble)
    finally:
        compiled.MIN_SPLITS_PER_PROCESS = saved
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ensemble_and_rows(max_rows=8), st.integers(2, 3))
def test_two_threads_equal_one(case: tuple[TreeEnsemble, np.ndarray], threads: int) -> None:
    ensemble, rows = case
    # Repeat the rows so the request is large enough to be split across threads.
    big = np.tile(rows, (200 // rows.shape[0] + 1, 1))
    parallel = CompiledTreeScorer(ensemble, threads=threads, parallel_min_rows=LANES)
    np.testing.assert_array_equal(parallel.score(big), reference.predict(ensemble, big))


@given(st.floats(allow_nan=False, width=64))
def test_floor_float32_is_the_largest_float32_not_above(t: float) -> None:
    f = floor_float32(np.array([t]))[0]
    assert float(f) <= t
    with np.errstate(over="ignore"):
        above = np.nextafter(f, np.float32(np.inf))
    assert float(above) > t or f == np.float32(np.inf)


def test_zero_threshold_lowering_matches_lightgbm_constant() -> None:
    # LightGBM's `const double kZeroThreshold = 1e-35f`: the float32 value, above the double.
    assert ZERO_THRESHOLD == float(np.float32(1e-35)) > 1e-35
    assert np.float32(ZERO_THRESHOLD) == ZERO32


def _chain(depth: int, num_features: int) -> Tree:
    """A maximally deep tree: every split's right child is the next split."""
    rng = np.random.default_rng(depth)
    left = np.array([~i for i in range(depth)], np.int32)
    right = np.array([*range(1, depth), ~depth], np.int32)
    return Tree(
        split_feature=rng.integers(0, num_features, depth).astype(np.int32),
        threshold=np.sort(rng.normal(size=depth)),
        left=left,
        right=right,
        default_left=rng.random(depth) < 0.5,
        leaf_value=rng.normal(size=depth + 1),
    )


def test_deep_trees_and_single_leaf_trees() -> None:
    empty = np.zeros(0, np.int32)
    stump = Tree(empty, np.zeros(0), empty, empty, np.zeros(0, bool), np.array([0.25]))
    # As deep as a dump may be: past Python's default recursion limit (1,000).
    ensemble = TreeEnsemble(3, [_chain(MAX_DEPTH, 3), stump, _chain(7, 3)], base_score=-1.5)
    rows = np.random.default_rng(0).normal(size=(100, 3)).astype(np.float32)
    rows[::7, 1] = np.nan
    scorer = CompiledTreeScorer(ensemble)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


def _random_ensemble(num_features: int = 5, n_trees: int = 20) -> TreeEnsemble:
    return TreeEnsemble(num_features, [_chain(9, num_features) for _ in range(n_trees)], 0.5)


def test_row_counts_around_blocks_and_tiles() -> None:
    ensemble = _random_ensemble()
    scorer = CompiledTreeScorer(ensemble, threads=2, parallel_min_rows=100)
    assert scorer.lanes == 32
    rng = np.random.default_rng(1)
    # Blocks of 16 rows (float32 compares) and of 32 (int8 codes, this model's).
    for n in [0, 1, LANES - 1, LANES, LANES + 1, 31, 32, 33, 99, 100, 1023, 1024, 1025, 2500]:
        rows = rng.normal(size=(n, 5)).astype(np.float32)
        got = scorer.score(rows)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_array_equal(got, reference.predict(ensemble, rows))


def test_float64_input_is_scored_as_float32() -> None:
    ensemble = _random_ensemble()
    rows = np.random.default_rng(2).normal(size=(50, 5))
    scorer = CompiledTreeScorer(ensemble)
    expected = reference.predict(ensemble, rows.astype(np.float32))
    np.testing.assert_array_equal(scorer.score(rows), expected)


def test_bad_calls_are_refused() -> None:
    scorer = CompiledTreeScorer(_random_ensemble())
    with pytest.raises(ValueError, match=r"shape \[n, 5\]"):
        scorer.score(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"shape \[n, 5\]"):
        scorer.score(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="feature columns"):
        scorer.score(np.zeros((3, 5), np.float32), user=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="threads"):
        CompiledTreeScorer(_random_ensemble(), threads=0)


def test_compiled_code_is_cached_by_model_hash(tmp_path: Path) -> None:
    ensemble = _random_ensemble()
    rows = np.random.default_rng(3).normal(size=(40, 5)).astype(np.float32)
    first = CompiledTreeScorer(ensemble, model_sha256="ab" * 32, cache_dir=tmp_path)
    files = list(tmp_path.glob("*.o"))
    assert len(files) == 1
    again = CompiledTreeScorer(ensemble, model_sha256="ab" * 32, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.score(rows), first.score(rows))
    # A damaged cache entry is never loaded: it is compiled again and replaced.
    files[0].write_bytes(files[0].read_bytes()[:-100])
    repaired = CompiledTreeScorer(ensemble, model_sha256="ab" * 32, cache_dir=tmp_path)
    np.testing.assert_array_equal(repaired.score(rows), reference.predict(ensemble, rows))
    assert files[0].read_bytes() != b"" and len(list(tmp_path.glob("*.o"))) == 1


def test_the_cache_keeps_the_most_recently_used_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing removed old entries: one per version compiled, ~1.3 MB each at 500 x 63."""
    import os
    import time

    monkeypatch.setattr(jit, "CACHE_ENTRIES_KEPT", 2)
    ensemble = _random_ensemble()
    entry: dict[str, str] = {}
    for tag in ("aa", "bb"):
        before = {p.name for p in tmp_path.glob("*.o")}
        CompiledTreeScorer(ensemble, model_sha256=tag * 32, cache_dir=tmp_path)
        (entry[tag],) = {p.name for p in tmp_path.glob("*.o")} - before
    old = time.time() - 7200
    for name in entry.values():  # both used two hours ago...
        os.utime(tmp_path / name, (old, old))
    torn = tmp_path / ".tmp-torn.o"  # ...beside what a crash left mid-write then
    torn.write_bytes(b"x")
    os.utime(torn, (old, old))
    (tmp_path / ".tmp-writing.o").write_bytes(b"x")  # a write going on now
    CompiledTreeScorer(ensemble, model_sha256="aa" * 32, cache_dir=tmp_path)  # used again
    CompiledTreeScorer(ensemble, model_sha256="cc" * 32, cache_dir=tmp_path)  # a new one
    names = {p.name for p in tmp_path.iterdir()}
    assert entry["aa"] in names and entry["bb"] not in names
    assert entry["bb"].replace(".o", ".lock") not in names
    assert len([n for n in names if n.endswith(".o") and not n.startswith(".")]) == 2
    assert ".tmp-torn.o" not in names and ".tmp-writing.o" in names


def test_unwritable_cache_only_costs_a_compile(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    scorer = CompiledTreeScorer(_random_ensemble(), model_sha256="cd" * 32, cache_dir=blocker)
    assert scorer.score(np.zeros((2, 5), np.float32)).shape == (2,)


def test_models_with_equal_symbol_names_stay_apart() -> None:
    # Same claimed hash (so the same symbol prefix), different trees, no shared cache.
    a, b = _random_ensemble(n_trees=3), _random_ensemble(n_trees=4)
    rows = np.random.default_rng(4).normal(size=(30, 5)).astype(np.float32)
    first = CompiledTreeScorer(a, model_sha256="ef" * 32)
    second = CompiledTreeScorer(b, model_sha256="ef" * 32)
    np.testing.assert_array_equal(first.score(rows), reference.predict(a, rows))
    np.testing.assert_array_equal(second.score(rows), reference.predict(b, rows))


def test_a_failed_child_compile_falls_back_to_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compiled, "MIN_SPLITS_PER_PROCESS", 1)
    monkeypatch.setattr(jit, "_WORKER", "import sys; sys.exit(3)")
    ensemble = _random_ensemble(n_trees=12)
    rows = np.random.default_rng(5).normal(size=(20, 5)).astype(np.float32)
    scorer = CompiledTreeScorer(ensemble)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


def test_an_ensemble_without_trees_scores_its_base_score() -> None:
    from app.artifacts.tree_dump import TreeEnsemble
    from app.scoring.compiled import CompiledTreeScorer

    scorer = CompiledTreeScorer(TreeEnsemble(num_features=3, trees=[], base_score=0.5))
    x = np.array([[np.nan, 1.0, 2.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(scorer.score(x), [0.5, 0.5])


class _Headroom(CpuHeadroom):
    def __init__(self, spare: float, idle: float = 1.0) -> None:
        super().__init__()
        self.spare, self.idle = spare, idle

    def spare_cores(self, now: float | None = None) -> float:
        return self.spare

    def idle_now(self) -> float:
        return self.idle


@pytest.mark.parametrize(
    ("rows", "spare", "idle", "split"),
    [
        (100, 2.0, 1.0, True),
        (100, 0.3, 1.0, False),  # busy lately
        (100, 2.0, 0.0, False),  # every core busy this instant
        (40, 2.0, 1.0, False),
        (300, 0.0, 0.0, True),
    ],
)
def test_a_spare_core_splits_smaller_requests(
    rows: int, spare: float, idle: float, split: bool
) -> None:
    ensemble = _random_ensemble()
    scorer = CompiledTreeScorer(
        ensemble,
        threads=2,
        parallel_min_rows=300,
        spare_core_min_rows=64,
        headroom=_Headroom(spare, idle),
    )
    assert scorer._split(rows) is split
    x = np.random.default_rng(3).normal(size=(rows, 5)).astype(np.float32)
    np.testing.assert_array_equal(scorer.score(x), reference.predict(ensemble, x))
    one_thread = CompiledTreeScorer(ensemble, threads=1, headroom=_Headroom(2.0))
    assert not one_thread._split(10_000)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ensemble_and_rows())
def test_holding_the_gil_scores_the_same(case: tuple[TreeEnsemble, np.ndarray]) -> None:
    ensemble, rows = case
    scorer = CompiledTreeScorer(ensemble)
    rows32 = np.ascontiguousarray(rows, dtype=np.float32)
    np.testing.assert_array_equal(
        scorer._score_rows(rows32, hold_gil=True), scorer._score_rows(rows32, hold_gil=False)
    )


def test_an_event_loop_thread_scores_without_giving_up_the_gil() -> None:
    import asyncio

    ensemble = random_ensemble(12, num_trees=20, depth=4, seed=3)
    rows = np.random.default_rng(3).normal(size=(40, 12)).astype(np.float32)
    scorer = CompiledTreeScorer(ensemble)
    calls: list[str] = []

    def counted(name: str, entry: Callable[..., None]) -> Callable[..., None]:
        def call(*args: object) -> None:
            calls.append(name)
            entry(*args)

        return call

    scorer._held_entry = counted("held", scorer._held_entry)  # type: ignore[assignment]
    scorer._entry = counted("free", scorer._entry)  # type: ignore[assignment]
    scorer.score(rows)

    async def on_loop() -> np.ndarray:
        return scorer.score(rows)

    on_the_loop = asyncio.run(on_loop())
    assert calls == ["free", "held"]
    np.testing.assert_array_equal(on_the_loop, reference.predict(ensemble, rows))

    async def beside() -> np.ndarray:
        with scoring_beside():  # an interleaved request's control, its candidate beside it
            return scorer.score(rows)

    np.testing.assert_array_equal(asyncio.run(beside()), on_the_loop)
    assert calls == ["free", "held", "free"]


def test_a_cached_object_without_an_entry_point_is_compiled_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An object cached by code whose entry points had other names, under the same key.
    ensemble = _random_ensemble()
    rows = np.random.default_rng(4).normal(size=(40, 5)).astype(np.float32)
    CompiledTreeScorer(ensemble, model_sha256="m", cache_dir=tmp_path)
    monkeypatch.setattr(binned_codegen, "BIN_AND_SCORE", "bin_and_score_renamed")
    monkeypatch.setattr(compiled, "BIN_AND_SCORE", "bin_and_score_renamed")
    scorer = CompiledTreeScorer(ensemble, model_sha256="m", cache_dir=tmp_path)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))
    prepared = scorer.prepare(rows)
    assert prepared is not None
