"""docs/MQ2008.md: its checksums are those of the real fold files, and its commands train,
publish and serve a model that reranks its example. Needs the MQ2008 copy in ../shared (a
user's clone has none: skipped there)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.integration.test_quickstart import json_lines, run_bash, user_env
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
MQ2008 = ROOT.parent / "shared" / "datasets" / "mq2008"
if not MQ2008.is_dir():
    MQ2008 = Path("/work/shared/datasets/mq2008")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not MQ2008.is_dir(), reason="no MQ2008 copy in ../shared"),
]
DOC = (ROOT / "docs" / "MQ2008.md").read_text()


def test_checksums_match_the_fold_files() -> None:
    lines = (ROOT / "docs" / "mq2008.sha256").read_text().splitlines()
    assert len(lines) == 15
    for line in lines:
        digest, name = line.split("  ")
        path = MQ2008 / Path(name).relative_to("MQ2008")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, name


def test_walkthrough_on_fold_1(tmp_path: Path) -> None:
    blocks = re.findall(r"^```\n(.*?)^```", DOC, flags=re.M | re.S)
    lines = blocks[1].splitlines()
    assert lines[0].startswith("make install") and lines[1] == ". .venv/bin/activate"
    # Fewer trees than the document's 1,000: the same commands, a test's time budget.
    script = "\n".join(lines[2:]).replace("--num-trees 1000", "--num-trees 60")
    shutil.copytree(MQ2008 / "Fold1", tmp_path / "MQ2008" / "Fold1")
    env = user_env()
    env["PORT"] = str(free_port())
    script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    out = run_bash(script.replace("curl -s ", "echo; curl -s "), tmp_path, env, 900)
    (answer,) = json_lines(out, "request_id")
    assert answer["model"]["name"] == "mq2008"
    scores = [r["score"] for r in answer["results"]]
    assert len(set(scores)) == 2
    assert os.path.isdir(tmp_path / "runs" / "registry-mq2008" / "mq2008")
