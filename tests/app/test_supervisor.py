"""Stopping and restarting `ltr serve` under load, over real processes and sockets: what clients
that open a new connection per request see (tests.support.connection_load)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import publish, random_ensemble
from tests.support.connection_load import KeepAliveLoad, Load, readyz_request
from tests.support.redis_server import free_port
from tests.support.uvicorn_server import UvicornServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NF = 20
NOT_LOADED = '503 {"detail":"no model loaded yet"}'


def ltr_serve(registry: Path, workers: int, **settings: str) -> UvicornServer:
    env = {"LTR_REGISTRY": str(registry), "LTR_BODY_SCAN": "false", **settings}
    server = UvicornServer(env, workers)
    server.command = [sys.executable, "-m", "trainer", "serve", "--port", str(server.port)]
    server.command += ["--workers", str(workers), "--log-level", "warning"]
    return server


def serving(registry: Path, workers: int, **settings: str) -> UvicornServer:
    """Started, and every worker ready: /readyz answered by one worker says nothing of the
    other, so 20 fresh connections (spread over the workers by the kernel) in a row."""
    server = ltr_serve(registry, workers, **settings).start()
    deadline = time.monotonic() + 120
    try:
        while not all(httpx.get(f"{server.url}/readyz").status_code == 200 for _ in range(20)):
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.2)
    except httpx.HTTPError as exc:
        # Once (of four fresh-clone runs, under the parallel suite's load) a connection was
        # refused here, by a server that had answered /livez: its log says why, next time.
        alive = server.proc is not None and server.proc.poll() is None
        raise AssertionError(f"{exc!r} (server running: {alive}):\n{server.log()}") from exc
    return server


def _threads_of(pid: int) -> list[str]:
    """Each thread's kernel state and wait channel, for a failure message."""
    found = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        with contextlib.suppress(OSError):
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
            found.append(f"{task.name}:{state}:{(task / 'wchan').read_text()}")
    return found


def children(pid: int) -> list[int]:
    """The worker processes of supervisor `pid` (multiprocessing's spawned children; not its
    resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid and b"spawn_main" in command:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def stopped_by(server: UvicornServer, sig: signal.Signals) -> tuple[int, Load, float]:
    """Send `sig` to the server under the load of 4 clients; its exit code, the load, when."""
    assert server.proc is not None
    with Load(server.port, clients=4) as load:
        time.sleep(1.0)
        sent = time.monotonic()
        server.proc.send_signal(sig)
        code = server.proc.wait(timeout=30)
        time.sleep(0.3)  # refused from here on
    return code, load, sent


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_under_new_connection_load_loses_no_request(tmp_path: Path, workers: int) -> None:
    """Before: 4 resets every time with 2 workers (the supervisor held the listening socket
    after the workers had closed theirs), 2-3 with one (connections accepted just before, or
    still queued at, the close)."""
    publish(tmp_path, random_ensemble(NF))
    server = serving(tmp_path, workers)
    try:
        code, load, sent = stopped_by(server, signal.SIGTERM)
        outcomes = load.outcomes(sent - 0.5)
        assert load.lost(sent - 0.5) == [], (outcomes, server.log())
        assert outcomes["200"] > 0 and outcomes["refused"] > 0, outcomes
        assert code == (0 if workers > 1 else 128 + signal.SIGTERM), server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_under_keep_alive_load_loses_no_request(tmp_path: Path, workers: int) -> None:
    """An operations trial: 4 keep-alive clients at SIGTERM lost about one request each (reset
    or broken pipe), sent as their idle connection was closed; no answer said Connection:
    close."""
    publish(tmp_path, random_ensemble(NF))
    server = serving(tmp_path, workers)
    try:
        assert server.proc is not None
        with KeepAliveLoad(server.port, clients=4) as load:
            time.sleep(1.0)
            sent = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(timeout=30)
            time.sleep(0.3)
        outcomes = load.outcomes(sent - 0.5)
        assert load.lost(sent - 0.5) == [], (outcomes, server.log())
        assert outcomes["200"] > 0 and outcomes["refused"] > 0, outcomes
    finally:
        server.stop()


def test_sighup_stops_a_single_worker_like_sigterm(tmp_path: Path) -> None:
    """Before: SIGHUP's default action, an immediate death (-1), nothing logged."""
    publish(tmp_path, random_ensemble(NF))
    server = serving(tmp_path, 1)
    try:
        code, load, sent = stopped_by(server, signal.SIGHUP)
        assert load.lost(sent - 0.5) == [], (load.outcomes(sent - 0.5), server.log())
        assert code == 128 + signal.SIGTERM, server.log()
        assert "Received SIGHUP: stopping as on SIGTERM" in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("how", ["kill -9 a worker", "SIGHUP"])
