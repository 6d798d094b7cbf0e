"""Reading speed of the LETOR reader against reference parsers, side by side in one run.

`python -m bench.bench_data` → bench/results/data.md

Files: MQ2008 Fold1 train (if ../shared is present), the bundled LightGBM demo rank.train
(`.query` groups, no qid) and a generated 100,000-row x 136-feature file. Readers: ours
(compiled scan to a dense float32 matrix), XGBoost's libsvm text parser (to a sparse DMatrix,
2 threads), LightGBM's file loader where it can read the file (no `qid:` support; it also bins
the features), and our pure-Python reference line parser (what a per-token loop costs).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from bench.generate_letor import write as write_generated
from trainer.data.letor import read_letor
from trainer.data.letor_line import parse_line, strip_comment
from trainer.metrics.report import ranking_report

ROOT = Path(__file__).resolve().parents[1]
MQ2008 = ROOT / ".." / "shared" / "datasets" / "mq2008" / "Fold1" / "train.txt"
DEMO = ROOT / "trainer" / "demo_data" / "rank.train"
OUT = ROOT / "bench" / "results" / "data.md"
REPEATS = 3


def best_of(run: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def python_reference(path: Path) -> np.ndarray:
    rows = [
        row
        for raw in path.read_bytes().splitlines()
        if (row := parse_line(strip_comment(raw).decode())) is not None
    ]
    width = max(max(row.ids, default=0) for row in rows)
    features = np.zeros((len(rows), width), dtype=np.float32)
    for i, row in enumerate(rows):
        features[i, np.asarray(row.ids, dtype=np.int64) - 1] = row.values
    return features


def xgboost_reader(path: Path) -> None:
    import xgboost as xgb

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # text input is deprecated in XGBoost 3.1, still works
        xgb.DMatrix(f"{path}?format=libsvm", nthread=2)


def lightgbm_reader(path: Path) -> None:
    import lightgbm as lgb

    lgb.Dataset(str(path), params={"verbose": -1, "num_threads": 2}).construct()


def cold_start(path: Path, cache_dir: str | None = None) -> float:
    """Import + first read in a fresh process: numba loads its cached machine code, or with an
    empty `cache_dir` compiles the scanner as on a machine's very first run."""
    code = (
        "import time; t = time.perf_counter(); from trainer.data.letor import read_letor; "
        f"read_letor({str(path)!r}); print(time.perf_counter() - t)"
    )
    env = dict(os.environ, **({"NUMBA_CACHE_DIR": cache_dir} if cache_dir else {}))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def main() -> None:
    read_letor(DEMO)  # compile (or load the cache) outside the timings
    lines = ["| file | rows x features | MB | reader | best of 3 (s) | ours / reader |",
             "|---|---|---:|---|---:|---:|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        generated = Path(tmp) / "generated_100k_136.txt"
        started = time.perf_counter()
        write_generated(100_000, 136, 2_000, 0, generated)
        generate_seconds = time.perf_counter() - started
        files = [(MQ2008, "MQ2008 Fold1 train")] if MQ2008.is_file() else []
        files += [(DEMO, "demo rank.train"), (generated, "generated")]
        for path, name in files:
            data = read_letor(path)
            ours = best_of(partial(read_letor, path))
            readers: list[tuple[str, Callable[[], object]]] = [
                ("ours", partial(read_letor, path)),
                ("XGBoost DMatrix (libsvm)", partial(xgboost_reader, path)),
            ]
            if path == DEMO:
                readers.append(("LightGBM Dataset (+binning)", partial(lightgbm_reader, path)))
            if path != generated:
                readers.append(("pure-Python reference", partial(python_reference, path)))
            size = path.stat().st_size / 1e6
            shape = f"{data.num_docs:,} x {data.num_features}"
            for reader, run in readers:
                seconds = ours if reader == "ours" else best_of(run)
                lines.append(
                    f"| {name} | {shape} | {size:.1f} | {reader} | {seconds:.3f} "
                    f"| {ours / seconds:.2f} |"
                )
                print(lines[-1], flush=True)
        cold = cold_start(MQ2008 if MQ2008.is_file() else DEMO)
        compiling = cold_start(MQ2008 if MQ2008.is_file() else DEMO, str(Path(tmp) / "numba"))
        data = read_letor(generated)
    scores = np.random.default_rng(0).random(data.num_docs)
    report_seconds = best_of(lambda: ranking_report(scores, data.labels, data.group_offsets))
    text = "\n".join(
        [
            "# Data reading (LETOR/SVMlight text)",
            "",
            f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
            f"{platform.python_version()}; shared with other jobs while measured (noisy; "
            "load average "
            f"{os.getloadavg()[0]:.1f}), so absolute times are indicative, ratios less so.",
            "",
            "Method: `python -m bench.bench_data`; best of 3 per reader, all in one run. Ours "
            "returns a dense float32 matrix with groups; XGBoost builds a sparse DMatrix with 2 "
            "threads; LightGBM cannot read `qid:` files, so it runs on the demo file only and "
            "also bins the features. `ours / reader` < 1 means ours is faster.",
            "",
            *lines,
            "",
            f"- Cold start (fresh process: imports, numba cache load, first read of "
            f"{'MQ2008 Fold1 train' if MQ2008.is_file() else 'demo rank.train'}): {cold:.2f} s; "
            f"the very first run on a machine also compiles the scanner: {compiling:.2f} s "
            "(then cached in `__pycache__`).",
            f"- Generating the 100,000 x 136 file (streamed, 2,000 queries): "
            f"{generate_seconds:.1f} s.",
            f"- `ranking_report` (NDCG@1/3/5/10, MAP, MRR, ERR@10) on its "
            f"{data.num_docs:,} documents / {data.num_queries:,} queries: {report_seconds:.3f} s.",
            "",
            "Targets (issue 2): MQ2008 Fold1 train well under 1 s; 100,000 x 136 under 10 s.",
            "",
        ]
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
