"""What `ltr experiment status` says of each experiment in a registry: its record's state, or,
for a running one services do not serve, why: paused (CURRENT is not its control) or refused
(the services' own checks, app.registry.experiments: its model's EXPERIMENT file is corrupt or
edited by hand, no EXPERIMENT file names it, or its candidate does not load). EXPERIMENT files
services refuse are listed too, a record naming them or not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.artifacts.store import ArtifactError, list_models, load_version
from app.experiments.spec import ExperimentSpec
from app.registry.experiments import ExperimentError, ExperimentRecord, list_records, read_active
from trainer.experiments.experiment_file import refused_note
from trainer.experiments.lifecycle import pause_reason


@dataclass(frozen=True)
class ExperimentState:
    record: ExperimentRecord
    paused: str | None = None
    refused: str | None = None  # why services refuse to serve it

    @property
    def status(self) -> str:
        return "paused" if self.paused else "refused" if self.refused else self.record.status

    def to_json(self) -> dict[str, Any]:
        return {
            **self.record.model_dump(mode="json"),
            "status": self.status,
            "paused": self.paused,
            "refused": self.refused,
        }

    def line(self) -> str:
        spec = self.record.spec
        why = self.paused or self.refused or self.record.reason
        return (
            f"{spec.name}: {spec.model} control {spec.control} vs candidate {spec.candidate} "
            f"({spec.mode}, {100 * spec.traffic:g} %) {self.status}" + (f" — {why}" if why else "")
        )


@dataclass(frozen=True)
class RegistryStatus:
    experiments: list[ExperimentState]
    files: dict[str, str]  # model -> why services refuse its EXPERIMENT file

    def to_json(self) -> dict[str, Any]:
        return {
            "experiments": [state.to_json() for state in self.experiments],
            "refused_files": [
                {"model": model, "refused": why, "fix": refused_note(model)}
                for model, why in self.files.items()
            ],
        }

    def lines(self) -> list[str]:
        lines = [state.line() for state in self.experiments]
        shown = {s.record.spec.model for s in self.experiments if s.status == "refused"}
        for model, why in self.files.items():
            if model not in shown:
                lines.append(f"{model}: {why}: {refused_note(model)}")
        return lines


def registry_status(registry: Path) -> RegistryStatus:
    files: dict[str, str] = {}
    serving: dict[str, str | None] = {}  # model -> the experiment its EXPERIMENT file names
    for model in list_models(registry):
        try:
            spec = read_active(registry, model)
        except ExperimentError as exc:
            files[model] = str(exc)
            continue
        serving[model] = None if spec is None else spec.name
    states = [_state(registry, record, files, serving) for record in list_records(registry)]
    return RegistryStatus(states, files)


def _state(
    registry: Path,
    record: ExperimentRecord,
    files: dict[str, str],
    serving: dict[str, str | None],
) -> ExperimentState:
    spec = record.spec
    if record.status != "running":
        return ExperimentState(record)
    if spec.model in files:
        return ExperimentState(record, refused=f"{files[spec.model]}: {refused_note(spec.model)}")
    named = serving.get(spec.model)
    if named != spec.name:
        names = "" if named is None else f" (it names {named})"
        return ExperimentState(
            record,
            refused=f"no EXPERIMENT file names it{names}, so no service serves it; "
            f"`ltr experiment stop --name {spec.model}` marks it stopped",
        )
    paused = pause_reason(registry, spec)
    return ExperimentState(record, paused, None if paused else candidate_refused(registry, spec))


def candidate_refused(registry: Path, spec: ExperimentSpec) -> str | None:
    """Why services refuse running experiment `spec` for its candidate (moved away, corrupt),
    None when it loads and verifies. Status said "running" of an experiment no service
    served, and `decide --dry-run` would promote a version that is not there."""
    try:
        load_version(Path(registry) / spec.model / spec.candidate)
    except ArtifactError as exc:
        return (
            f"its candidate {spec.candidate} does not load ({exc}): services serve "
            f"{spec.control} alone; put the version back, or end the experiment: "
            f"ltr experiment stop --name {spec.model}"
        )
    return None