def test_a_replacement_worker_takes_no_request_before_its_model_is_loaded(
    tmp_path: Path, how: str
) -> None:
    """Before: the replacement accepted at once and answered 503 "no model loaded yet" until
    its model was in (a model of 18,900 splits, compiled at nice 19: seconds)."""
    publish(tmp_path, random_ensemble(NF, num_trees=300, depth=6))
    server = serving(tmp_path, 2)
    assert server.proc is not None
    try:
        workers = children(server.proc.pid)
        assert len(workers) == 2, workers
        with Load(server.port, clients=3, pause=0.01) as load:
            time.sleep(0.5)
            if how == "SIGHUP":
                server.proc.send_signal(signal.SIGHUP)
            else:
                os.kill(workers[0], signal.SIGKILL)
            replaced = set(workers if how == "SIGHUP" else workers[:1])
            deadline = time.monotonic() + 60
            while replaced & set(now := children(server.proc.pid)) or len(now) < 2:
                # What the supervisor was doing, should it never replace them (once, under a
                # loaded CI run, no replacement came in 60 s and the log said nothing).
                why = (now, server.proc.poll(), _threads_of(server.proc.pid), server.log())
                assert time.monotonic() < deadline, why
                time.sleep(0.1)
            time.sleep(6.0)  # the replacements load (a few seconds) and serve
        outcomes = load.outcomes()
        assert outcomes[NOT_LOADED] == 0, outcomes
        assert outcomes["200"] > 100, outcomes
        if how == "SIGHUP":  # a kill -9 resets the connections its worker held
            assert load.lost() == [], (outcomes, server.log())
    finally:
        server.stop()


@pytest.mark.parametrize("port", ["service", "probe"])
def test_readiness_stays_200_through_a_sighup_restart(tmp_path: Path, port: str) -> None:
    """Before: each replacement accepted once its models were in and answered /readyz 503
    "loading the compiled body scans" for about 0.7 s, so a load balancer probing it then
    took the replica out of service during a restart meant to be invisible. On the probe
    port, a replacement listened from its start (503 "no model loaded yet" and "loading the
    compiled body scans" in a trial), and a stopping worker's probes queued for accept() were
    reset."""
    publish(tmp_path, random_ensemble(NF, num_trees=50, depth=4))
    probe_port = free_port()
    server = serving(tmp_path, 2, LTR_BODY_SCAN="true", LTR_PROBE_PORT=str(probe_port))
    assert server.proc is not None
    target = server.port if port == "service" else probe_port
    try:
        workers = children(server.proc.pid)
        with Load(target, clients=3, pause=0.01, request=readyz_request) as load:
            time.sleep(0.3)
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 60
            while set(workers) & set(now := children(server.proc.pid)) or len(now) < 2:
                assert time.monotonic() < deadline, (now, server.log())
                time.sleep(0.1)
            time.sleep(3.0)
        outcomes = load.outcomes()
        assert set(outcomes) <= {"200", "refused"}, outcomes
        assert outcomes["200"] > 100, outcomes
    finally:
        server.stop()


