"""Serving cost of experiments: /rerank at 300 candidates over real uvicorn servers, run side
by side (requests alternate between servers, so machine noise hits all alike):

- `main`: the code without the experiment hook (the main checkout, if given);
- `no experiment`: this code, no EXPERIMENT file (the hook's cost: one dict lookup);
- `interleave`: every request interleaved (traffic 1.0): two models score, team draft merges;
- `ab`: every request in an A/B experiment (one model scores, as without one).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from app.experiments.spec import ExperimentSpec, Mode
from app.registry.experiments import write_active
from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import UvicornServer

CANDIDATES = 300
FEATURES = 20
TREES, DEPTH = 300, 6
ROUNDS = 1500
RUN_LENGTH = 20  # requests to one server back to back, in the second measurement
WARMUP = 100
# Warm-up lasts at least this long too: a server compiles its numba kernels (the body scan,
# team draft's merge) in the background for the first seconds, serving Python paths meanwhile,
# and steady-state serving is what is measured.
WARMUP_SECONDS = 10.0
# Optionally a checkout without the experiment hook, served with no experiment (`main`).
MAIN_CHECKOUT = os.environ.get("LTR_MAIN_CHECKOUT")
# Optionally an older checkout served interleaved too, to compare two versions of the hook.
PREVIOUS_CHECKOUT = os.environ.get("LTR_PREVIOUS_CHECKOUT")


def _registry(root: Path, mode: Mode | None) -> Path:
    publish(root, random_ensemble(FEATURES, TREES, DEPTH, seed=1), version="v1")
    publish(root, random_ensemble(FEATURES, TREES, DEPTH, seed=2), version="v2", current=False)
    if mode is not None:
        write_active(
            root,
            ExperimentSpec(
                name=f"bench-{mode}",
                model="m",
                control="v1",
                candidate="v2",
                mode=mode,
                traffic=1.0,
                salt="bench",
                started_at=dt.datetime.now(dt.UTC),
            ),
        )
    return root


def run() -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="bench-interleave-"))
    configs: dict[str, tuple[Path, str | None]] = {
        "no experiment": (_registry(tmp / "plain", None), None),
        "interleave": (_registry(tmp / "interleave", "interleave"), None),
        "ab": (_registry(tmp / "ab", "ab"), None),
    }
    if MAIN_CHECKOUT is not None and (Path(MAIN_CHECKOUT) / "app" / "main.py").is_file():
        configs["main"] = (_registry(tmp / "main", None), MAIN_CHECKOUT)
    if PREVIOUS_CHECKOUT is not None:
        previous = _registry(tmp / "previous", "interleave")
        configs["interleave, previous code"] = (previous, PREVIOUS_CHECKOUT)
    servers: dict[str, UvicornServer] = {}
    rng = np.random.default_rng(0)
    bodies = []
    for i in range(16):
        rows = rng.standard_normal((CANDIDATES, FEATURES)).round(4).tolist()
        bodies.append(
            orjson.dumps(
                {
                    "candidates": [{"id": f"d{j}", "features": r} for j, r in enumerate(rows)],
                    "user": {"id": f"user{i}"},
                }
            )
        )
    try:
        for name, (registry, pythonpath) in configs.items():
            server = UvicornServer(
                {
                    "LTR_REGISTRY": str(registry),
                    "LTR_RELOAD_POLL_SECONDS": "0",
                    "LTR_MAX_CANDIDATES": "1000",
                    # Measure scoring, not shedding (a shed answer is fast and unscored).
                    "LTR_REQUEST_BUDGET_MS": "5000",
                    # Compile each model once for all servers (same bytes, same sha256).
                    "LTR_COMPILED_CACHE_DIR": str(tmp / "compiled"),
                }
            )
            if pythonpath is not None:
                server.env["PYTHONPATH"] = pythonpath
            servers[name] = server.start()
            server.wait_ready(timeout=600)
        clients = {name: httpx.Client(base_url=s.url, timeout=10) for name, s in servers.items()}
        headers = {"content-type": "application/json"}

        def post(name: str, body: bytes) -> float:
            started = time.perf_counter()
            response = clients[name].post("/rerank", content=body, headers=headers)
            elapsed = time.perf_counter() - started
            assert response.status_code == 200, response.text
            return elapsed

        warm_until = time.monotonic() + WARMUP_SECONDS
        r = 0
        while r < WARMUP or time.monotonic() < warm_until:
            for name in clients:
                post(name, bodies[r % len(bodies)])
            r += 1
        # Per request: each server's requests alternate with the others' (any noise of the
        # machine hits every server alike, but each request finds its server's caches cold).
        times: dict[str, list[float]] = {name: [] for name in servers}
        for r in range(ROUNDS):
            for name in clients:
                times[name].append(post(name, bodies[r % len(bodies)]))
        # In runs: RUN_LENGTH requests to one server back to back, then the next server, as a
        # server sees its own stream of requests in service.
        runs: dict[str, list[float]] = {name: [] for name in servers}
        for r in range(ROUNDS // RUN_LENGTH):
            for name in clients:
                for k in range(RUN_LENGTH):
                    runs[name].append(post(name, bodies[(r + k) % len(bodies)]))
        for client in clients.values():
            client.close()
    finally:
        for server in servers.values():
            server.stop()
    out: dict[str, Any] = {
        "note": f"Load average {load_start:.1f} at the start of the run, "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "previous_commit": os.environ.get("LTR_PREVIOUS_COMMIT", "the previous commit"),
        # What differs in the older checkout, in a few words (LTR_PREVIOUS_NOTE).
        "previous_note": os.environ.get("LTR_PREVIOUS_NOTE"),
        "candidates": CANDIDATES,
        "features": FEATURES,
        "trees": TREES,
        "depth": DEPTH,
        "rounds": ROUNDS,
        "warmup_seconds": WARMUP_SECONDS,
        "configs": {},
    }
    out["configs"] = _stats(times)
    out["run_length"] = RUN_LENGTH
    out["in_runs"] = _stats(runs)
    return out


def _stats(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    base = statistics.median(times["no experiment"]) * 1000
    out = {}
    for name, values in times.items():
        arr = np.asarray(values) * 1000
        out[name] = {
            "p50_ms": float(np.percentile(arr, 50)),
            "p90_ms": float(np.percentile(arr, 90)),
            "p99_ms": float(np.percentile(arr, 99)),
            "p50_vs_no_experiment": float(np.percentile(arr, 50) / base),
        }
    return out


def render(s: dict[str, Any]) -> list[str]:
    configs = s["configs"]
    notes = []
    if "main" in configs:
        notes.append(
            "`main` is the code before the experiment hook, to show that a service without an "
            "experiment pays nothing for it."
        )
    if "interleave, previous code" in configs:
        notes.append(
            "`interleave, previous code` is an older checkout served interleaved in the same "
            f"run ({s.get('previous_commit', 'the previous commit')}"
            + (f": {s['previous_note']}" if s.get("previous_note") else "")
            + ")."
        )
    lines = [
        "## Serving overhead",
        "",
        f"`POST /rerank` with {s['candidates']} candidates × {s['features']} features (no "
        f"`top_k`, so the whole list is merged), tree models of {s['trees']} trees of depth "
        f"{s['depth']}, one uvicorn worker per server, {s['rounds']} requests per server after "
        f"{s.get('warmup_seconds', 0):.0f} s of warm-up, alternating between servers (client "
        "and servers on the same 2 cores, shared with "
        "other jobs). " + " ".join([*notes, *([s["note"]] if s.get("note") else [])]),
        "",
        "Requests one at a time, alternating between servers:",
        "",
        *_table(configs),
    ]
    if "in_runs" in s:
        lines += [
            "",
            f"Then the same requests in runs of {s['run_length']} to one server before the next "
            "(as a server sees its own stream in service): alternating per request, every "
            "request finds its server's compiled trees evicted from the caches by the other "
            "servers', and the interleaving server has two models to bring back.",
            "",
            *_table(s["in_runs"]),
        ]
    return [*lines, ""]


def _table(configs: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        "| server | p50 ms | p90 ms | p99 ms | p50 ÷ no experiment |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, c in configs.items():
        lines.append(
            f"| {name} | {c['p50_ms']:.2f} | {c['p90_ms']:.2f} | {c['p99_ms']:.2f} | "
            f"**{c['p50_vs_no_experiment']:.3f}** |"
        )
    return lines
