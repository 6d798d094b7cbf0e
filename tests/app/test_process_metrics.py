"""`process_*` series with several workers: prometheus-client's multiprocess collector has none
(its ProcessCollector reads only the scraping process), so app.metrics reads each live worker's
/proc at scrape time and labels the series `pid`, as the per-worker gauges are."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app import metrics
from tests.integration.conftest import wait_for
from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import REPO, UvicornServer

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def samples(text: str, name: str) -> dict[str, float]:
    """pid -> value of each `name{...pid="..."...}` sample."""
    found = re.findall(rf'^{name}\{{[^}}]*pid="(\d+)"[^}}]*\}} (\S+)$', text, re.M)
    return {pid: float(value) for pid, value in found}


def assert_plausible(text: str, pids: set[str]) -> None:
    cpu = samples(text, "process_cpu_seconds_total")
    rss = samples(text, "process_resident_memory_bytes")
    vms = samples(text, "process_virtual_memory_bytes")
    fds = samples(text, "process_open_fds")
    started = samples(text, "process_start_time_seconds")
    assert set(cpu) == set(rss) == set(vms) == set(fds) == set(started) == pids, text
    for pid in pids:
        assert cpu[pid] >= 0
        assert 5e6 < rss[pid] <= vms[pid]  # a Python interpreter: megabytes resident
        assert fds[pid] >= 3
        assert time.time() - 3600 < started[pid] <= time.time() + 1
    assert "# TYPE process_cpu_seconds_total counter" in text  # as with one worker


@pytest.fixture
def multiprocess_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def fake_workers(multiprocess_dir: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Two processes that import app.metrics in multiprocess mode, as workers do (their
    per-worker gauges make gauge_liveall_<pid>.db files), then wait."""
    env = {**os.environ, "PYTHONPATH": str(REPO), metrics.MULTIPROC_ENV: str(multiprocess_dir)}
    code = "import app.metrics, time; print('ready', flush=True); time.sleep(120)"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def test_one_process_keeps_its_own_unlabelled_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    text = metrics.exposition()[0].decode()
    assert re.search(r"^process_cpu_seconds_total \S+$", text, re.M), text
    assert re.search(r"^process_resident_memory_bytes \S+$", text, re.M), text
    assert not re.search(r'^process_\w+\{pid="', text, re.M), text


def test_each_live_worker_has_its_process_series(
    fake_workers: list[subprocess.Popen[str]],
) -> None:
    text = metrics.exposition()[0].decode()
    assert_plausible(text, {str(proc.pid) for proc in fake_workers})
    assert re.search(r"^python_info\{", text, re.M), text


def test_a_dead_workers_process_series_drop_out(
    fake_workers: list[subprocess.Popen[str]], multiprocess_dir: Path
) -> None:
    killed, alive = fake_workers
    killed.kill()  # no shutdown: its gauge files stay behind
    killed.wait()  # reaped: a zombie still answers os.kill(pid, 0)
    text = metrics.exposition()[0].decode()
    assert_plausible(text, {str(alive.pid)})
    assert not list(multiprocess_dir.glob(f"gauge_live*_{killed.pid}.db"))


def test_worker_processes_skips_a_pid_gone_from_proc() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    families = {f.name: f for f in metrics.WorkerProcesses([os.getpid(), gone.pid]).collect()}
    assert {s.labels["pid"] for s in families["process_cpu_seconds"].samples} == {str(os.getpid())}


@pytest.mark.integration
@pytest.mark.slow
def test_two_workers_serve_both_process_series_current_at_scrape(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(registry, random_ensemble(4, seed=0), version="v1")
    server = UvicornServer({}, workers=2, command=[])
    server.command = [
        *[sys.executable, "-m", "trainer", "serve", "--registry", str(registry)],
        *["--port", str(server.port), "--workers", "2"],
    ]

    def scrape() -> str:
        with httpx.Client(base_url=server.url) as client:  # a new connection: either worker
            return client.get("/metrics").text

    def workers(text: str) -> set[str]:
        return set(re.findall(r'^ltr_model_loaded_info\{.*pid="(\d+)".*\} 1\.0$', text, re.M))

    server.start().wait_ready()
    try:
        wait_for(lambda: len(workers(scrape())) == 2, 120, "both workers serving")
        text = scrape()
        pids = workers(text)
        assert_plausible(text, pids)  # the two workers, not uvicorn's supervisor
        # Read at the scrape, not once at start: the workers' CPU time moves on.
        before = sum(samples(text, "process_cpu_seconds_total").values())
        wait_for(
            lambda: sum(samples(scrape(), "process_cpu_seconds_total").values()) > before,
            60,
            "the workers' CPU seconds to grow",
        )
        killed = min(pids)
        os.kill(int(killed), signal.SIGKILL)
        wait_for(
            lambda: (
                killed not in (now := set(samples(scrape(), "process_cpu_seconds_total")))
                and len(now) == 2
            ),
            120,
            "the killed worker's process series gone and its replacement's in",
        )
        text = scrape()
        assert_plausible(text, set(samples(text, "process_cpu_seconds_total")))
    finally:
        server.stop()