def test_a_worker_killed_while_its_health_check_waits_is_replaced_at_once(
    tmp_path: Path,
) -> None:
    """Before: the supervisor waited for the dead worker's answer to its ping as long as the
    health-check timeout (60 s by default, 30 here) and only then replaced it (a CI run's
    `kill -9` test failed on it once: no replacement in 60 s). A stopped worker holds the
    ping unanswered, as one killed mid-ping would, for as long as it takes to be sure."""
    publish(tmp_path, random_ensemble(NF))
    server = serving(tmp_path, 2, LTR_WORKER_HEALTHCHECK_TIMEOUT_SECONDS="30")
    assert server.proc is not None
    try:
        workers = children(server.proc.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGSTOP)
        time.sleep(2.0)  # the supervisor's loop (a turn every 0.5 s) pings it and waits
        os.kill(workers[0], signal.SIGKILL)
        killed = time.monotonic()
        while workers[0] in (now := children(server.proc.pid)) or len(now) < 2:
            assert time.monotonic() - killed < 10, (now, server.log())
            time.sleep(0.05)
        assert server.proc.poll() is None, server.log()
    finally:
        server.stop()


def test_a_hung_worker_does_not_hold_up_the_replacement_of_a_dead_one(tmp_path: Path) -> None:
    """Before: the supervisor waited for the hung worker's answer (the health-check timeout,
    30 s here) before it looked at the other, killed meanwhile; then it replaces the hung one
    once the timeout has passed."""
    publish(tmp_path, random_ensemble(NF))
    server = serving(tmp_path, 2, LTR_WORKER_HEALTHCHECK_TIMEOUT_SECONDS="8")
    assert server.proc is not None
    try:
        hung, dead = children(server.proc.pid)
        os.kill(hung, signal.SIGSTOP)
        time.sleep(2.0)  # the supervisor's loop pings it and gets no answer
        os.kill(dead, signal.SIGKILL)
        killed = time.monotonic()
        while dead in (now := children(server.proc.pid)) or len(now) < 2:
            assert time.monotonic() - killed < 4, (now, server.log())
            time.sleep(0.05)
        assert hung in now  # not yet: its ping has been unanswered for about 2 s of 8
        while hung in (now := children(server.proc.pid)) or len(now) < 2:
            assert time.monotonic() - killed < 20, (now, server.log())
            time.sleep(0.1)
        assert f"Child process [{hung}] did not answer for 8 s: killed" in server.log()
        assert server.proc.poll() is None, server.log()
    finally:
        server.stop()


def test_the_first_start_answers_probes_while_the_model_loads(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF, num_trees=300, depth=6))
    server = ltr_serve(tmp_path, 2).start()  # returns once /livez answers
    try:
        assert httpx.get(f"{server.url}/readyz").status_code == 503
        server.wait_ready()
    finally:
        server.stop()


def test_workers_exit_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    """Before: orphan workers served the port for over a minute; a new server could not
    bind it."""
    publish(tmp_path, random_ensemble(NF))
    server = serving(tmp_path, 2)
    assert server.proc is not None
    group = server.proc.pid
    try:
        workers = children(server.proc.pid)
        assert len(workers) == 2, workers
        server.proc.kill()
        server.proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers):
            assert time.monotonic() < deadline, f"workers {workers} outlived their supervisor"
            time.sleep(0.1)
        with socket.socket() as sock:  # as uvicorn binds it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", server.port))
            sock.listen()
    finally:
        server.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)  # orphans (its own session's group)


@pytest.mark.parametrize(
    ("exitcode", "said"),
    [
        (0, ""),
        (None, ""),
        (3, " (exit code 3)"),
        (-signal.SIGBUS, " (SIGBUS: a memory-mapped file lost its backing: a full filesystem"),
        (-signal.SIGKILL, " (SIGKILL: the kernel's out-of-memory killer, or kill -9)"),
        (-signal.SIGUSR1, " (SIGUSR1)"),
    ],
)
def test_the_line_saying_a_worker_died_says_why(exitcode: int | None, said: str) -> None:
    from app.supervisor import death_cause

    assert death_cause(exitcode).startswith(said) and (said or not death_cause(exitcode))
