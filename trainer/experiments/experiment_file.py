"""A model's EXPERIMENT file as the trainer reads it: `read_active`, with what services do with a
file they refuse (they serve CURRENT alone) and how to clear it. Before, a corrupt or hand-edited
file stopped `start`, `stop` and `decide` with "not a valid experiment file", and nothing said
that deleting it by hand was the only way out."""

from __future__ import annotations

from pathlib import Path

from app.experiments.spec import ExperimentSpec
from app.registry.experiments import ExperimentError, read_active


def refused_note(model: str) -> str:
    return (
        f"services refuse the file and serve CURRENT alone; `ltr experiment stop --name {model}` "
        "removes it"
    )


def file_fault(registry: Path, model: str) -> str | None:
    """Why services refuse `model`'s EXPERIMENT file; None when it is valid or absent."""
    try:
        read_active(registry, model)
    except ExperimentError as exc:
        return str(exc)
    return None


def read_experiment(registry: Path, model: str) -> ExperimentSpec | None:
    """The running experiment of `model`, None without one; ExperimentError saying how to clear
    a file services refuse."""
    try:
        return read_active(registry, model)
    except ExperimentError as exc:
        raise ExperimentError(f"{exc}: {refused_note(model)}") from None
