"""The README as a new user follows it, commands run as written: the quick start's curl commands
against what `make run` serves, and the walkthrough's block, in a scratch directory beside the
repository's bundled data, on a free port instead of 8100."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import DemoServer
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def shell_blocks(text: str) -> list[str]:
    """The fenced blocks without a language tag: shell commands in this README."""
    return re.findall(r"^```\n(.*?)^```", text, flags=re.M | re.S)


def run_bash(script: str, cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def user_env() -> dict[str, str]:
    """A shell whose `ltr` is this checkout's (what `. .venv/bin/activate` gives a user)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LTR_")}
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def json_lines(output: str, first_key: str) -> list[dict]:
    """The JSON objects that open a line with `first_key` (curl prints no newline after one, so
    whatever the next command printed may follow it on the same line)."""
    decoder = json.JSONDecoder()
    return [
        decoder.raw_decode(line)[0]
        for line in output.splitlines()
        if line.startswith(f'{{"{first_key}"')
    ]


def rerank_answers(output: str) -> list[dict]:
    return json_lines(output, "request_id")


def test_quick_start_commands_rerank_the_demo_model(demo_server: DemoServer) -> None:
    blocks = shell_blocks(section("Quick start"))
    assert blocks[0].lstrip().startswith("make run")
    # The block that waits for /readyz, then asks for a ranking.
    curls = next(b for b in blocks if b.lstrip().startswith(("curl", "until curl")))
    script = curls.replace("localhost:8000", f"localhost:{demo_server.port}")
    # One JSON document per line, so the two answers can be told apart.
    out = run_bash(script.replace("curl -s", "echo; curl -s"), ROOT, user_env(), 60)
    (answer,) = rerank_answers(out)
    ids = [r["id"] for r in answer["results"]]
    assert ids == ["doc-3", "doc-2", "doc-1"], answer
    assert len({r["score"] for r in answer["results"]}) == 3
    assert answer["model"]["name"] == "demo"


def test_walkthrough_runs_as_written(tmp_path: Path) -> None:
    (block,) = shell_blocks(section("Walkthrough"))
    lines = block.splitlines()
    # Installing and activating are what this test process already is.
    assert lines[0].startswith("make install EXTRAS=") and lines[1] == ". .venv/bin/activate"
    script = "\n".join(lines[2:])
    # The bundled data and the example body, at the paths the walkthrough names.
    for rel in ("trainer/demo_data", "docs/examples"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).symlink_to(ROOT / rel)
    env = user_env()
    env["PORT"] = str(free_port())
    env["LTR_RELOAD_POLL_SECONDS"] = "0.5"
    # A failure half-way must not leave the walkthrough's server running.
    script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    out = run_bash(script.replace("curl -s ", "echo; curl -s "), tmp_path, env, 900)
    (answer,) = rerank_answers(out)
    assert answer["model"]["name"] == "walkthrough"
    ranked = answer["results"]
    assert sorted(r["id"] for r in ranked) == ["doc-1", "doc-2", "doc-3"]
    scores = [r["score"] for r in ranked]
    assert scores == sorted(scores, reverse=True), ranked
    assert (tmp_path / "runs" / "registry" / "walkthrough").is_dir()
    versions = json_lines(out, "models")
    assert versions and versions[-1]["models"][0]["version"] == "walkthrough-v2"


def test_demo_items_takes_candidates_by_id(demo_server: DemoServer) -> None:
    """README, "Candidates by id": item features come from the in-process store."""
    body = {
        "model": "demo-items",
        "candidates": [
            {"id": "doc-3007"},
            {"id": "doc-3005", "features": {"f12": 0.51, "f17": 0.45}},
            {"id": "doc-3006"},
            {"id": "not-in-the-catalogue"},
        ],
    }
    response = httpx.post(f"{demo_server.url}/rerank", json=body)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["model"]["name"] == "demo-items" and len(doc["results"]) == 4
    assert doc["item_features_missing"] == 1 and doc["reasons"] == ["item_features_missing"]
    assert not doc["degraded"]
