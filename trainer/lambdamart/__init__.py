"""Native LambdaMART: lambda gradients (Burges 2010), histogram trees grown leaf-wise, boosting.

The numba kernels load on first use of `train` or `lambdas_and_hessians`, so that importing
`trainer.lambdamart.params` (every tree engine's parameters) stays light: the Dask engine's
client process never needs numba.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainer.lambdamart.params import LambdaMARTParams

if TYPE_CHECKING:
    from trainer.lambdamart.booster import IterationLog, TrainResult, train
    from trainer.lambdamart.lambdas import lambdas_and_hessians

_LAZY = {
    "IterationLog": "trainer.lambdamart.booster",
    "TrainResult": "trainer.lambdamart.booster",
    "train": "trainer.lambdamart.booster",
    "lambdas_and_hessians": "trainer.lambdamart.lambdas",
}
__all__ = ["IterationLog", "LambdaMARTParams", "TrainResult", "lambdas_and_hessians", "train"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
