"""`docker compose up` for real (deploy/docker/compose-smoke.sh): build the images, start the
stack, wait for readiness, rerank, publish a new version through the trainer container, see the
API swap to it, publish a model whose item set lives in Redis, restart the Redis container and
find its keys and the set again (answers by id not degraded), tear down. Runs where a Docker
daemon and a compose command are reachable; skipped elsewhere. Without Docker Hub it uses the
local base images that deploy/docker/build-base-images.sh makes (when present and PYTHON_IMAGE
is not set)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "deploy" / "docker" / "compose-smoke.sh"
LOCAL_BASES = {"PYTHON_IMAGE": "ltr-local/python:3.11", "REDIS_IMAGE": "ltr-local/redis:7"}
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _succeeds(*argv: str) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _docker_ready() -> str | None:
    """Why the smoke test cannot run here, or None."""
    if shutil.which("docker") is None:
        return "no docker command"
    if not _succeeds("docker", "info"):
        return "no Docker daemon reachable"
    if not (_succeeds("docker", "compose", "version") or shutil.which("docker-compose")):
        return "neither `docker compose` nor docker-compose"
    return None


def test_compose_stack_serves_reranks_swaps_models_and_keeps_redis_data() -> None:
    reason = _docker_ready()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ)
    if "PYTHON_IMAGE" not in env and all(
        _succeeds("docker", "image", "inspect", image) for image in LOCAL_BASES.values()
    ):
        env.update(LOCAL_BASES)
        # No PyTorch index there either: the trainer image without the dnn extra.
        env.setdefault("TRAINER_EXTRAS", "serve,train")
        env.setdefault("TORCH_INDEX_URL", "")
    done = subprocess.run(
        [str(SMOKE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-4000:]}"
    out = done.stdout
    assert "ready, serving" in out and "swapped to" in out
    assert "Redis kept its data across the restart" in out
    assert "compose smoke test passed" in out
