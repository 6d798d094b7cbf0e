"""`ltr serve`'s own checks before uvicorn starts (the server itself: tests/integration)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from typer.testing import CliRunner

from trainer.cli import app


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """uvicorn.run's keyword arguments, one dict per start, instead of a server. The command
    sets LTR_* variables and a SIGTERM handler for its process: both are put back."""
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: runs.append(kwargs))
    for name in ("LTR_REDIS_URL", "LTR_IMPRESSIONS_ENABLED", "LTR_IMPRESSIONS_JSONL"):
        monkeypatch.delenv(name, raising=False)
    saved, handler = dict(os.environ), signal.getsignal(signal.SIGTERM)
    yield runs
    os.environ.clear()
    os.environ.update(saved)
    signal.signal(signal.SIGTERM, handler)


def _serve(tmp_path: Path, workers: int, **env: str) -> Any:
    args = ["serve", "--registry", str(tmp_path), "--workers", str(workers), "--port", "1"]
    return CliRunner().invoke(app, args, env=env)


def test_several_workers_logging_to_a_file_are_warned_about_feedback(
    tmp_path: Path, started: list[dict[str, Any]]
) -> None:
    log = {"LTR_IMPRESSIONS_ENABLED": "true", "LTR_IMPRESSIONS_JSONL": str(tmp_path / "i.jsonl")}
    result = _serve(tmp_path, 2, **log)
    assert result.exit_code == 0, result.output
    assert started and started[0]["workers"] == 2
    assert "warning: 2 workers logging impressions to a JSONL file" in result.stderr
    for quiet in (_serve(tmp_path, 1, **log), _serve(tmp_path, 2)):
        assert quiet.exit_code == 0 and "warning" not in quiet.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # An operator trial: a blank LTR_HOST bound every interface; the rest started and
        # misbehaved, and errors named the field (redis_deadline_ms), not the variable.
        ({"LTR_HOST": ""}, "error: LTR_HOST: String should have at least 1 character"),
        # An operations trial: these started, then failed at bind naming no setting.
        ({"LTR_HOST": "   "}, "error: LTR_HOST: Value error, '   ' is no host name"),
        ({"LTR_HOST": "0.0.0.0 x"}, "error: LTR_HOST: Value error, '0.0.0.0 x' is no host"),
        ({"LTR_PROBE_PORT": "1"}, "error: LTR_PROBE_PORT (1) is the service's own port"),
        ({"LTR_REDIS_DEADLINE_MS": "-1"}, "error: LTR_REDIS_DEADLINE_MS: Input should be greater"),
        (
            {"LTR_REQUEST_BUDGET_MS": "inf"},
            "error: LTR_REQUEST_BUDGET_MS: Input should be a finite",
        ),
        ({"LTR_BREAKER_RESET_SECONDS": "nan"}, "error: LTR_BREAKER_RESET_SECONDS: Input should be"),
        (
            {"LTR_ADMISSION_MIN_ROWS": "60000", "LTR_ADMISSION_MAX_ROWS": "1000"},
            "error: LTR_ADMISSION_MIN_ROWS (60000) is above LTR_ADMISSION_MAX_ROWS (1000)",
        ),
        (
            {"LTR_REQUEST_BUDGET_MS": "500", "LTR_MAX_REQUEST_BUDGET_MS": "50"},
            "error: LTR_REQUEST_BUDGET_MS (500) is above LTR_MAX_REQUEST_BUDGET_MS (50)",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(
    tmp_path: Path, started: list[dict[str, Any]], env: dict[str, str], message: str
) -> None:
    result = _serve(tmp_path, 1, **env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not started


def test_an_ltr_variable_that_is_no_setting_is_warned_about(
    tmp_path: Path, started: list[dict[str, Any]]
) -> None:
    result = _serve(
        tmp_path, 1, LTR_REDIS_DEADLINE="5", LTR_WORKERS="1", LTR_ITEM_SET_OLD_TTL_SECONDS="60"
    )
    assert result.exit_code == 0, result.output
    assert "warning: LTR_REDIS_DEADLINE: no such setting, ignored (a typo?" in result.stderr
    assert "LTR_WORKERS" not in result.stderr
    # The trainer's, documented, in an environment shared with the service (a race review).
    assert "LTR_ITEM_SET_OLD_TTL_SECONDS" not in result.stderr


def test_a_symlinked_registry_is_served_through_the_link(
    tmp_path: Path, started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk trial: `--registry reglink` was resolved at start, so re-pointing the link (as a
    git-sync sidecar publishes) went unseen: the old target served for as long as it ran."""
    (tmp_path / "real").mkdir()
    link = tmp_path / "reglink"
    link.symlink_to(tmp_path / "real")
    seen: list[str] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: seen.append(os.environ["LTR_REGISTRY"]))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["serve", "--registry", "reglink", "--port", "1"])
    assert result.exit_code == 0, result.output
    assert seen == [str(link)]


