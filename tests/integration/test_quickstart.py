"""The README's walkthrough, step by step, as real processes on the bundled data: `ltr serve
--demo` (trains and serves), a rerank over HTTP, `ltr train` + `ltr publish` of a new version that
the running service swaps to, and `ltr publish --rollback`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "trainer" / "demo_data"
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def ltr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args], capture_output=True, text=True, timeout=600
    )


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    registry = tmp_path_factory.mktemp("registry")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LTR_")}
    env["LTR_RELOAD_POLL_SECONDS"] = "0.5"
    log = (registry.parent / "serve.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            "serve",
            "--registry",
            str(registry),
            "--port",
            str(port),
            "--demo",
            "--log-level",
            "warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, 480, "the demo model")
        yield url, registry
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def current_version(url: str) -> str:
    models = httpx.get(f"{url}/models").json()["models"]
    return next(m["version"] for m in models if m["name"] == "demo")


def test_demo_model_reranks(served: tuple[str, Path]) -> None:
    url, _ = served
    body = {
        "candidates": [
            {"id": "a", "features": {"f11": 0.64, "f12": 0.51}},
            {"id": "b", "features": {"f11": 0.9, "f12": 0.1, "f17": 0.45}},
            {"id": "c", "features": {}},
        ],
        "top_k": 2,
    }
    response = httpx.post(f"{url}/rerank", json=body)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["model"]["name"] == "demo"
    assert [r["rank"] for r in doc["results"]] == [1, 2]
    assert doc["results"][0]["score"] >= doc["results"][1]["score"]
    assert not doc["degraded"]


def test_publish_swaps_the_running_service_and_rollback_returns(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, registry = served
    first = current_version(url)
    out = tmp_path / "runs" / "v2-quickstart"
    trained = ltr(
        "train",
        "--train",
        str(DEMO / "rank.train"),
        "--valid",
        str(DEMO / "rank.test"),
        "--num-trees",
        "10",
        "--name",
        "demo",
        "--out",
        str(out),
        "--json",
    )
    assert trained.returncode == 0, trained.stderr
    evaluated = ltr("evaluate", "--model", str(out), "--data", str(DEMO / "rank.test"), "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert 0 < json.loads(evaluated.stdout)["ndcg@10"] <= 1
    published = ltr("publish", "--model", str(out), "--registry", str(registry), "--json")
    assert published.returncode == 0, published.stderr
    wait_for(lambda: current_version(url) == "v2-quickstart", 120, "the swap to v2")
    rolled = ltr("publish", "--rollback", "--name", "demo", "--registry", str(registry))
    assert rolled.returncode == 0, rolled.stderr
    wait_for(lambda: current_version(url) == first, 120, "the rollback")


def test_demo_items_takes_candidates_by_id(served: tuple[str, Path]) -> None:
    """README, "Candidates by id": item features come from the in-process store."""
    url, _ = served
    body = {
        "model": "demo-items",
        "candidates": [
            {"id": "doc-3005", "features": {"f12": 0.51, "f17": 0.45}},
            {"id": "doc-3006"},
            {"id": "doc-3007"},
            {"id": "not-in-the-catalogue"},
        ],
    }
    response = httpx.post(f"{url}/rerank", json=body)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["model"]["name"] == "demo-items" and len(doc["results"]) == 4
    assert doc["item_features_missing"] == 1 and doc["reasons"] == ["item_features_missing"]
    assert not doc["degraded"]
