"""The two warm-ups compile every kernel the demo's training uses, for the types it uses: in
a fresh process, training after them adds no compiled signature (so it only loads caches)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.uvicorn_server import REPO

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys, types
import numba
from numba.core.registry import CPUDispatcher
from trainer.commands.serve import DEMO_DATA
from trainer.data.loader import load_dataset
from trainer.lambdamart import booster, kernel_warmup
from trainer.lambdamart.params import LambdaMARTParams

def signatures():
    found = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith(("trainer.", "app.")) or not isinstance(module, types.ModuleType):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                found[f"{name}.{attr}"] = {str(s) for s in value.signatures}
    return found

params = LambdaMARTParams(num_trees=3, num_leaves=31, early_stopping_rounds=20)
train = load_dataset(DEMO_DATA / "rank.train")
valid = load_dataset(DEMO_DATA / "rank.test", num_features=train.num_features)
kernel_warmup.warm_tree_learner(kernel_warmup.head(train), params)
kernel_warmup.warm_objective(kernel_warmup.head(train), params)
before = signatures()
booster.train(train, params, valid)
after = signatures()
new = {k: sorted(v - before.get(k, set())) for k, v in after.items() if v - before.get(k, set())}
print(json.dumps({"new": new, "warmed": sum(len(v) for v in before.values())}))
"""


def test_training_after_both_warmups_compiles_nothing_new() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["warmed"] >= 10  # the warm-ups did compile (or load) the kernels
    assert result["new"] == {}
