"""The compiled tree scorer: a tree ensemble turned into native SIMD code at load time.

See app/scoring/compiler/codegen.py for the generated code and nodes.py for why float32
compares make exactly the reference scorer's decisions; bins.py and binned_codegen.py for the
int8 codes most models are scored on instead (the same decisions, fewer instructions). Scores
equal `app.scoring.reference` bit for bit (same decisions, same float64 summation order).
"""

from __future__ import annotations

import contextvars
import ctypes
import hashlib
import itertools
import logging
import os
from asyncio import _get_running_loop
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.artifacts.tree_dump import TreeEnsemble
from app.scoring import beside
from app.scoring.beside import ENTRY_ARGS, HELD_ENTRY_TYPE, NativeCall
from app.scoring.compiler.binned_codegen import (
    BIN_AND_SCORE,
    BIN_ENTRY,
    gen_binned_modules,
    leaf_number_table,
    split_code_table,
)
from app.scoring.compiler.bins import bin_layout
from app.scoring.compiler.codegen import ENTRY, build_tables, gen_modules
from app.scoring.compiler.jit import CompiledModule, cache_key, compile_cached, host_has
from app.scoring.compiler.nodes import lower_ensemble
from app.scoring.cpu_headroom import HEADROOM, CpuHeadroom
from app.thread_pools import thread_pool

LANES = 16  # rows per SIMD block of float32: one AVX-512 register (two AVX2 ones)
CHUNK_TREES = 8  # trees run back to back on a block: ~15 KB of code, inside the L1 i-cache
# Rows scored per call of the native code: their packed features (~550 KB at 136 features)
# stay in L2 while every chunk of trees walks over them.
TILE_ROWS = 1024
# Below this many rows a second thread costs more than it saves (bench/results/scoring.md: the
# hand-off, and a second core that a busy server's other worker is usually using). The service's
# `LTR_PARALLEL_MIN_ROWS` defaults to the same value.
DEFAULT_PARALLEL_MIN_ROWS = 2000
# From this many rows a request is split when a core sat idle lately (app.scoring.cpu_headroom):
# 500 trees x 136 features on an idle 2-vCPU machine, the second half on the native beside
# worker (app.scoring.beside), from an event loop: 1,000 rows in 0.96 ms against 1.18 ms on
# one thread, 512 rows in 0.61 against 0.81 ms.
DEFAULT_SPARE_CORE_MIN_ROWS = 512
# A spare core: at least this many idle on average over the last sample, and one idle now
# (app.scoring.cpu_headroom). The average alone, at 0.75, missed the core a single client's
# request leaves idle while it is scored (its parse and the client's own work were busy in the
# same quarter second); with the instant reading, 1,000 rows scored ~1 ms sooner, id-only and
# all-in-request requests alike (one client, alternating runs).
SPARE_CORE = 0.4
# Compile with this many processes at most (one module each; see compiler/jit.py), and only
# for models of at least MIN_SPLITS_PER_PROCESS splits per process: starting a process costs
# ~0.2 s, while 500 trees x 62 splits take ~5 s of code generation on one core. A model of at
# least that many splits is compiled wholly in children, at the lowest CPU priority.
COMPILE_PROCESSES = 2
MIN_SPLITS_PER_PROCESS = 4000

# CFUNCTYPE releases the GIL for the duration of the call, so other threads run meanwhile.
_ENTRY_TYPE = ctypes.CFUNCTYPE(None, *ENTRY_ARGS)
# PYFUNCTYPE keeps it. On an event loop's thread nothing of the loop can run during the call
# anyway, and taking the GIL back afterwards means waiting for whichever thread took it, up to
# the interpreter's switch interval (5 ms by default) per call: measured as 1,000-row inline
# scoring taking 6.5 ms of loop time under overload against ~2.5 ms alone.
_HELD_ENTRY_TYPE = HELD_ENTRY_TYPE
# The binning kernel (app.scoring.compiler.binned_codegen): float rows in, codes out.
_BIN_ARGS = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
_BIN_TYPE = ctypes.CFUNCTYPE(None, *_BIN_ARGS)
_HELD_BIN_TYPE = ctypes.PYFUNCTYPE(None, *_BIN_ARGS)
# Set (by `scoring_beside`) where another scoring of the same request runs on a second thread
# at the same time: holding the GIL on the loop's thread would keep that thread from starting
# at all, and splitting rows over a third thread would oversubscribe the cores.
_BESIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("ltr_scoring_beside", default=False)


