"""`ltr`: the one console script. Each command lives in `trainer/commands/<name>.py` and
registers itself; heavy libraries are imported inside the commands, so `ltr serve` runs in
the serving image without torch or LightGBM."""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES: tuple[str, ...] = (
    "train",
    "evaluate",
    "convert",
    "publish",
    "nightly",
    "simulate",
    "dataset",
    "serve",
    "features",
)

app = typer.Typer(
    name="ltr",
    help="Learning-to-rank: train, evaluate, convert, simulate, publish and serve ranking models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    importlib.import_module(f"trainer.commands.{_module}").register(app)


def main() -> None:
    app()
