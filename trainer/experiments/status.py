"""What `ltr experiment status` says of each experiment in a registry: its record's state, or,
for a running one services do not serve, why: paused (CURRENT is not its control) or refused
(its candidate does not load: the services' own check, app.registry.experiments)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.artifacts.store import ArtifactError, load_version
from app.experiments.spec import ExperimentSpec
from app.registry.experiments import ExperimentRecord, list_records
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


def experiment_states(registry: Path) -> list[ExperimentState]:
    states = []
    for record in list_records(registry):
        if record.status != "running":
            states.append(ExperimentState(record))
            continue
        paused = pause_reason(registry, record.spec)
        refused = None if paused else candidate_refused(registry, record.spec)
        states.append(ExperimentState(record, paused, refused))
    return states


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