@contextmanager
def scoring_beside() -> Iterator[None]:
    """Scoring in this block runs on the calling thread alone and gives the GIL up, even on
    an event loop's thread (an interleaved request's two versions, scored at once)."""
    token = _BESIDE.set(True)
    try:
        yield
    finally:
        _BESIDE.reset(token)


def _hold_gil() -> bool:
    """Whether to keep the GIL during the native call: on an event loop's thread, unless
    another thread scores beside it."""
    return _get_running_loop() is not None and not _BESIDE.get()


log = logging.getLogger(__name__)
_serial = itertools.count()


class CompiledTreeScorer:
    """Scores rows with a tree ensemble compiled to native code.

    `threads`: at most this many threads per request, used when the request has at least
    `parallel_min_rows` rows, or `spare_core_min_rows` while the machine has an idle core (rows
    are split into equal parts, one per thread).
    `cache_dir`: where compiled objects are kept, keyed by `model_sha256` and the host CPU, so
    a restart or a second worker loads in milliseconds instead of compiling again.
    `binned`: compare int8 codes of the features where the model's thresholds allow
    (app.scoring.compiler.bins: the same decisions, 1.6x faster on an AVX2 VM); False keeps float32
    compares.
    """

    def __init__(
        self,
        ensemble: TreeEnsemble,
        *,
        model_sha256: str | None = None,
        cache_dir: Path | None = None,
        threads: int = 1,
        parallel_min_rows: int = DEFAULT_PARALLEL_MIN_ROWS,
        spare_core_min_rows: int = DEFAULT_SPARE_CORE_MIN_ROWS,
        headroom: CpuHeadroom = HEADROOM,
        binned: bool = True,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.num_features = ensemble.num_features
        self.base_score = float(ensemble.base_score)
        self.threads = threads
        self.parallel_min_rows = max(int(parallel_min_rows), LANES)
        self.spare_core_min_rows = max(int(spare_core_min_rows), LANES)
        self.headroom = headroom
        self.lanes = LANES  # rows per block
        self._constant = not ensemble.trees  # no tree: every row scores base_score
        if self._constant:
            return
        trees = lower_ensemble(ensemble)
        layout = bin_layout(trees, self.num_features) if binned else None
        self._layout = layout
        if layout is None:
            tables = build_tables(trees)
            self._tables = (tables.thresholds, tables.leaf_numbers, tables.leaf_values)
        else:
            self.lanes = layout.code.lanes
            values = np.concatenate([t.leaf_value for t in trees]).astype(np.float64)
            self._tables = (
                split_code_table(layout),
                leaf_number_table(layout, trees),
                np.ascontiguousarray(values),
            )

        # A prefix fixed by the model keeps cached objects valid across processes; each scorer's
        # code lives in its own JIT engine, so equal names in two engines never meet.
        tag = hashlib.sha256(model_sha256.encode()).hexdigest()[:16] if model_sha256 else None
        prefix = f"ltr_{tag}" if tag else f"ltr{next(_serial)}"
        splits = sum(t.num_nodes for t in trees)
        parts = max(
            1, min(COMPILE_PROCESSES, os.cpu_count() or 1, splits // MIN_SPLITS_PER_PROCESS)
        )

        def build() -> list[str]:
            if layout is not None:
                return gen_binned_modules(
                    trees,
                    layout,
                    self.num_features,
                    prefix=prefix,
                    chunk=CHUNK_TREES,
                    parts=parts,
                    avx2=host_has("avx2"),
                )
            return gen_modules(
                trees,
                self.num_features,
                prefix=prefix,
                lanes=LANES,
                chunk=CHUNK_TREES,
                parts=parts,
                avx2=host_has("avx2"),
            )

        key = None
        if model_sha256 is not None and cache_dir is not None:
            codes = "float32" if layout is None else layout.code.ir
            options = f"lanes={self.lanes},chunk={CHUNK_TREES},parts={parts},codes={codes}"
            key = cache_key(model_sha256, options)
        in_children = splits >= MIN_SPLITS_PER_PROCESS
        where = Path(cache_dir) if cache_dir is not None else None
        self._module: CompiledModule = compile_cached(
            build, key, where, all_in_children=in_children
        )
        names = [ENTRY] if layout is None else [ENTRY, BIN_ENTRY, BIN_AND_SCORE]
        try:
            addresses = {name: self._module.address(f"{prefix}_{name}") for name in names}
        except LookupError:
            if key is None:
                raise
            # A cached object from code that named its entry points otherwise (a build whose
            # CODEGEN_VERSION was not bumped): compiled afresh, the model still served.
            log.warning("compiled object %s in %s lacks an entry point: compiling", key, where)
            self._module = compile_cached(build, None, None, all_in_children=in_children)
            addresses = {name: self._module.address(f"{prefix}_{name}") for name in names}
        address = addresses[ENTRY]
        self._entry_address = address
        self._entry = _ENTRY_TYPE(address)
        self._held_entry = _HELD_ENTRY_TYPE(address)
        self._table_ptrs = (
            self._tables[0].ctypes.data,
            self._tables[1].ctypes.data,
            self._tables[2].ctypes.data,
        )
        if layout is not None:
            address = addresses[BIN_ENTRY]
            self._bin = _BIN_TYPE(address)
            self._held_bin = _HELD_BIN_TYPE(address)
            self._bin_meta = layout.meta()  # kept alive with the pointer below
            self._bin_tables = (layout.thresholds.ctypes.data, self._bin_meta.ctypes.data)
            self._bin_and_score_address = addresses[BIN_AND_SCORE]
            self._all_tables = np.array([*self._table_ptrs, *self._bin_tables], dtype=np.int64)

    @classmethod
    def from_json_bytes(cls, data: bytes, **kwargs: object) -> CompiledTreeScorer:
        """Compile a `model.json` tree dump; kwargs as for the constructor."""
        ensemble = TreeEnsemble.from_json_bytes(data)
        return cls(ensemble, **kwargs)  # type: ignore[arg-type]

    def score(self, features: np.ndarray, user: np.ndarray | None = None) -> np.ndarray:
        """Scores float64 [n_docs] for features float32 [n_docs, n_features] (NaN = missing).

        Other float dtypes are converted to float32 first (the service always sends float32).
        """
        if user is not None:
            raise ValueError("a tree model takes user-cluster embeddings as feature columns")
        x = self._rows(features)
        n = x.shape[0]
        if self._constant:
            return np.full(n, self.base_score, dtype=np.float64)
        if not self._split(n):
            return self._score_rows(x, hold_gil=_hold_gil())
        parts = min(self.threads, os.cpu_count() or 1)  # reads /sys (~7 us): only asked here
        if parts < 2:
            return self._score_rows(x, hold_gil=_hold_gil())
        # Split on block boundaries so no thread packs a padded block in the middle.
        step = -(-n // (parts * self.lanes)) * self.lanes
        bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
        worker = beside.ready() if parts == 2 else None
        if worker is not None:
            # The native worker (app.scoring.beside): a pooled thread measured slower than
            # one thread on a 2-vCPU machine (1,000 rows x 500 trees: 1.76 against 1.44 ms
            # from an event loop); the worker 0.96 ms.
            second = self.prepare(x[step:])
            assert second is not None  # a model without trees never splits
            first, _ = worker.run_beside(
                second.call, lambda: self._score_rows(x[:step], hold_gil=_hold_gil())
            )
            return np.concatenate([first, second.scores()])
        if parts == 2:
            beside.start_later()
        pool = thread_pool("ltr-score", parts - 1)  # shared by every scorer
        futures = [pool.submit(self._score_rows, x[lo:hi]) for lo, hi in bounds[1:]]
        first = self._score_rows(x[bounds[0][0] : bounds[0][1]])
        return np.concatenate([first, *(f.result() for f in futures)])

    def _split(self, n: int) -> bool:
        """Whether `n` rows go over several threads."""
        if self.threads < 2 or n < min(self.parallel_min_rows, self.spare_core_min_rows):
            return False
        if _BESIDE.get():
            return False
        if n >= self.parallel_min_rows:
            return True
        return self.headroom.spare_cores() >= SPARE_CORE and self.headroom.idle_now() >= 1

    def _score_rows(self, x: np.ndarray, hold_gil: bool = False) -> np.ndarray:
        """`hold_gil`: call the native code without releasing the GIL (on an event loop's
        thread; see _HELD_ENTRY_TYPE)."""
        n = x.shape[0]
        packed, out = self._pack(x, hold_gil)
        n_blocks = packed.shape[0]
        tile = TILE_ROWS // self.lanes
        thr, num, val = self._table_ptrs
        entry = self._held_entry if hold_gil else self._entry
        for start in range(0, n_blocks, tile):
            count = min(tile, n_blocks - start)
            entry(
                packed[start:].ctypes.data,
                out[start * self.lanes :].ctypes.data,
                count,
                thr,
                num,
                val,
            )
        return out[:n]

    def _rows(self, features: np.ndarray) -> np.ndarray:
        """`features` checked for shape, as contiguous float32."""
        x = np.asarray(features)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected features of shape [n, {self.num_features}], got {x.shape}")
        return np.ascontiguousarray(x, dtype=np.float32)

    def _pack(self, x: np.ndarray, hold_gil: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(the native code's input: rows float32 [n_blocks, n_features, lanes], the tail block
        zero-padded, or with a bin layout their codes [n_blocks, n_columns + 1, lanes]; scores
        float64 [n_blocks * lanes] set to base_score, its output)."""
        packed, out = self._pack_floats(x)
        if self._layout is None:
            return packed, out
        codes = self._codes_for(packed)
        binning = self._held_bin if hold_gil else self._bin
        binning(packed.ctypes.data, codes.ctypes.data, packed.shape[0], *self._bin_tables)
        return codes, out

    def _pack_floats(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, lanes = x.shape[0], self.lanes
        n_blocks = -(-n // lanes)
        packed = np.empty((n_blocks, self.num_features, lanes), dtype=np.float32)
        full = n // lanes
        if full:
            packed[:full] = x[: full * lanes].reshape(full, lanes, -1).transpose(0, 2, 1)
        if n_blocks > full:
            tail = np.zeros((lanes, self.num_features), dtype=np.float32)
            tail[: n - full * lanes] = x[full * lanes :]
            packed[full] = tail.T
        return packed, np.full(n_blocks * lanes, self.base_score, dtype=np.float64)

    def _codes_for(self, packed: np.ndarray) -> np.ndarray:
        layout = self._layout
        assert layout is not None
        shape = (packed.shape[0], layout.block_columns, self.lanes)
        return np.empty(shape, dtype=layout.code.dtype)

    def prepare(self, features: np.ndarray) -> PreparedScoring | None:
        """The scoring of `features` (float32 [n, n_features]) as one native call, to run on
        another thread (app.scoring.beside); None for a model without trees."""
        x = self._rows(features)
        if self._constant:
            return None
        if self._layout is not None:  # binned by the call too, on the thread that runs it
            packed, out = self._pack_floats(x)
            codes = self._codes_for(packed)
            args = (
                packed.ctypes.data,
                out.ctypes.data,
                packed.shape[0],
                codes.ctypes.data,
                self._all_tables.ctypes.data,
                0,
            )
            call = NativeCall(self._bin_and_score_address, args)
            return PreparedScoring(call, packed, out, x.shape[0], codes)
        packed, out = self._pack(x)
        thr, num, val = self._table_ptrs
        args = (packed.ctypes.data, out.ctypes.data, packed.shape[0], thr, num, val)
        return PreparedScoring(NativeCall(self._entry_address, args), packed, out, x.shape[0])


@dataclass(frozen=True)
class PreparedScoring:
    """A native call and the arrays it reads and writes (alive as long as this is)."""

    call: NativeCall
    packed: np.ndarray
    out: np.ndarray
    rows: int
    codes: np.ndarray | None = None  # the bins the call writes and reads (int8 codes)

    def scores(self) -> np.ndarray:
        """float64 [rows], once the call has run."""
        return self.out[: self.rows]
