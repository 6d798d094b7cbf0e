"""Item features from a store vs sent in the request: /rerank latency side by side, the Redis
batch fetch, a 1M-item push, and the in-process snapshot's load time and memory.

`python -m bench.bench_item_features [--quick]` → bench/results/item_features.md

Model: bench_service's LightGBM lambdarank 500 iterations x 63 leaves over 136 features, served
under two manifests of the same model.json: `all` (today's form: every feature sent with each
candidate) and `items` (f0..f35 sent per candidate, f36..f135 item features from the store).
Four request forms are sent in turn, one request each per round, so that whatever else the
shared machine does at a moment hits all of them alike: all-in-request JSON, id + 36 features
with the item features from Redis, the same from the in-process snapshot, and all-in-request
JSON on a server with the compiled body scan off (`LTR_BODY_SCAN=false`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import redis

from app.api import body_scan
from app.artifacts.tree_dump import TreeEnsemble
from app.features import item_lookup
from bench.bench_service import CACHE, train_model
from bench.lean_http import LeanClient
from tests.support import random_ensemble
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import publish_sourced
from tests.support.uvicorn_server import product_server
from trainer.features.item_table import ItemTable
from trainer.features.redis_sets import push_item_set

N_FEATURES = 136
N_CANDIDATE = 36
SIZES = (100, 1000)
RESULTS = Path(__file__).parent / "results" / "item_features.md"
CANDIDATE_NAMES = [f"f{i}" for i in range(N_CANDIDATE)]
ITEM_NAMES = [f"f{i}" for i in range(N_CANDIDATE, N_FEATURES)]
DEADLINE_MS = "50"  # the default 10 ms is tight for 1,000 keys on a machine this loaded
RUN_LENGTH = 20  # the second measurement: requests of one form back to back
FORMS = (
    "all-in-request JSON",
    "item features from Redis",  # the worker's row cache off: every row read from Redis
    "item features in-process",
    "all-in-request JSON, full decode",  # LTR_BODY_SCAN=false: orjson decodes it all
    "item features from Redis, rows cached",  # a 50,000-row cache, which the bodies fit
)
ID_FORMS = (FORMS[1], FORMS[2], FORMS[4])


def item_set(n_items: int, seed: int = 0) -> ItemTable:
    """n items x 100 features, 4 decimals, about 5 % missing (as bench_service's payload)."""
    rng = np.random.default_rng(seed)
    matrix = np.round(rng.random((n_items, len(ITEM_NAMES)), dtype=np.float32), 4)
    matrix[rng.random(matrix.shape, dtype=np.float32) < 0.05] = np.nan
    ids = np.char.add("doc-", np.arange(n_items).astype(np.str_))
    return ItemTable(ids, matrix, ITEM_NAMES, f"generated, {n_items} items")


def model(random_trees: bool) -> TreeEnsemble:
    """bench_service's LightGBM model, or (`--random-trees`, when training it would take too
    long on a busy machine) 500 random full depth-6 trees: 64 leaves each, the same work."""
    if random_trees:
        return random_ensemble(N_FEATURES, num_trees=500, depth=6, seed=1)
    return train_model(N_FEATURES, seed=1)


def publish(registry: Path, table: ItemTable, ensemble: TreeEnsemble) -> None:
    names = [f"f{i}" for i in range(N_FEATURES)]
    publish_sourced(registry, ensemble, {}, None, name="all", feature_names=names)
    sources: dict[str, Any] = {name: "item" for name in ITEM_NAMES}
    publish_sourced(registry, ensemble, sources, table, name="items", feature_names=names)


def bodies(n: int, table: ItemTable, count: int, seed: int) -> dict[str, list[bytes]]:
    """`count` different requests of n candidates per form, the same candidates in each form."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[bytes]] = {"all": [], "items": []}
    for _ in range(count):
        rows = rng.choice(len(table.ids), n, replace=False)
        cand = np.round(rng.random((n, N_CANDIDATE)), 4)
        ids = table.ids[rows].tolist()
        full = np.hstack([cand, table.matrix[rows]]).tolist()
        nan_free = [[None if v != v else v for v in row] for row in full]
        out["all"].append(
            orjson.dumps(
                {
                    "model": "all",
                    "candidates": [
                        {"id": i, "features": f} for i, f in zip(ids, nan_free, strict=True)
                    ],
                }
            )
        )
        out["items"].append(
            orjson.dumps(
                {
                    "model": "items",
                    "candidates": [
                        {"id": i, "features": f} for i, f in zip(ids, cand.tolist(), strict=True)
                    ],
                }
            )
        )
    return out


class HttpxPoster:
    """httpx's answer to a JSON POST, as (status, body)."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=30)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        resp = self.client.post(path, content=body, headers={"content-type": "application/json"})
        return resp.status_code, resp.content

    def close(self) -> None:
        self.client.close()


CLIENTS = {"httpx": HttpxPoster, "lean": LeanClient}


def interleaved(
    urls: dict[str, str],
    payloads: dict[str, list[bytes]],
    rounds: int,
    run_length: int = 1,
    client: str = "httpx",
) -> dict[str, np.ndarray]:
    """Latency (ms) per form; each round sends `run_length` requests of each form back to back
    (one by default), the forms in rotating order; `rounds` requests per form in all. `client`:
    httpx, or the lean client (bench.lean_http); the answer is decoded after the clock stops."""
    forms = {
        FORMS[0]: (urls["snapshot"], payloads["all"]),
        FORMS[1]: (urls["redis"], payloads["items"]),
        FORMS[2]: (urls["snapshot"], payloads["items"]),
        FORMS[3]: (urls["full decode"], payloads["all"]),
        FORMS[4]: (urls["redis, rows cached"], payloads["items"]),
    }
    clients = {name: CLIENTS[client](url) for name, (url, _) in forms.items()}
    times: dict[str, list[float]] = {name: [] for name in forms}
    degraded = dict.fromkeys(forms, 0)
    try:
        turns = -(-rounds // run_length)
        warm_turns = -(-10 // run_length)
        for turn in range(turns + warm_turns):
            order = list(forms)[turn % len(forms) :] + list(forms)[: turn % len(forms)]
            for name, k in ((name, k) for name in order for k in range(run_length)):
                r = turn * run_length + k
                body = forms[name][1][r % len(forms[name][1])]
                t0 = time.perf_counter()
                status, content = clients[name].post("/rerank", body)
                elapsed = time.perf_counter() - t0
                if status != 200:
                    raise RuntimeError(f"{name}: HTTP {status}: {content[:300]!r}")
                answer = orjson.loads(content)
                if answer.get("item_features_missing") and not answer["degraded"]:
                    raise RuntimeError(f"{name}: items missing from the store")
                if turn >= warm_turns:  # warm-up
                    times[name].append(elapsed)
                    degraded[name] += bool(answer["degraded"])
    finally:
        for each in clients.values():
            each.close()
    out = {name: np.asarray(t) * 1e3 for name, t in times.items()}
    out["_degraded"] = np.asarray([degraded[name] for name in forms])
    return out


def redis_fetch_ms(url: str, table: ItemTable, reps: int) -> dict[str, np.ndarray]:
    """The service's own batch fetch (pointer GET + MGET of 1,000 keys, one pipeline, on uvloop
    as under uvicorn), interleaved with two references on the same keys: redis-py's plain
    synchronous MGET (the fetch and it take turns reading the keys first), and one PING round
    trip (what this machine's loopback costs now); and Redis's own mean time per MGET over
    those calls (`INFO commandstats`), what no client can save. ms."""
    import uvloop

    from app.features.item_redis import RedisItemBackend, item_keys
    from app.features.redis_store import RedisStore
    from app.settings import Settings

    plain = redis.Redis.from_url(url)
    version = plain.get("ltr:itemset:bench").decode()

    async def run() -> dict[str, np.ndarray]:
        store = RedisStore(Settings(redis_url=url, redis_deadline_ms=5000))
        await store.start()
        backend = RedisItemBackend(store)
        rng = np.random.default_rng(5)
        times: dict[str, list[float]] = {"fetch": [], "redis-py MGET": [], "PING": []}
        try:
            for r in range(reps + 20):
                ids = table.ids[rng.choice(len(table.ids), 1000, replace=False)].tolist()
                # Whichever reads a set of keys first finds them cold in Redis (a million
                # items do not stay in the CPU caches) and takes about twice as long as the
                # second read: the two take turns going first.
                keys = item_keys("ltr:", "bench", version, ids)
                if r % 2:
                    t0 = time.perf_counter()
                    got = await backend.fetch("bench", ids, store.new_deadline())
                    t1 = time.perf_counter()
                    plain.mget(keys)
                    t2 = time.perf_counter()
                    fetch_s, mget_s = t1 - t0, t2 - t1
                else:
                    t0 = time.perf_counter()
                    plain.mget(keys)
                    t1 = time.perf_counter()
                    got = await backend.fetch("bench", ids, store.new_deadline())
                    t2 = time.perf_counter()
                    fetch_s, mget_s = t2 - t1, t1 - t0
                t3 = time.perf_counter()
                plain.ping()
                ping_s = time.perf_counter() - t3
                assert got.error is None and got.values is not None
                if r == 19:  # Redis's own time per MGET from here on (both clients' calls)
                    plain.config_resetstat()
                if r >= 20:
                    times["fetch"].append(fetch_s)
                    times["redis-py MGET"].append(mget_s)
                    times["PING"].append(ping_s)
        finally:
            await store.close()
        measured = {k: np.asarray(v) * 1e3 for k, v in times.items()}
        stats = plain.info("commandstats").get("cmdstat_mget", {})
        measured["Redis own MGET"] = np.asarray([float(stats.get("usec_per_call", np.nan)) / 1e3])
        return measured

    return uvloop.run(run())


SNAPSHOT_PROBE = """
import resource, sys, time
import numpy as np
from app.artifacts.store import load_version
from app.features.item_snapshot import ItemSnapshot
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) / 1024
base = rss()
t0 = time.perf_counter(); artifact = load_version(sys.argv[1]); t1 = time.perf_counter()
snap = ItemSnapshot.load(artifact.path, artifact.manifest.item_features); t2 = time.perf_counter()
after_load = rss()
rng = np.random.default_rng(1)
cols = np.arange(len(snap.names))
lookups = []
for _ in range(200):
    ids = snap.ids[rng.choice(len(snap), 1000, replace=False)].tolist()
    s = time.perf_counter(); snap.lookup(ids, cols); lookups.append(time.perf_counter() - s)
print(t1 - t0, t2 - t1, after_load - base, rss() - base, np.median(lookups) * 1e3)
"""


def snapshot_probe(version_dir: Path) -> dict[str, float]:
    """In a fresh process: verify (sha256) + open the 1M snapshot, RSS, lookup time."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOT_PROBE, str(version_dir)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    verify, load, rss_load, rss_used, lookup = map(float, out)
    return {
        "verify_s": verify,
        "load_s": load,
        "rss_load_mb": rss_load,
        "rss_used_mb": rss_used,
        "lookup_ms": lookup,
    }


def idle_toll_ms(reps: int = 300) -> tuple[float, float]:
    """A fixed CPU task's median ms back to back, and after each 7 ms sleep (this process)."""
    rng = np.random.default_rng(11)
    matrix = rng.random((1_000_000, 100), dtype=np.float32)
    rows = rng.choice(matrix.shape[0], 1000, replace=False)
    values = rng.random(20_000)

    def task() -> None:
        matrix[rows].sum()
        np.sort(values).sum()

    medians = []
    for pause in (0.0, 0.007):
        times = []
        for _ in range(reps):
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter()
            task()
            times.append(time.perf_counter() - t0)
        medians.append(float(np.median(times)) * 1e3)
    return medians[0], medians[1]


def server_env(registry: Path, **extra: str) -> dict[str, str]:
    return {
        "LTR_REGISTRY": str(registry),
        "LTR_RELOAD_POLL_SECONDS": "0",
        "LTR_COMPILED_CACHE_DIR": str(CACHE / "compiled"),
        **extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k items, fewer requests")
    parser.add_argument(
        "--random-trees", action="store_true", help="500 random depth-6 trees (no training)"
    )
    args = parser.parse_args()
    n_items = 100_000 if args.quick else 1_000_000
    rounds = {100: 60, 1000: 30} if args.quick else {100: 300, 1000: 150}
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="ltr-bench-items-"))
    registry = work / "registry"
    table = item_set(n_items)
    ensemble = model(args.random_trees)  # trained (or read from the cache) before the clock
    t0 = time.perf_counter()
    publish(registry, table, ensemble)
    publish_s = time.perf_counter() - t0
    server = RedisServer(shutil.which("redis-server") or "redis-server").start()
    latencies: dict[int, dict[str, np.ndarray]] = {}
    in_runs: dict[int, dict[str, np.ndarray]] = {}
    lean: dict[int, dict[str, np.ndarray]] = {}
    lean_runs: dict[int, dict[str, np.ndarray]] = {}
    try:
        client = redis.Redis.from_url(server.url)
        push = push_item_set(client, "ltr:", "catalog", table)  # the `items` model's set
        print(f"push {n_items} items: {push.seconds:.1f} s", flush=True)
        push_item_set(client, "ltr:", "bench", table)  # a second set for the fetch loop
        redis_mb = float(client.info("memory")["used_memory"]) / 2**20
        fetch = redis_fetch_ms(server.url, table, 100 if args.quick else 500)
        print(f"fetch 1000: p50 {np.median(fetch['fetch']):.2f} ms", flush=True)
        snapshot = snapshot_probe(registry / "items" / "v1")
        print(f"snapshot: {snapshot}", flush=True)
        body_scan.KERNEL.compile_now()  # the servers then load it from numba's cache
        item_lookup.KERNEL.compile_now()
        in_process = product_server(server_env(registry, LTR_ITEM_STORE="snapshot")).start()
        redis_env = {"LTR_REDIS_URL": server.url, "LTR_REDIS_DEADLINE_MS": DEADLINE_MS}
        with_redis = product_server(
            server_env(registry, LTR_ITEM_ROW_CACHE_ROWS="0", **redis_env)
        ).start()
        full_decode = product_server(
            server_env(registry, LTR_ITEM_STORE="snapshot", LTR_BODY_SCAN="false")
        ).start()
        rows_cached = product_server(
            server_env(registry, LTR_ITEM_ROW_CACHE_ROWS="50000", **redis_env)
        ).start()
        servers = (in_process, with_redis, full_decode, rows_cached)
        try:
            for each in servers:
                each.wait_ready(300)
            time.sleep(3)  # the scan kernel's load from the cache, in the background
            urls = {
                "snapshot": in_process.url,
                "redis": with_redis.url,
                "full decode": full_decode.url,
                "redis, rows cached": rows_cached.url,
            }
            for n in SIZES:
                payloads = bodies(n, table, 20, seed=n)
                latencies[n] = interleaved(urls, payloads, rounds[n])
                in_runs[n] = interleaved(urls, payloads, rounds[n], RUN_LENGTH)
                lean[n] = interleaved(urls, payloads, rounds[n], client="lean")
                lean_runs[n] = interleaved(urls, payloads, rounds[n], RUN_LENGTH, client="lean")
                sizes = {k: len(v[0]) for k, v in payloads.items()}
                latencies[n]["_bytes"] = np.asarray([sizes["all"], sizes["items"]])
                for each in (in_runs, lean, lean_runs):
                    each[n]["_bytes"] = latencies[n]["_bytes"]
                for name in FORMS:
                    ms, lean_ms = latencies[n][name], lean[n][name]
                    print(
                        f"n={n:5d} {name:28s} p50 {np.median(ms):6.2f} ms "
                        f"(lean client {np.median(lean_ms):6.2f})",
                        flush=True,
                    )
        finally:
            for each in servers:
                each.stop()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    measured = (latencies, in_runs, lean, lean_runs)
    idle = idle_toll_ms()
    report = render(measured, push, fetch, snapshot, redis_mb, publish_s, n_items, args, load, idle)
    RESULTS.write_text(report)
    print(report)


def render(
    measured: tuple[
        dict[int, dict[str, np.ndarray]],
        dict[int, dict[str, np.ndarray]],
        dict[int, dict[str, np.ndarray]],
        dict[int, dict[str, np.ndarray]],
    ],
    push: Any,
    fetch: dict[str, np.ndarray],
    snapshot: dict[str, float],
    redis_mb: float,
    publish_s: float,
    n_items: int,
    args: argparse.Namespace,
    load: str,
    idle: tuple[float, float],
) -> str:
    latencies, in_runs, lean, lean_runs = measured
    flags = (" --quick" if args.quick else "") + (" --random-trees" if args.random_trees else "")
    trees = (
        "500 random full depth-6 trees (64 leaves each; `--random-trees`: the LightGBM model "
        "was not trained on this busy machine in time)"
        if args.random_trees
        else "LightGBM lambdarank 500 iterations x 63 leaves (bench_service's)"
    )
    lines = [
        "# Item features: candidates by id, features from a store",
        "",
        f"Run: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `python -m bench.bench_item_features"
        f"{flags}`; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, shared with other jobs while measured ({load}; absolute times "
        "are indicative, the ratios within one run are what to read).",
        "",
        f"Model: {trees} over 136 features, "
        "served by the compiled scorer under two manifests: all 136 sent per candidate, or 36 "
        f"sent per candidate and 100 item features from a store of {n_items:,} items. One "
        "worker per server, served as `ltr serve` serves (`python -m app`: the product's own "
        "HTTP protocol; two servers without Redis, two with; Redis on loopback); the five "
        "forms interleaved request by request on keep-alive connections; 20 different bodies "
        "per form and size, the same candidates in each form. The Redis server's deadline is "
        f"{DEADLINE_MS} ms (default 10); a request past it falls back to the snapshot and "
        "counts as degraded below. `item features from Redis` reads every row from Redis (the "
        "worker's row cache off, `LTR_ITEM_ROW_CACHE_ROWS=0`, the default): the headline; "
        "`rows cached` is a server with a 50,000-row cache, which the 20 bodies' 20,000 rows "
        "all fit after their first round: what a request for items already seen costs (real "
        "traffic lies between, by how often its candidates repeat).",
        "",
        "## /rerank latency (ms)",
        "",
        *_latency_table(latencies),
        "",
        f"Then the same requests in runs of {RUN_LENGTH} of one form before the next (as a "
        "server sees a stream of its own form in service; request by request, each id-only "
        "request follows a 2 MB one, whose parse evicts its compiled trees from the caches):",
        "",
        *_latency_table(in_runs),
        "",
        "Then request by request again, timed by a lean client (bench.lean_http: the request "
        "written in one send, the answer read by its Content-Length, decoded after the clock "
        "stops) instead of httpx, whose own Python costs every form about the same 1-2 ms on "
        "this machine: what the server costs, with less of the client in it:",
        "",
        *_latency_table(lean),
        "",
        f"And in runs of {RUN_LENGTH} by the lean client: what each form costs a server busy "
        "with a stream of it. Request by request, every server sits idle between its requests "
        "while the others answer theirs, and on this VM a core that idled a few milliseconds "
        f"runs the next work slower: a fixed CPU task (a 1,000-row gather from a 400 MB matrix "
        f"and a sort) took {idle[0]:.3f} ms back to back and {idle[1]:.3f} ms after each 7 ms "
        "sleep, in this run. That toll is proportional to the work, so it weighs on the "
        "short id-only requests' ratios:",
        "",
        *_latency_table(lean_runs),
    ]
    lean_big = lean[max(lean)]
    lean_base = float(np.median(lean_big[FORMS[0]]))
    lean_redis = float(np.median(lean_big[FORMS[1]])) / lean_base
    lean_local = float(np.median(lean_big[FORMS[2]])) / lean_base
    run_big = in_runs[max(in_runs)]
    run_base = float(np.median(run_big[FORMS[0]]))
    run_redis = float(np.median(run_big[FORMS[1]])) / run_base
    run_local = float(np.median(run_big[FORMS[2]])) / run_base
    lean_run_big = lean_runs[max(lean_runs)]
    lean_run_base = float(np.median(lean_run_big[FORMS[0]]))
    lean_run_redis = float(np.median(lean_run_big[FORMS[1]])) / lean_run_base
    lean_run_local = float(np.median(lean_run_big[FORMS[2]])) / lean_run_base
    big = latencies[max(latencies)]
    base = float(np.median(big[FORMS[0]]))
    redis_ratio = float(np.median(big[FORMS[1]])) / base
    local_ratio = float(np.median(big[FORMS[2]])) / base
    old_base = float(np.median(big[FORMS[3]]))
    cached_ratio = float(np.median(big[FORMS[4]])) / base
    lean_cached = float(np.median(lean_big[FORMS[4]])) / lean_base
    lines += [
        "",
        "All forms but `full decode` are served with the compiled body scan (`LTR_BODY_SCAN`, "
        "the default: the usual body's feature values read from the bytes straight into "
        "float32); that one is the all-in-request form on a server with it off (orjson "
        "decodes the whole body, then the values are copied into float32), as before the "
        "scan. Against that: "
        f"all-in-request {base / old_base:.2f}x, Redis {redis_ratio * base / old_base:.2f}x, "
        f"in-process {local_ratio * base / old_base:.2f}x.",
        "",
        f"Targets at 1,000 candidates: Redis <= 0.5x ({redis_ratio:.2f}x: "
        f"{'met' if redis_ratio <= 0.5 else 'NOT met'}), in-process <= 0.35x "
        f"({local_ratio:.2f}x: {'met' if local_ratio <= 0.35 else 'NOT met'}); in runs: "
        f"Redis {run_redis:.2f}x, in-process {run_local:.2f}x; with the lean client: Redis "
        f"{lean_redis:.2f}x ({'met' if lean_redis <= 0.5 else 'NOT met'}), in-process "
        f"{lean_local:.2f}x ({'met' if lean_local <= 0.35 else 'NOT met'}); lean client in "
        f"runs: Redis {lean_run_redis:.2f}x ({'met' if lean_run_redis <= 0.5 else 'NOT met'}), "
        f"in-process {lean_run_local:.2f}x "
        f"({'met' if lean_run_local <= 0.35 else 'NOT met'}). Rows already in "
        f"the worker's row cache: {cached_ratio:.2f}x (lean client {lean_cached:.2f}x).",
        "",
        "## Item store",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| Redis batch fetch of 1,000 items (pointer GET + MGET, one pipeline), p50 "
        f"| {np.median(fetch['fetch']):.2f} ms |",
        f"| Redis batch fetch of 1,000 items, p99 | {np.percentile(fetch['fetch'], 99):.2f} ms |",
        f"| reference, same keys, interleaved: redis-py synchronous MGET, p50 "
        f"| {np.median(fetch['redis-py MGET']):.2f} ms |",
        f"| reference, interleaved: one PING round trip, p50 | {np.median(fetch['PING']):.2f} ms |",
        "| of which Redis's own MGET of 1,000 keys (`INFO commandstats`: mean time per call, "
        f"both clients') | {fetch['Redis own MGET'][0]:.2f} ms |",
        f"| push of {n_items:,} items x 100 features (write, read back and compare every "
        f"value, switch) | {push.seconds:.1f} s |",
        f"| Redis memory after two such sets | {redis_mb:.0f} MB |",
        f"| two model versions written, one with a {n_items:,}-item snapshot (sort, write, "
        f"sha256, fsync; the model trained beforehand) | {publish_s:.1f} s |",
        f"| snapshot: verify sha256 of the version's files at load "
        f"| {snapshot['verify_s']:.2f} s |",
        "| snapshot: open (memory-map, check ids sorted, build the id hash index) "
        f"| {snapshot['load_s']:.2f} s |",
        f"| snapshot: RSS added by opening it | {snapshot['rss_load_mb']:.0f} MB |",
        f"| snapshot: RSS added after 200 lookups of 1,000 random items "
        f"| {snapshot['rss_used_mb']:.0f} MB |",
        f"| snapshot: lookup of 1,000 items (ids → float32 rows), median "
        f"| {snapshot['lookup_ms']:.2f} ms |",
        "",
        "Targets: batch fetch p50 <= 2 ms; push of 1M x 100 <= 60 s. The snapshot files are "
        "memory-mapped, so its pages are page cache shared by every worker on the host, not "
        "private memory; the sha256 check reads them once at load. (The snapshot RSS figures "
        "count mapped pages the process touched, including the ones the sha256 check left in "
        "the page cache.)",
        "",
    ]
    return "\n".join(lines)


def _latency_table(latencies: dict[int, dict[str, np.ndarray]]) -> list[str]:
    lines = [
        "| candidates | form | body | p50 | p99 | p50 vs all-in-request | degraded answers |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n, by_form in latencies.items():
        base = float(np.median(by_form[FORMS[0]]))
        all_bytes, item_bytes = by_form["_bytes"].tolist()
        for k, name in enumerate(FORMS):
            ms = by_form[name]
            size = item_bytes if name in ID_FORMS else all_bytes
            lines.append(
                f"| {n} | {name} | {size / 1024:.0f} KB | {np.median(ms):.2f} "
                f"| {np.percentile(ms, 99):.2f} | {np.median(ms) / base:.2f}x "
                f"| {int(by_form['_degraded'][k])} of {len(ms)} |"
            )
    return lines


if __name__ == "__main__":
    main()
