"""Start and stop experiments in a registry; promote or roll back their candidate.

Everything is checked before anything is written, and the EXPERIMENT file (what services
serve) is written last with an atomic rename, so a refused start leaves the registry as it was.
Each change holds the model's lock (app.artifacts.lock), like publish and rollback, and writes
its files world-readable: services may run as another user than the trainer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
from pathlib import Path

import orjson

from app.artifacts.lock import model_lock
from app.artifacts.store import (
    ArtifactError,
    load_version,
    read_current,
    set_current,
    write_atomic,
)
from app.errors import error_text
from app.experiments.spec import ExperimentSpec, Mode
from app.registry.experiments import (
    ExperimentError,
    ExperimentRecord,
    Status,
    clear_active,
    compatibility_errors,
    experiment_path,
    list_records,
    record_path,
)
from trainer.experiments.experiment_file import read_experiment

log = logging.getLogger(__name__)


def announce(redis_url: str | None, prefix: str, model: str, version: str) -> None:
    """Tell services to re-read the registry now (they poll anyway)."""
    if not redis_url:
        return
    from trainer.publish import _announce

    try:
        _announce(redis_url, prefix, model, version)
    except Exception as exc:
        log.warning("could not announce on Redis (services will poll): %s", exc)


def _write_active(registry: Path, spec: ExperimentSpec) -> None:
    """app.registry.experiments.write_active's file (spec + its sha256, which read_active
    checks), written 0644: the shared writer there leaves mkstemp's 0600."""
    digest = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()
    body = {"spec": spec.model_dump(mode="json"), "sha256": digest}
    write_atomic(
        experiment_path(registry, spec.model), orjson.dumps(body, option=orjson.OPT_INDENT_2)
    )


def write_record(registry: Path, record: ExperimentRecord) -> None:
    path = record_path(registry, record.spec.model, record.spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, record.model_dump_json(indent=2).encode())


def _no_current(registry: Path, model: str) -> ExperimentError:
    return ExperimentError(f"{registry / model}: no CURRENT version (unknown model {model!r}?)")


def start_experiment(
    registry: Path,
    model: str,
    candidate: str,
    *,
    mode: Mode,
    traffic: float,
    name: str | None = None,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
) -> ExperimentSpec:
    registry = Path(registry)
    if name == "":
        # Was taken for "none given": the default name, with no word of it.
        raise ExperimentError(
            f"the experiment name is empty: give one, or leave it out for {model}-{candidate}"
        )
    if read_current(registry, model) is None:  # before the lock would create the directory
        raise _no_current(registry, model)
    with model_lock(registry, model):
        return _start(registry, model, candidate, mode, traffic, name, redis_url, redis_prefix)


def _start(
    registry: Path,
    model: str,
    candidate: str,
    mode: Mode,
    traffic: float,
    name: str | None,
    redis_url: str | None,
    redis_prefix: str,
) -> ExperimentSpec:
    control = read_current(registry, model)
    if control is None:
        raise _no_current(registry, model)
    running = read_experiment(registry, model)
    if running is not None:
        raise ExperimentError(
            f"model {model!r} already runs experiment {running.name!r} "
            f"(control {running.control} vs candidate {running.candidate}); stop it first"
        )
    candidate_dir = registry / model / candidate
    if not (candidate_dir / "manifest.json").is_file():
        raise ExperimentError(f"{candidate_dir}: unknown version {candidate!r} of {model!r}")
    try:
        control_art = load_version(registry / model / control)
        candidate_art = load_version(candidate_dir)
    except ArtifactError as exc:
        raise ExperimentError(str(exc)) from None
    problems = compatibility_errors(control_art.manifest, candidate_art.manifest)
    if problems:
        raise ExperimentError(f"{candidate_dir}: cannot be compared: " + "; ".join(problems))
    name = name if name is not None else f"{model}-{candidate}"[:64]
    if any(r.spec.name == name for r in list_records(registry)):
        raise ExperimentError(f"an experiment named {name!r} exists already; pick another name")
    try:
        spec = ExperimentSpec(
            name=name,
            model=model,
            control=control,
            candidate=candidate,
            mode=mode,
            traffic=traffic,
            salt=secrets.token_hex(8),
            started_at=dt.datetime.now(dt.UTC),
        )
    except ValueError as exc:
        raise ExperimentError(error_text(exc)) from None
    write_record(registry, ExperimentRecord(spec=spec))
    try:
        _write_active(registry, spec)
    except BaseException:
        record_path(registry, model, name).unlink(missing_ok=True)
        raise
    log.info("experiment %s started: %s vs %s", name, control, candidate)
    announce(redis_url, redis_prefix, model, control)
    return spec


