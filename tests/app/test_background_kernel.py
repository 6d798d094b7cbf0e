"""A background-compiled kernel is compiled for what requests pass before anyone calls it
ready: numba types a lazily compiled function on its first call, and with an empty cache that
first call took seconds on the event loop (a fresh `make run`'s first answer came back
`over_budget` after 7.7 s, its shed path compiling the ids walk)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.uvicorn_server import REPO

# In a child process: this one has called the kernels already, with every type the tests use.
CHECK = """
import json
from types import SimpleNamespace

import numpy as np
import orjson

from app.api import answer, answer_kernel, body_marks, body_scan, ids_kernel, retrieval_order
from app.settings import Settings

body_marks.KERNEL.compile_now()
body_scan.KERNEL.compile_now()
lazy = {
    "count_rows": ids_kernel.count_rows,
    "scan_ids": ids_kernel.scan_ids,
    "ids write_results": ids_kernel.write_results,
    "answer write_results": answer_kernel.write_results,
}
before = {name: len(kernel.signatures) for name, kernel in lazy.items()}

n = 300
candidates = [{"id": f"d{i}" if i % 2 else i, "features": [i / 7, 1.5]} for i in range(n)]
raw = orjson.dumps({"model": "m", "candidates": candidates, "top_k": 10})
marks = body_marks.BodyMarks.of(raw)  # admission: the marks and the row count
assert body_marks.estimated_rows(marks) == n
envelope, ids, raw_ids = retrieval_order._fallback(raw, Settings(), marks)  # a shed answer
model = SimpleNamespace(name="m", version="v1")
orjson.loads(retrieval_order.fallback_body("r-1", model, ids, raw_ids, 10, "shed"))
scores = np.linspace(0.0, 1.0, n)  # a scored answer, ranked as routes._ranked ranks
ranked = np.argsort(-scores, kind="stable")[:10]
orjson.loads(answer.answer_json({"results": answer.RankedResults(ids, scores, ranked)}))

after = {name: len(kernel.signatures) for name, kernel in lazy.items()}
print(json.dumps({"before": before, "after": after}))
"""


def test_requests_find_every_kernel_compiled_for_their_types() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert all(n >= 1 for n in counts["before"].values()), counts
    assert counts["after"] == counts["before"], counts
