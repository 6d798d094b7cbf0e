"""`/metrics` with two uvicorn workers (what compose and Kubernetes run): whichever worker
answers the scrape, the counters and histograms are the sums over both, equal to the requests
sent; per-worker gauges come once per worker, labelled by pid."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import DemoServer, wait_for
from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import UvicornServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SENT = 60
SCRAPES = 12


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample `name{labels...}` (label order as exposed: sorted)."""
    value, found = 0.0, 0
    for line in text.splitlines():
        match = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            value, found = float(match.group(2)), found + 1
    assert found == 1, f"{found} samples of {name}{labels}"
    return value


def loaded_pids(text: str) -> set[str]:
    return set(re.findall(r'^ltr_model_loaded_info\{.*pid="(\d+)".*\} 1\.0$', text, re.M))


def test_counters_and_histograms_sum_over_two_workers(
    demo_server: DemoServer, tmp_path: Path
) -> None:
    registry = tmp_path / "registry"
    shutil.copytree(demo_server.registry, registry)
    command = [sys.executable, "-m", "trainer", "serve", "--registry", str(registry)]
    # The demo registry holds demo and demo-items; the documented body is for demo.
    server = UvicornServer({"LTR_DEFAULT_MODEL": "demo"}, workers=2, command=[])
    server.command = [*command, "--port", str(server.port), "--workers", "2"]
    server.start().wait_ready()
    try:
        # /readyz answered from one worker; wait until both have loaded the model.
        wait_for(lambda: len(loaded_pids(httpx.get(f"{server.url}/metrics").text)) == 2, 120, "2")
        body = (Path(__file__).resolve().parents[2] / "docs/examples/rerank.json").read_bytes()
        for _ in range(SENT):
            # A new connection each time, so the kernel spreads them over both workers.
            with httpx.Client(base_url=server.url) as client:
                response = client.post("/rerank", content=body)
                assert response.status_code == 200, response.text
        for _ in range(SCRAPES):
            with httpx.Client(base_url=server.url) as client:
                text = client.get("/metrics").text
            requests = dict(route="/rerank", method="POST", status="200")
            assert sample(text, "ltr_http_requests_total", **requests) == SENT
            assert sample(text, "ltr_http_request_duration_seconds_count", **requests) == SENT
            assert sample(text, "ltr_candidates_per_request_count") == SENT
            assert len(loaded_pids(text)) == 2, text
        # The service's own log lines reach the server's stderr from both workers.
        serving = [line for line in server.log().splitlines() if "serving demo/" in line]
        assert len(serving) >= 2, server.log()
        assert all("INFO" in line and "app.registry.model_registry" in line for line in serving)
    finally:
        server.stop()


def test_gauges_show_only_live_workers_and_serving_versions(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(registry, random_ensemble(4, seed=0), version="v1")
    server = UvicornServer({"LTR_RELOAD_POLL_SECONDS": "0.2"}, workers=2, command=[])
    server.command = [
        *[sys.executable, "-m", "trainer", "serve", "--registry", str(registry)],
        *["--port", str(server.port), "--workers", "2"],
    ]

    def info_lines() -> list[str]:
        text = httpx.get(f"{server.url}/metrics").text
        return re.findall(r"^ltr_model_loaded_info\{.*$", text, re.M)

    server.start().wait_ready()
    try:
        wait_for(lambda: len(loaded_pids(httpx.get(f"{server.url}/metrics").text)) == 2, 120, "2")
        killed = min(loaded_pids(httpx.get(f"{server.url}/metrics").text))
        os.kill(int(killed), signal.SIGKILL)  # no shutdown: its gauge files stay behind
        wait_for(
            lambda: (
                killed not in (pids := loaded_pids(httpx.get(f"{server.url}/metrics").text))
                and len(pids) == 2
            ),
            120,
            "a replacement worker, and the killed one gone from /metrics",
        )
        for version in ("v2", "v3", "v4"):
            publish(registry, random_ensemble(4, seed=int(version[1:])), version=version)
            wait_for(
                lambda v=version: sum(f'version="{v}"' in line for line in info_lines()) == 2,
                60,
                f"both workers on {version}",
            )
        # One series per live worker, each the serving version: none zeroed for v1-v3.
        lines = info_lines()
        assert len(lines) == 2 and all(line.endswith(" 1.0") for line in lines), lines
        assert not any(f'pid="{killed}"' in line for line in lines)
        # Swaps log one line each, no library warning about removing a series.
        assert "Removal of labels" not in server.log(), server.log()
    finally:
        server.stop()


def test_admin_reload_reaches_every_worker(tmp_path: Path) -> None:
    """The request reached one of two workers: the other served the old version until its
    poll (7 of 30 answers in an operator trial, 11 of 30 ten seconds later)."""
    registry = tmp_path / "registry"
    publish(registry, random_ensemble(4, seed=0), version="v1")
    env = {"LTR_RELOAD_POLL_SECONDS": "600", "LTR_ADMIN_TOKEN": "secret"}
    server = UvicornServer(env, workers=2, command=[])
    server.command = [
        *[sys.executable, "-m", "trainer", "serve", "--registry", str(registry)],
        *["--port", str(server.port), "--workers", "2"],
    ]
    server.start().wait_ready()
    try:
        wait_for(lambda: len(loaded_pids(httpx.get(f"{server.url}/metrics").text)) == 2, 120, "2")
        publish(registry, random_ensemble(4, seed=2), version="v2")  # no announcement
        auth = {"Authorization": "Bearer secret"}
        answer = httpx.post(f"{server.url}/admin/reload", headers=auth, timeout=60)
        assert answer.json()["loaded"] == [{"name": "m", "version": "v2"}], answer.text

        def versions() -> set[str]:
            text = httpx.get(f"{server.url}/metrics").text
            return set(
                re.findall(r'^ltr_model_loaded_info\{.*version="(\w+)".*\} 1\.0$', text, re.M)
            )

        wait_for(lambda: versions() == {"v2"}, 10, "both workers on v2")
        body = {"candidates": [{"id": f"d{i}", "features": [i, 1, 2, 3]} for i in range(3)]}
        for _ in range(30):
            # A new connection each time, so the kernel spreads them over both workers.
            with httpx.Client(base_url=server.url) as client:
                assert client.post("/rerank", json=body).json()["model"]["version"] == "v2"
    finally:
        server.stop()