def pause_reason(registry: Path, spec: ExperimentSpec) -> str | None:
    """Why running experiment `spec` is paused, None when it is not: services serve it only
    beside its control (app.registry.experiments.ExperimentSlots), so once CURRENT names
    another version (a publish or rollback by hand) it gathers no evidence, and deciding it
    would replace a version it was never compared with."""
    current = read_current(registry, spec.model)
    if current == spec.control:
        return None
    return (
        f"CURRENT is {current or 'unset'}, the experiment's control is {spec.control}; "
        f"it resumes when CURRENT is {spec.control} again"
    )


def refuse_if_paused(registry: Path, spec: ExperimentSpec) -> None:
    paused = pause_reason(registry, spec)
    if paused is not None:
        raise ExperimentError(
            f"experiment {spec.name} is paused: {paused} (or stop it: "
            f"ltr experiment stop --name {spec.model})"
        )


def check_promotable(registry: Path, spec: ExperimentSpec) -> None:
    """ExperimentError unless the candidate loads and verifies, as promoting it needs: checked
    by `decide --dry-run` too, which said "promote" where the real run then failed."""
    try:
        load_version(Path(registry) / spec.model / spec.candidate)
    except ArtifactError as exc:
        raise ExperimentError(
            f"{exc}: candidate {spec.candidate} of experiment {spec.name} cannot be promoted "
            f"(CURRENT stays {spec.control})"
        ) from None


def running_experiment(registry: Path, model: str) -> ExperimentSpec:
    spec = read_experiment(registry, model)
    if spec is None:
        raise ExperimentError(f"model {model!r} runs no experiment")
    return spec


def end_experiment(
    registry: Path,
    spec: ExperimentSpec,
    status: Status,
    reason: str,
    *,
    decision: dict[str, object] | None = None,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
) -> ExperimentRecord:
    """Stop serving `spec`; `promoted` also points CURRENT at the candidate first."""
    registry = Path(registry)
    with model_lock(registry, spec.model):
        return _end(registry, spec, status, reason, decision, redis_url, redis_prefix)


def _end(
    registry: Path,
    spec: ExperimentSpec,
    status: Status,
    reason: str,
    decision: dict[str, object] | None,
    redis_url: str | None,
    redis_prefix: str,
) -> ExperimentRecord:
    active = read_experiment(registry, spec.model)
    if active is None or active.name != spec.name:
        raise ExperimentError(f"experiment {spec.name!r} is not running")
    if status != "stopped":
        refuse_if_paused(registry, spec)  # checked again here: CURRENT may have just moved
    announce_version = read_current(registry, spec.model) or spec.control
    if status == "promoted":
        check_promotable(registry, spec)
        set_current(registry, spec.model, spec.candidate)
        announce_version = spec.candidate
    clear_active(registry, spec.model)
    record = ExperimentRecord(
        spec=spec,
        status=status,
        ended_at=dt.datetime.now(dt.UTC),
        reason=reason,
        decision=decision,
    )
    write_record(registry, record)
    log.info("experiment %s %s: %s", spec.name, status, reason)
    announce(redis_url, redis_prefix, spec.model, announce_version)
    return record
