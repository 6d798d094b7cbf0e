from __future__ import annotations

import subprocess
import sys

from tests.support.uvicorn_server import REPO

# In a child process: freezing the pytest process would keep every later test's garbage.
CHECK = """
import gc
from app.long_lived import freeze_long_lived
models = [[float(i)] for i in range(50_000)]  # long-lived containers, as a model's tables
garbage = [[]]
garbage[0].append(garbage)  # a cycle: collected first, never frozen
del garbage
freeze_long_lived()
frozen = gc.get_freeze_count()
assert frozen >= 50_000, frozen
gc.collect()
assert gc.get_freeze_count() == frozen  # collections leave the frozen objects alone
print(frozen)
"""


def test_long_lived_objects_leave_the_collectors_scans() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 50_000