@pytest.mark.parametrize("body_scan", [True, False])
def test_the_kernels_compile_in_a_process_of_their_own_not_in_the_workers(
    tmp_path: Path, started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, body_scan: bool
) -> None:
    """A worker started with numba's cache empty compiled the kernels itself and kept LLVM's
    memory: 1,000 MB of RSS against 400 MB when a warm-up process had compiled them (only the
    demo's first run had one). Workers wait for the warm-up's lock named by the variable."""
    from app.kernel_warmup import LOCK_ENV

    seen: list[str | None] = []

    def run(*args: object, **kwargs: object) -> None:
        seen.append(os.environ.get(LOCK_ENV))

    monkeypatch.setattr(uvicorn, "run", run)
    result = _serve(tmp_path, 2, LTR_BODY_SCAN=str(body_scan).lower())
    assert result.exit_code == 0, result.output
    assert len(seen) == 1 and (seen[0] is not None) == body_scan
    assert LOCK_ENV not in os.environ
    if seen[0] is not None:
        assert not Path(seen[0]).exists()  # removed once the server stopped


def _serve_beside_a_listener(tmp_path: Path, *extra: str) -> tuple[int, Any]:
    """(the port, `ltr serve`'s result on it) while another socket listens on 127.0.0.1."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--registry", str(tmp_path), "--port", str(port), *extra]
        return port, CliRunner().invoke(app, args)


def test_a_port_in_use_is_refused_before_the_models_load(
    tmp_path: Path, started: list[dict[str, Any]]
) -> None:
    """uvicorn found out after loading every model and exited 3 (the nightly's "refused")."""
    port, result = _serve_beside_a_listener(tmp_path)
    assert result.exit_code == 2 and not started
    assert result.stderr.startswith(f"error: --port {port}: address already in use")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "70000"], "error: --port: Input should be less than or equal to 65535"),
        (["--workers", "0"], "error: --workers: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_flag_is_named_as_the_flag(
    tmp_path: Path, started: list[dict[str, Any]], args: list[str], said: str
) -> None:
    """They were named LTR_PORT and LTR_WORKERS, which the operator had not set."""
    result = CliRunner().invoke(app, ["serve", "--registry", str(tmp_path), *args])
    assert result.exit_code == 2 and not started
    assert result.stderr.strip() == said


def test_a_registry_that_is_a_file_is_refused(
    tmp_path: Path, started: list[dict[str, Any]]
) -> None:
    """It served with a warning and no model."""
    path = tmp_path / "train.txt"
    path.write_text("1 qid:1 1:0.5\n")
    result = CliRunner().invoke(app, ["serve", "--registry", str(path), "--port", "1"])
    assert result.exit_code == 2 and not started
    assert "the registry is a directory, and this is a file" in result.stderr


def test_an_ipv6_host_is_not_refused_for_a_server_on_ipv4(
    tmp_path: Path, started: list[dict[str, Any]]
) -> None:
    """`--host ::` binds IPv6 only (asyncio): the probe, dual-stack, clashed with 127.0.0.1."""
    _, result = _serve_beside_a_listener(tmp_path, "--host", "::")
    assert result.exit_code == 0, result.stderr
    assert started and started[0]["host"] == "::"


def test_a_host_that_does_not_resolve_is_refused_before_the_models_load(
    tmp_path: Path, started: list[dict[str, Any]]
) -> None:
    args = ["serve", "--registry", str(tmp_path), "--host", "nonexistent.invalid", "--port", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and not started
    assert result.stderr.startswith("error: --host nonexistent.invalid: not an address or a name")
