"""`make test`'s scheduler (tests.support.parallel_runs) when a worker dies: a CI run whose
worker the OOM killer took hung with idle workers until its time limit (pytest-xdist 3.8
queued the dead worker's completed units again, as empty work)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNITS = {
    "a": "import os\n\ndef test_1():\n    pass\n\ndef test_2():\n    os._exit(1)\n\n"
    "def test_3():\n    pass\n",
    "b": "def test_4():\n    pass\n\ndef test_5():\n    pass\n",
    "c": "import time\n\ndef test_6():\n    time.sleep(1)\n\ndef test_7():\n    pass\n",
}


def test_a_crashed_worker_fails_its_test_once_and_the_rest_still_run(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.support.parallel_runs"]\n')
    for unit, source in UNITS.items():
        (tmp_path / unit).mkdir()
        (tmp_path / unit / f"test_{unit}.py").write_text(source)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
         str(tmp_path)],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    last = run.stdout.strip().splitlines()[-1]
    assert "1 failed, 6 passed" in last, run.stdout + run.stderr
    assert run.stdout.count("FAILED ") == 1, run.stdout  # not again on each replacement
