from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from trainer.cli import app
from trainer.dnn.options import MAX_HIDDEN_WEIGHTS, MAX_LAYER_WIDTH, MAX_LAYERS, DNNOptions

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"


@pytest.mark.parametrize(
    ("hidden", "message"),
    [
        ([10**9], "a layer of 1000000000 units is wider than the 16384 allowed"),
        ([64, MAX_LAYER_WIDTH + 1], "wider than the 16384 allowed"),
        ([MAX_LAYER_WIDTH] * 3, f"more than the {MAX_HIDDEN_WEIGHTS} allowed"),
    ],
)
def test_layers_that_cannot_fit_in_memory_are_refused(hidden, message) -> None:
    with pytest.raises(ValidationError, match=message):
        DNNOptions(hidden=hidden)


def test_large_but_possible_layers_pass() -> None:
    assert DNNOptions(hidden=[MAX_LAYER_WIDTH, 8192]).hidden == [MAX_LAYER_WIDTH, 8192]
    with pytest.raises(ValidationError, match="less than or equal to 16384"):
        DNNOptions(embedding_dim=10**9)


def test_the_cli_refuses_an_absurd_width_in_one_line_before_reading_data(tmp_path) -> None:
    out = tmp_path / "m" / "v1"
    args = ["train", "--engine", "dnn", "--train", str(DEMO / "rank.train"), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--hidden", "1000000000"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --hidden: a layer of 1000000000 units is wider than the 16384 allowed"
    ]
    assert not out.exists()


def test_absurd_depths_are_refused() -> None:
    with pytest.raises(ValidationError, match=f"at most {MAX_LAYERS} items"):
        DNNOptions(hidden=[1] * (MAX_LAYERS + 1))
    with pytest.raises(ValidationError, match=f"less than or equal to {MAX_LAYERS}"):
        DNNOptions(cross_layers=10**6)
    assert DNNOptions(hidden=[8] * MAX_LAYERS, cross_layers=MAX_LAYERS).cross_layers == MAX_LAYERS


def test_eval_at_beyond_int32_is_refused() -> None:
    """A 20-digit --eval-at crashed the DNN engine with "Integer exceeds 64-bit range"."""
    with pytest.raises(ValidationError, match="less than or equal to 2147483647"):
        DNNOptions(eval_at=99999999999999999999)
