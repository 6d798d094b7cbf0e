"""`/metrics` with two uvicorn workers (what compose and Kubernetes run): whichever worker
answers the scrape, the counters and histograms are the sums over both, equal to the requests
sent; per-worker gauges come once per worker, labelled by pid."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import DemoServer, wait_for
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
