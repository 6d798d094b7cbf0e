"""`ltr train --help`: every option says what it does and what it defaults to, and the
defaults it states are the engines' real ones."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from trainer.cli import app
from trainer.dnn.options import DNNOptions
from trainer.lambdamart.params import LambdaMARTParams


def train_options() -> dict[str, Any]:
    """The click options of `ltr train` by their first flag (typer may vendor its own click)."""
    command: Any = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    return {
        p.opts[0]: p for p in command.params if p.param_type_name == "option" and p.name != "help"
    }


def stated_default(option: Any) -> str:
    if isinstance(option.show_default, str):
        return option.show_default
    return "" if option.default is None else str(option.default)


def test_every_option_has_a_description_and_a_default() -> None:
    for flag, option in train_options().items():
        assert option.help and option.help.strip(), f"{flag} has no description"
        # Square brackets would be read as rich markup and vanish from the help.
        assert "[" not in option.help, flag
        assert option.required or stated_default(option), f"{flag} shows no default"


TREE_DEFAULTS = {
    "--num-trees": "num_trees",
    "--num-leaves": "num_leaves",
    "--min-data-in-leaf": "min_data_in_leaf",
    "--max-bin": "max_bin",
    "--eval-at": "eval_at",
    "--seed": "seed",
}
DNN_DEFAULTS = {
    "--loss": "loss",
    "--arch": "arch",
    "--epochs": "epochs",
    "--batch-queries": "batch_queries",
    "--dropout": "dropout",
    "--embedding-dim": "embedding_dim",
}


@pytest.mark.parametrize("flag, field", TREE_DEFAULTS.items())
def test_tree_defaults_are_the_learners(flag: str, field: str) -> None:
    assert stated_default(train_options()[flag]) == str(
        LambdaMARTParams.model_fields[field].default
    )


@pytest.mark.parametrize("flag, field", DNN_DEFAULTS.items())
def test_dnn_defaults_are_the_engines(flag: str, field: str) -> None:
    assert stated_default(train_options()[flag]) == str(DNNOptions.model_fields[field].default)


def test_shared_options_state_both_engines_defaults() -> None:
    options = train_options()
    trees, dnn = LambdaMARTParams(), DNNOptions()
    assert stated_default(options["--hidden"]) == ",".join(map(str, dnn.hidden))
    rate = stated_default(options["--learning-rate"])
    assert rate == f"{trees.learning_rate} for trees, {dnn.learning_rate} for dnn"
    stop = stated_default(options["--early-stopping"])
    assert trees.early_stopping_rounds is None and stop.startswith("off for trees")
    assert stop.endswith(f"{dnn.early_stopping_rounds} epochs for dnn")
    assert trees.threads == 0 and dnn.threads == 1
    assert stated_default(options["--threads"]) == "all cores for trees, 1 for dnn"
    for choice in ("lambdarank", "ranknet", "listnet", "pointwise"):
        assert choice in (options["--loss"].help or "")
    assert "epochs (dnn)" in (options["--early-stopping"].help or "")
    assert "IPW DCG@k" in (options["--early-stopping"].help or "")


def test_rendered_help_shows_them() -> None:
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for needle in ("lambdarank | ranknet | listnet | pointwise", "default: (100)", "256,128"):
        assert needle in text
