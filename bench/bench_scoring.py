"""Tree scoring speed, side by side in one run: ours vs lleaves, LightGBM, onnxruntime, reference.

`python -m bench.bench_scoring [--rows 50000] [--trees 500] [--out bench/results/scoring.md]`

One LightGBM lambdarank model (num_leaves 63, 136 features) trained on bench.generate_letor
data; every engine scores the same float32 rows of held-out generated data. Each repetition
runs every engine once, in a shuffled order, so machine noise falls on all of them alike;
figures are medians. Single thread everywhere, plus our scorer on 2 threads. The trained model,
lleaves' object and the ONNX file are cached under --cache-dir (lleaves takes minutes to compile).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from app.scoring import reference
from app.scoring.compiled import CompiledTreeScorer
from bench.generate_letor import generate
from trainer.convert.lightgbm_model import convert_lightgbm

SIZES = (1, 10, 100, 1000, 10000)


def _patch_lleaves() -> None:
    """lleaves 1.3 calls llvmlite's legacy pass manager, gone in llvmlite 0.45+; same -O3 here."""
    import llvmlite.binding as llvm
    import llvmlite.ir
    from lleaves import lleaves as lleaves_model
    from lleaves import llvm_binding
    from lleaves.compiler.ast import parse_to_ast
    from lleaves.compiler.codegen import gen_forest

    def init() -> None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()

    def compile_to_module(file_path, fblocksize=34, finline=True, raw_score=False,
                          froot_func_name="forest_root", use_fp64=True):  # fmt: skip
        forest = parse_to_ast(file_path)
        forest.raw_score = raw_score
        module_ir = llvmlite.ir.Module(name="forest")
        gen_forest(forest, module_ir, fblocksize, froot_func_name, use_fp64)
        module_ir.triple = llvm.get_process_triple()
        module = llvm.parse_assembly(str(module_ir))
        init()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.inlining_threshold = 1 if finline else 0
        builder = llvm.create_pass_builder(llvm_binding._get_target_machine(), pto)
        builder.getModulePassManager().run(module, builder)
        return module

    llvm_binding._initialize_llvm = init
    lleaves_model.compiler.compile_to_module = compile_to_module


def train_model(args: argparse.Namespace, cache: Path) -> Path:
    if args.model is not None:
        return args.model
    path = cache / f"lgb-{args.rows}-{args.features}-{args.trees}-{args.leaves}-{args.seed}.txt"
    if path.exists():
        return path
    data = generate(args.rows, args.features, args.queries, args.seed)
    return train_lightgbm(data.features, data.labels, np.diff(data.group_offsets), args, path)


def train_lightgbm(
    features: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    args: argparse.Namespace,
    path: Path,
) -> Path:
    """A LightGBM lambdarank model of args.trees x args.leaves saved to `path`."""
    import lightgbm as lgb

    params = {
        "objective": "lambdarank",
        "num_leaves": args.leaves,
        "learning_rate": 0.05,
        "min_data_in_leaf": 20,
        "verbose": -1,
        "num_threads": 2,
    }
    t0 = time.perf_counter()
    booster = lgb.train(params, lgb.Dataset(features, labels, group=groups), args.trees)
    print(f"trained LightGBM in {time.perf_counter() - t0:.0f} s", flush=True)
    booster.save_model(str(path))
    return path


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def thread_sweep(engines: dict[str, Callable], rows: np.ndarray, reps: int) -> list[str]:
    """Where a second thread starts to pay: ours 1 vs 2 threads (parallel_min_rows=1)."""
    one, two = engines["ours (1 thread)"], engines["ours (2 threads, from 1 row)"]
    lines = []
    for n in (64, 128, 256, 512, 1024, 2048):
        x = np.ascontiguousarray(rows[:n])
        t1: list[float] = []
        t2: list[float] = []
        for _ in range(reps):
            for fn, ts in ((one, t1), (two, t2)):
                t0 = time.perf_counter()
                fn(x)
                ts.append(time.perf_counter() - t0)
        m1, m2 = statistics.median(t1) * 1e3, statistics.median(t2) * 1e3
        lines.append(f"{n} rows: 1 thread {m1:.3f} ms, 2 threads {m2:.3f} ms ({m1 / m2:.2f}x)")
    return lines


