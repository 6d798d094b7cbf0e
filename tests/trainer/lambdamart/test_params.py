"""Bounds of the native learner's parameters: a value no engine can use is a one-line error
before any data is read, not a numba typing traceback mid-training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from trainer.cli import app
from trainer.lambdamart.params import MAX_EVAL_AT, LambdaMARTParams


def test_eval_at_up_to_int32() -> None:
    assert MAX_EVAL_AT == 2**31 - 1
    assert LambdaMARTParams(eval_at=MAX_EVAL_AT).eval_at == MAX_EVAL_AT


@pytest.mark.parametrize("eval_at", [2**31, 2**63, 99999999999999999999])
def test_eval_at_beyond_int32_is_refused(eval_at: int) -> None:
    with pytest.raises(ValidationError, match="less than or equal to 2147483647"):
        LambdaMARTParams(eval_at=eval_at)


@pytest.mark.parametrize("eval_at", ["99999999999999999999", "2147483648"])
def test_huge_eval_at_flag_is_one_error_line(tmp_path: Path, eval_at: str) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"qid": np.repeat(np.arange(4), 5), "label": rng.integers(0, 3, 20)})
    frame["f1"] = rng.random(20)
    data = tmp_path / "train.parquet"
    frame.to_parquet(data)
    out = tmp_path / "v1"
    args = ["train", "--train", str(data), "--num-trees", "2", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, f"--eval-at={eval_at}"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: --eval-at: Input should be less than or equal to 2147483647"]
    assert not out.exists()
