"""Experiments in the registry: `<registry>/<model>/EXPERIMENT` names the running one, and
`<registry>/<model>/experiments/<name>.json` keeps each experiment's record (spec, status,
outcome) for reports after it ends.

Like CURRENT, EXPERIMENT is replaced with an atomic rename, and it carries the sha256 of its
spec, so a torn or hand-edited file is refused instead of half-applied. `ExperimentSlots` is the
serving side: on each registry reload it re-reads EXPERIMENT and loads, verifies and warms the
candidate version like any model version before serving it beside CURRENT.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from app import metrics
from app.artifacts.store import write_atomic
from app.errors import LtrError
from app.experiments.draft_kernel import compile_later
from app.experiments.spec import ExperimentSpec
from app.registry.version_signature import VersionSignature, files_signature, version_signature
from app.scoring.beside import start_later as start_beside

log = logging.getLogger(__name__)

EXPERIMENT_FILE = "EXPERIMENT"
RECORDS_DIR = "experiments"
Status = Literal["running", "stopped", "promoted", "rolled_back"]


class ExperimentError(LtrError, ValueError):
    """An experiment file or request that is malformed or not allowed."""


class ExperimentRecord(BaseModel):
    """What `experiments/<name>.json` holds."""

    model_config = ConfigDict(extra="forbid")

    spec: ExperimentSpec
    status: Status = "running"
    ended_at: dt.datetime | None = None
    reason: str | None = None
    decision: dict[str, Any] | None = None


def _digest(spec: ExperimentSpec) -> str:
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)  # readable by a service running as another user


def experiment_path(registry: Path, model: str) -> Path:
    return Path(registry) / model / EXPERIMENT_FILE


def record_path(registry: Path, model: str, name: str) -> Path:
    return Path(registry) / model / RECORDS_DIR / f"{name}.json"


def write_active(registry: Path, spec: ExperimentSpec) -> None:
    body = {"spec": spec.model_dump(mode="json"), "sha256": _digest(spec)}
    _write_atomic(
        experiment_path(registry, spec.model), orjson.dumps(body, option=orjson.OPT_INDENT_2)
    )


def clear_active(registry: Path, model: str) -> None:
    experiment_path(registry, model).unlink(missing_ok=True)


def read_active(registry: Path, model: str) -> ExperimentSpec | None:
    """The running experiment of `model`, None without one; ExperimentError when the file is
    unreadable, malformed or fails its checksum."""
    path = experiment_path(registry, model)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        doc = orjson.loads(raw)
        spec = ExperimentSpec.model_validate(doc["spec"])
        digest = doc["sha256"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValidationError) as exc:
        raise ExperimentError(f"{path}: not a valid experiment file ({exc})") from None
    if digest != _digest(spec):
        raise ExperimentError(f"{path}: sha256 mismatch (corrupt or edited by hand)")
    if spec.model != model:
        raise ExperimentError(f"{path}: names model {spec.model!r}, lives under {model!r}")
    return spec


def write_record(registry: Path, record: ExperimentRecord) -> None:
    path = record_path(registry, record.spec.model, record.spec.name)
    _write_atomic(path, record.model_dump_json(indent=2).encode())


def find_record(registry: Path, name: str) -> ExperimentRecord:
    """The record of experiment `name` under any model; ExperimentError if there is none."""
    root = Path(registry)
    matches = sorted(root.glob(f"*/{RECORDS_DIR}/{name}.json")) if root.is_dir() else []
    if not matches:
        raise ExperimentError(f"no experiment named {name!r} in {root}")
    path = matches[0]
    try:
        return ExperimentRecord.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ExperimentError(f"{path}: not a valid experiment record ({exc})") from None


def list_records(registry: Path) -> list[ExperimentRecord]:
    root = Path(registry)
    out = []
    for path in sorted(root.glob(f"*/{RECORDS_DIR}/*.json")) if root.is_dir() else []:
        try:
            out.append(ExperimentRecord.model_validate_json(path.read_bytes()))
        except ValidationError:
            log.warning("skipping unreadable experiment record %s", path)
    return out


# Serving side.


@dataclass(frozen=True)
class ActiveExperiment:
    """A running experiment as one process serves it: the spec and the loaded candidate
    (a `LoadedModel`; typed loosely to keep this module below the registry)."""

    spec: ExperimentSpec
    candidate: Any


def compatibility_errors(control: Any, candidate: Any) -> list[str]:
    """Why two manifests cannot be compared in one experiment (empty when they can)."""
    errors = []
    if control.name != candidate.name:
        errors.append(f"candidate is model {candidate.name!r}, control {control.name!r}")
    if list(control.feature_names) != list(candidate.feature_names):
        errors.append("candidate's feature names differ from the control's")
    elif getattr(control, "feature_sources", None) != getattr(candidate, "feature_sources", None):
        # One assembled row (candidate, query, item-store columns) feeds both versions.
        errors.append("candidate's feature sources differ from the control's")
    cu, ku = control.user_clusters, candidate.user_clusters
    if (cu is None) != (ku is None) or (
        cu is not None
        and ku is not None
        and (cu.scheme != ku.scheme or cu.embedding_dim != ku.embedding_dim or cu.input != ku.input)
    ):
        errors.append("candidate's user clusters differ from the control's")
    return errors


class ExperimentSlots:
    """The running experiment per model name in this process, kept in step with EXPERIMENT.

    `load(name, version)` is the registry's verified, warmed model load (runs in a thread)."""

    def __init__(self, root: Path, load: Callable[[str, str], Any]) -> None:
        self.root = root
        self._load = load
        self._active: Mapping[str, ActiveExperiment] = {}
        # A refused spec and its candidate's files as they were: retried once they change.
        self._refused: dict[str, tuple[ExperimentSpec, VersionSignature]] = {}
        self.errors: dict[str, str] = {}

    def get(self, model: str) -> ActiveExperiment | None:
        return self._active.get(model) if self._active else None

    async def refresh(self, model: str, control: Any, force: bool) -> None:
        """Re-read `model`'s EXPERIMENT and serve what it says; a candidate that fails to load
        or does not match the serving control is refused (the control serves alone)."""
        import anyio.to_thread

        try:
            spec = read_active(self.root, model)
        except ExperimentError as exc:
            self._drop(model, str(exc))
            return
        current = self._active.get(model)
        if spec is None or control is None:
            self._drop(model, None)
            return
        if spec.control != control.version:
            # CURRENT moved away from the experiment's control: comparing against another
            # version would mix two experiments' evidence, so the experiment pauses here.
            self._drop(model, f"experiment {spec.name}: control {spec.control} is not serving")
            return
        if current is not None and current.spec == spec and _files_unchanged(current.candidate):
            return
        # A candidate whose files changed (removed, rewritten) is loaded again as a restarted
        # worker would: a trial moved it away and the running worker kept serving it from
        # memory, where a new one refused the experiment.
        on_disk = version_signature(self.root / model / spec.candidate)
        if not force and self._refused.get(model) == (spec, on_disk):
            return
        try:
            candidate = await anyio.to_thread.run_sync(self._load, model, spec.candidate)
            problems = compatibility_errors(control.manifest, candidate.manifest)
            if problems:
                raise ExperimentError("; ".join(problems))
        except Exception as exc:
            self._refused[model] = (spec, on_disk)
            self._drop(model, f"experiment {spec.name} refused: {type(exc).__name__}: {exc}")
            log.error("experiment %s refused: %s", spec.name, exc)
            return
        if current is not None:
            _serving_info(current.spec, 0)
        self._active = {**self._active, model: ActiveExperiment(spec, candidate)}
        _serving_info(spec, 1)
        self.errors.pop(model, None)
        if spec.mode == "interleave":
            compile_later()  # the merge's compiled kernel, in the background
            start_beside()  # the thread that scores the candidate beside the control
        log.info(
            "experiment %s: %s vs %s (%s, %.0f %% of traffic)",
            spec.name,
            spec.control,
            spec.candidate,
            spec.mode,
            100 * spec.traffic,
        )

    def _drop(self, model: str, error: str | None) -> None:
        if model in self._active:
            _serving_info(self._active[model].spec, 0)
            self._active = {k: v for k, v in self._active.items() if k != model}
            log.info("experiment on %s no longer served", model)
        if error is None:
            self.errors.pop(model, None)
        else:
            self.errors[model] = error


def _files_unchanged(candidate: Any) -> bool:
    """Whether a loaded candidate's verified files are as it read them (a `LoadedModel`)."""
    files = candidate.files
    return not files or files_signature(candidate.path, [e[0] for e in files]) == files


def _serving_info(spec: ExperimentSpec, value: int) -> None:
    """`ltr_experiment_serving_info`: zeroed, not removed, when the experiment stops (as the
    model info: multiprocess files keep every series; the exposition leaves zeroed ones out)."""
    labels = (spec.model, spec.name, spec.mode, spec.control, spec.candidate)
    metrics.EXPERIMENT_INFO.labels(*labels).set(value)