def build_engines(model_txt: Path, cache: Path, notes: list[str]) -> dict[str, Callable]:
    import lightgbm as lgb

    text = model_txt.read_text()
    ensemble = convert_lightgbm(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    with tempfile.TemporaryDirectory() as cold:
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        ours = CompiledTreeScorer(ensemble, model_sha256=digest, cache_dir=Path(cold))
        wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
        notes.append(
            f"our compile (cold, no cache): {wall:.1f} s wall, {cpu:.1f} CPU-seconds "
            "(this process + compile children)"
        )
        t0 = time.perf_counter()
        CompiledTreeScorer(ensemble, model_sha256=digest, cache_dir=Path(cold))
        notes.append(f"our load from the object cache: {(time.perf_counter() - t0) * 1e3:.0f} ms")
    ours2 = CompiledTreeScorer(ensemble, threads=2)
    always2 = CompiledTreeScorer(ensemble, threads=2, parallel_min_rows=1)
    floats = CompiledTreeScorer(ensemble, binned=False)
    if ours.lanes == floats.lanes:
        notes.append("this model keeps float32 compares (too many thresholds for int8 codes)")
    booster = lgb.Booster(model_file=str(model_txt))
    engines: dict[str, Callable] = {
        "ours (1 thread)": ours.score,
        "ours, float32 compares (1 thread)": floats.score,
        "ours (2 threads)": ours2.score,
        "ours (2 threads, from 1 row)": always2.score,
        "LightGBM": lambda x: booster.predict(x, num_threads=1, raw_score=True),
        "reference (numpy)": lambda x: reference.predict(ensemble, x),
    }
    try:
        import lleaves

        _patch_lleaves()
        llm = lleaves.Model(model_file=str(model_txt))
        obj = cache / f"{model_txt.stem}.lleaves.o"
        t0 = time.perf_counter()
        llm.compile(cache=str(obj), raw_score=True)
        notes.append(f"lleaves compile (or cache load): {time.perf_counter() - t0:.1f} s")
        engines["lleaves"] = lambda x: llm.predict(x, n_jobs=1)
    except ImportError as exc:
        notes.append(f"lleaves not measured: {exc}")
    try:
        engines["onnxruntime"] = _onnx_engine(booster, model_txt, cache, notes)
    except ImportError as exc:
        notes.append(f"onnxruntime not measured (needs onnxmltools): {exc}")
    return engines


def _onnx_engine(booster: object, model_txt: Path, cache: Path, notes: list[str]) -> Callable:
    import onnxruntime as ort

    path = cache / f"{model_txt.stem}.onnx"
    if not path.exists():
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType

        n = booster.num_feature()  # type: ignore[attr-defined]
        onx = onnxmltools.convert_lightgbm(
            booster, initial_types=[("features", FloatTensorType([None, n]))], zipmap=False
        )
        path.write_bytes(onx.SerializeToString())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    notes.append("onnxruntime model: onnxmltools.convert_lightgbm (TreeEnsembleRegressor)")
    return lambda x: session.run(None, {"features": x})[0]


def check_agreement(engines: dict[str, Callable], x: np.ndarray) -> list[str]:
    want = engines["LightGBM"](x)
    lines = []
    for name, fn in engines.items():
        got = np.asarray(fn(x), dtype=np.float64).reshape(-1)
        err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
        lines.append(f"{name}: max relative difference to LightGBM {err:.1e}")
    return lines


def measure(engines: dict[str, Callable], rows: np.ndarray, reps: dict[int, int]) -> dict:
    results: dict[tuple[str, int], float] = {}
    for n in SIZES:
        x = np.ascontiguousarray(rows[:n])
        times: dict[str, list[float]] = {name: [] for name in engines}
        for fn in engines.values():  # warm-up
            fn(x)
        for rep in range(reps[n]):
            order = list(engines)
            random.Random(rep).shuffle(order)
            for name in order:
                if name.startswith("reference") and rep >= max(3, reps[n] // 10):
                    continue  # plain numpy is slow; a few repetitions say enough
                t0 = time.perf_counter()
                engines[name](x)
                times[name].append(time.perf_counter() - t0)
        for name, ts in times.items():
            results[(name, n)] = statistics.median(ts) * 1e3
        print(n, {k: round(v, 3) for (k, m), v in results.items() if m == n})
    return results


def report(results: dict, engines: list[str], notes: list[str], args: argparse.Namespace) -> str:
    head = "| engine | " + " | ".join(f"{n:,} docs" for n in SIZES) + " |"
    lines = [head, "|---" * (len(SIZES) + 1) + "|"]
    for name in engines:
        cells = [f"{results[(name, n)]:.3f}" for n in SIZES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Ratio: engine time / our single-thread time (higher = we are faster).", ""]
    lines += [head.replace("engine", "engine / ours"), "|---" * (len(SIZES) + 1) + "|"]
    for name in engines:
        cells = [f"{results[(name, n)] / results[('ours (1 thread)', n)]:.2f}x" for n in SIZES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    trained = (
        f"model file {args.model}"
        if args.model is not None
        else f"trained on generate_letor(rows={args.rows}, queries={args.queries}, "
        f"seed={args.seed})"
    )
    meta = [
        f"Model: LightGBM lambdarank, {args.trees} trees x {args.leaves} leaves, "
        f"{args.features} features, {trained}.",
        f"Machine: {machine}; load average at the end {os.getloadavg()[0]:.1f} "
        "(shared with other jobs: absolute times are indicative, ratios are the result).",
        "Medians in milliseconds per call, input float32 [n, features] already in memory.",
    ]
    return "\n".join(["## Measured", "", *meta, "", *lines, "", *[f"- {n}" for n in notes], ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--features", type=int, default=136)
    parser.add_argument("--trees", type=int, default=500)
    parser.add_argument("--leaves", type=int, default=63)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=200, help="repetitions at <= 100 docs")
    parser.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "ltr-bench")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument(
        "--model", type=Path, default=None, help="an existing LightGBM model.txt (skip training)"
    )
    args = parser.parse_args()
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    model_txt = train_model(args, args.cache_dir)
    notes: list[str] = []
    engines = build_engines(model_txt, args.cache_dir, notes)
    rows = generate(12_000, args.features, 120, args.seed + 1).features[:10_000]
    notes += check_agreement(engines, rows[:2000])
    reps = {1: args.reps, 10: args.reps, 100: args.reps, 1000: max(args.reps // 4, 5)}
    reps[10000] = max(args.reps // 20, 3)
    notes += ["threads: " + line for line in thread_sweep(engines, rows, max(args.reps // 4, 5))]
    del engines["ours (2 threads, from 1 row)"]
    results = measure(engines, rows, reps)
    text = report(results, list(engines), notes, args)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
