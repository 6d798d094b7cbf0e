"""The online loop end to end over real processes, on the simulator (known truth):

1. `ltr simulate` writes two dated partitions; `ltr nightly` (config with [experiment]) deploys
   a weak first model (nothing to compare with yet), then trains a better one, which passes the
   offline gate and is installed as the candidate of an interleaving experiment beside CURRENT.
2. A uvicorn service (`app.main`) serves; simulated users of the same simulated world send
   `/rerank`, click by the position-based model on the true grades, and send `/feedback`.
3. `ltr experiment decide` promotes the candidate. The service follows CURRENT.
4. The old weak version is started as a candidate against the new CURRENT
   (`ltr experiment start`), users click again, and `decide` rolls it back.

`run()` is used by bench/bench_interleaving.py (figures) and by
tests/integration/test_experiment_loop.py (smaller sizes).
"""

from __future__ import annotations

import json
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

from tests.support.uvicorn_server import REPO, UvicornServer
from trainer.simulate.clicks import ClickModel
from trainer.simulate.config import SimulationConfig
from trainer.simulate.documents import draw_documents
from trainer.simulate.generator import World

MODEL = "ranker"


def ltr(*args: str) -> dict[str, Any]:
    """Run the `ltr` CLI in its own process; its one JSON line."""
    done = subprocess.run(
        [sys.executable, "-m", "trainer", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ltr {' '.join(args)} failed:\n{done.stderr}\n{done.stdout}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _nightly_config(root: Path, data: Path, log: Path, trees: int, min_impressions: int) -> Path:
    path = root / f"nightly-{trees}.toml"
    path.write_text(
        "\n".join(
            [
                f'work_dir = "{root / "work"}"',
                "[data]",
                f'dir = "{data}"',
                "partitions = 2",
                "[model]",
                f'name = "{MODEL}"',
                "[model.lambdamart]",
                f"num_trees = {trees}",
                "num_leaves = 15" if trees > 1 else "num_leaves = 2",
                "learning_rate = 0.1",
                "[gate]",
                "tolerance = 0.0",
                "[publish]",
                f'registry = "{root / "registry"}"',
                "[experiment]",
                "enabled = true",
                'mode = "interleave"',
                "traffic = 1.0",
                f'logs = "{log}"',
                f"min_impressions = {min_impressions}",
            ]
        )
        + "\n"
    )
    return path


class SimulatedUsers:
    """Users of the simulated world querying the service and clicking (PBM)."""

    def __init__(self, config: SimulationConfig, seed: int) -> None:
        self.world = World.build(config)
        self.clicks = ClickModel(config.eta, config.click_noise, config.logging_noise)
        self.rng = np.random.default_rng(seed)
        self.length = 10

    def session(self, client: httpx.Client, impressions: int) -> dict[str, Any]:
        w, rng, length = self.world, self.rng, self.length
        docs = draw_documents(
            np.full(impressions, length),
            w.catalog,
            w.relevance.population_taste(),
            w.config.num_features,
            rng,
        )
        users = w.users.sample_queries(impressions, rng)
        types = w.users.true_type[users][docs.query_index]
        labels = w.relevance.draw_labels(
            docs.match, docs.quality, docs.category, docs.price_z, types, rng
        ).reshape(impressions, length)
        features = docs.features.reshape(impressions, length, -1)
        clicked = served_versions = 0
        versions: dict[str, int] = {}
        degraded: dict[str, int] = {}
        scored: list[str] = []
        for q in range(impressions):
            body = {
                "model": MODEL,
                "candidates": [
                    {"id": j, "features": features[q, j].tolist()} for j in range(length)
                ],
                "user": {"id": str(w.users.user_id[users[q]])},
            }
            answer = client.post("/rerank", json=body).raise_for_status().json()
            version = answer["model"]["version"]
            versions[version] = versions.get(version, 0) + 1
            if answer["degraded"]:
                for reason in answer["reasons"]:
                    degraded[reason] = degraded.get(reason, 0) + 1
            else:
                scored.append(answer["request_id"])
            served = [r["id"] for r in answer["results"]]
            hits = self.clicks.click(np.arange(1, length + 1), labels[q, served], rng)
            events = [{"id": served[k], "type": "click"} for k in np.flatnonzero(hits)]
            if events:
                clicked += 1
                client.post(
                    "/feedback", json={"request_id": answer["request_id"], "events": events}
                ).raise_for_status()
            served_versions += 1
        return {
            "impressions": served_versions,
            "clicked": clicked,
            "versions": versions,
            "degraded": degraded,
            "scored": scored,
        }


def _wait_logged(log: Path, request_ids: list[str], timeout: float = 60) -> None:
    """Until every impression in `request_ids` is in the JSONL log (the sink writes in the
    background, in batches)."""
    wanted = set(request_ids)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        logged = set()
        if log.exists():
            for line in log.read_bytes().splitlines():
                record = orjson.loads(line)
                if record.get("kind") == "impression":
                    logged.add(record["request_id"])
        if wanted <= logged:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{len(wanted - logged)} of {len(wanted)} impressions never logged")


def _wait_for(client: httpx.Client, version: str, experiment: bool, timeout: float = 60) -> None:
    """Until the service serves `version` as CURRENT, with or without a running experiment
    (as GET /models reports it: the registry's own state, not a probe's guess)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        models = client.get("/models").raise_for_status().json()["models"]
        served = next((m for m in models if m["name"] == MODEL), None)
        if served is not None and served["version"] == version:
            running = bool(served.get("experiment") and served["experiment"]["serving"])
            if running == experiment:
                return
        time.sleep(0.1)
    raise TimeoutError(f"service did not reach {version} (experiment={experiment})")


def run(
    rows: int = 30_000, impressions: int = 1500, min_impressions: int = 300, seed: int = 0
) -> dict[str, Any]:
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="ltr-loop-"))
    try:
        config = SimulationConfig(rows=rows, seed=seed, format="parquet", users=2000)
        sim = root / "sim"
        ltr("simulate", "--out", str(sim), "--rows", str(rows), "--seed", str(seed))
        data = root / "data"
        for day, split in (("2026-11-20", "train"), ("2026-11-21", "vali")):
            (data / day).mkdir(parents=True)
            shutil.copy(sim / f"{split}.parquet", data / day / "part-0.parquet")
        log = root / "impressions.jsonl"
        registry = root / "registry"
        weak = ltr("nightly", "--config", str(_nightly_config(root, data, log, 1, min_impressions)))
        server = UvicornServer(
            {
                "LTR_REGISTRY": str(registry),
                "LTR_RELOAD_POLL_SECONDS": "0.2",
                "LTR_IMPRESSIONS_ENABLED": "1",
                "LTR_IMPRESSIONS_JSONL": str(log),
                "LTR_MIN_CANDIDATES": "1",
                # The loop tests experiments, not overload: no answer may be shed unscored.
                "LTR_REQUEST_BUDGET_MS": "5000",
            }
        ).start()
        out: dict[str, Any] = {"rows": rows, "weak": weak["version"]}
        try:
            server.wait_ready()
            strong = ltr(
                "nightly", "--config", str(_nightly_config(root, data, log, 60, min_impressions))
            )
            out["nightly"] = {"status": strong["status"], "gate": strong["gate"]}
            out["strong"] = strong["version"]
            users = SimulatedUsers(config, seed + 1)
            with httpx.Client(base_url=server.url, timeout=30) as client:
                _wait_for(client, weak["version"], experiment=True)
                out["better_session"] = users.session(client, impressions)
                _wait_logged(log, out["better_session"]["scored"])
                out["better_session"]["scored"] = len(out["better_session"]["scored"])
                out["better_decision"] = ltr(
                    "experiment",
                    "decide",
                    "--registry",
                    str(registry),
                    "--name",
                    MODEL,
                    "--logs",
                    str(log),
                    "--min-impressions",
                    str(min_impressions),
                )
                if out["better_decision"]["action"] != "promote":
                    return out
                _wait_for(client, strong["version"], experiment=False)
                started_worse = ltr(
                    "experiment",
                    "start",
                    "--registry",
                    str(registry),
                    "--name",
                    MODEL,
                    "--candidate",
                    weak["version"],
                    "--traffic",
                    "1.0",
                    "--experiment",
                    "worse-candidate",
                )
                out["worse_experiment"] = started_worse["name"]
                _wait_for(client, strong["version"], experiment=True)
                out["worse_session"] = users.session(client, impressions)
                _wait_logged(log, out["worse_session"]["scored"])
                out["worse_session"]["scored"] = len(out["worse_session"]["scored"])
                out["worse_decision"] = ltr(
                    "experiment",
                    "decide",
                    "--registry",
                    str(registry),
                    "--name",
                    MODEL,
                    "--logs",
                    str(log),
                    "--min-impressions",
                    str(min_impressions),
                )
                _wait_for(client, strong["version"], experiment=False)
                out["served_after"] = client.get("/models").json()["models"][0]["version"]
            report = ltr(
                "experiment",
                "report",
                "--registry",
                str(registry),
                "--name",
                MODEL,
                "--logs",
                str(log),
                "--experiment",
                "worse-candidate",
                "--html",
                str(root / "worse.html"),
            )
            out["worse_report"] = report["analysis"]["interleaving"]
        finally:
            server.stop()
        out["seconds"] = time.perf_counter() - started
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def render(s: dict[str, Any]) -> list[str]:
    better, worse = s["better_decision"], s["worse_decision"]
    gate = s["nightly"]["gate"]
    offline = (
        f"Offline, on the nightly's held-out day, NDCG@10 was "
        f"{gate['candidate']['ndcg@10']:.3f} (60 trees) vs {gate['deployed']['ndcg@10']:.3f} "
        "(1 tree). "
        if gate.get("candidate") and gate.get("deployed")
        else ""
    )
    return [
        "## End to end: nightly → service → simulated clicks → decision",
        "",
        f"Real processes: `ltr simulate` ({s['rows']:,} rows), `ltr nightly` twice (a 1-tree "
        "model deployed first, then a 60-tree model that passes the gate and becomes an "
        "interleaving candidate at 100 % traffic), one uvicorn service with impression logging "
        "to JSONL, simulated users of the same world clicking by the position-based model over "
        "HTTP (`/rerank`, `/feedback`), and `ltr experiment decide`.",
        "",
        "| experiment | impressions served | decision | preference | always-valid p (click "
        "difference test) |",
        "|---|---:|---|---:|---:|",
        f"| better candidate ({s['strong']}) | {better['impressions']:,} | "
        f"**{better['action']}** | "
        f"{better['effect']:+.3f} | {better['p_always_valid']:.2g} |",
        f"| worse candidate ({s['weak']}, vs the promoted one) | {worse['impressions']:,} | "
        f"**{worse['action']}** | {worse['effect']:+.3f} | {worse['p_always_valid']:.2g} |",
        "",
        f"`decide` said: {better['reason']}; then: {worse['reason']}.",
        "",
        f"{offline}After both decisions the service serves {s['served_after']} with no "
        "experiment. "
        f"Whole loop: {s['seconds']:.0f} s.",
        "",
    ]
