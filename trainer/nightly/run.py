"""One nightly run: data → train → gate (against the deployed model) → report → publish.

Nothing touches the registry before the gate has passed; a refused or crashed run leaves the
deployed model serving and raises `NightlyRefused` / the original error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from app.artifacts.lock import model_lock
from app.artifacts.manifest import new_version_id
from app.artifacts.store import Artifact, ArtifactError, load_version, read_current
from app.artifacts.tree_dump import TreeEnsemble
from app.errors import LtrError
from trainer.commands.errors import CommandError, os_error_text
from trainer.data.concat import concat_datasets
from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset, present_id_column
from trainer.explain.versions import version_views
from trainer.features.item_table import read_item_table
from trainer.features.set_retention import old_version_ttl
from trainer.features.sources import (
    FeatureSpec,
    SourcePlan,
    apply_sources,
    attach_sources,
    data_id_column,
    source_plan,
    staging_dir,
)
from trainer.nightly.config import NightlyConfig
from trainer.nightly.gate import GateResult, run_gate
from trainer.nightly.partitions import Partition, find_partitions, split_by_query_hash
from trainer.nightly.report import write_report
from trainer.nightly.served_sources import deployed_manifest, served_plan
from trainer.progress import TrainingProgress
from trainer.publish import PublishResult, publish

log = logging.getLogger(__name__)
DEMO_DATA = Path(__file__).resolve().parents[1] / "demo_data"
# A held-out day under this share of a typical training day's rows (a partial export) still
# gates, with a warning: its NDCG is noisy.
HOLDOUT_MIN_SHARE = 0.1


class NightlyRefused(LtrError, RuntimeError):
    """The candidate was not published (the gate refused it, or CURRENT moved while it was
    gated); the deployed model is untouched. Carries what `ltr nightly --json` prints."""

    def __init__(
        self,
        reasons: list[str],
        report_dir: Path,
        *,
        name: str | None = None,
        version: str | None = None,
        deployed: str | None = None,
        gate: GateResult | None = None,
    ) -> None:
        super().__init__("; ".join(reasons) + f" (report: {report_dir / 'report.html'})")
        self.reasons = reasons
        self.report_dir = report_dir
        self.name = name
        self.version = version
        self.deployed = deployed
        self.gate = gate


@dataclass(frozen=True)
class Deployed:
    """CURRENT as read before the gate: its version, and the model or why it did not load."""

    version: str | None
    artifact: Artifact | None = None
    error: str | None = None


@dataclass(frozen=True)
class NightlyData:
    train: RankingDataset
    valid: RankingDataset
    holdout: RankingDataset
    summary: dict[str, Any]
    propensities: Path | None = None  # click logs: the examination curve estimated on train
    sources: SourcePlan | None = None  # query columns / item table the manifest records


@dataclass(frozen=True)
class NightlyOutcome:
    published: PublishResult
    gate: GateResult
    report_dir: Path
    # [experiment] enabled: the running experiment's decision and the new one (if started).
    experiment: dict[str, Any] | None = None


class _RecordingProgress(TrainingProgress):
    """The usual progress output, plus the metric history for the report."""

    def __init__(self, total: int, **kwargs: Any) -> None:
        super().__init__(total, **kwargs)
        self.train_history: list[float] = []
        self.valid_history: list[float] = []

    def update(
        self,
        iteration: int,
        train_metric: float | None = None,
        valid_metric: float | None = None,
    ) -> None:
        if train_metric is not None:
            self.train_history.append(float(train_metric))
        if valid_metric is not None:
            self.valid_history.append(float(valid_metric))
        super().update(iteration, train_metric, valid_metric)


def metric_names(config: NightlyConfig, debiased: bool) -> dict[str, str]:
    """What the progress lines and the report call the training and validation metrics. On
    debiased clicks training reports the NDCG of the clicks as served (its lambdas' own
    figure) and validation the mean DCG of IPW labels (clicks / theta: above 1 is usual), as
    `ltr train --debias` names them."""
    model = config.model
    k = model.dnn.eval_at if model.engine == "dnn" else model.lambdamart.eval_at
    if debiased:
        return {"train": f"raw-click ndcg@{k}", "valid": f"IPW dcg@{k}"}
    return {"train": f"ndcg@{k}", "valid": f"ndcg@{k}"}


def load_data(config: NightlyConfig) -> NightlyData:
    """Training, validation and held-out sets from the newest partitions (or the demo data)."""
    cfg = config.data
    summary: dict[str, Any]
    if cfg.source == "logs":
        from trainer.clicks.join import dataset_from_logs

        # Logged rows are in the deployed model's columns (its query and item-store features
        # included): the retrained version keeps its sources (trainer.nightly.served_sources).
        served = deployed_manifest(config)
        names = None if served is None else served.feature_names
        model = None if served is None else served.name
        try:
            train_all, holdout = dataset_from_logs(
                cfg.dir, names, cfg.holdout_fraction, model=model
            )
        except ValueError as exc:
            # "the logs hold no impressions" (an empty file) named no file.
            if str(cfg.dir) in str(exc):
                raise
            raise CommandError(f"{cfg.dir}: {exc}") from None
        train, valid = split_by_query_hash(train_all, cfg.valid_fraction, salt="valid")
        plan = None if served is None else served_plan(config, served)
        from trainer.redis_publish import redacted

        summary = {"source": f"logs in {redacted(str(cfg.dir))}", "debias": cfg.debias}
        if plan is not None:
            summary["item_set"] = (
                None if plan.item_set is None else f"{plan.item_set.set}@{plan.item_set.version}"
            )
            summary["query_features"] = [n for n, s in plan.sources.items() if s == "query"]
        sizes = _sizes(train, valid, holdout)
        if cfg.debias == "none":
            return NightlyData(train, valid, holdout, summary | sizes, None, plan)
        return replace(_debiased(config, train, valid, holdout, summary | sizes), sources=plan)
    partitions = find_partitions(cfg.path, cfg.partitions) if cfg.path.is_dir() else []
    if not partitions:
        _check_demo_allowed(config)
        data = load_dataset(DEMO_DATA / "rank.train")
        rest, holdout = split_by_query_hash(data, cfg.holdout_fraction, salt="holdout")
        summary = {"source": "bundled demo data (LightGBM lambdarank example)"}
    else:
        spec = _feature_spec(config)
        if spec is not None:
            return _sourced_data(config, spec, partitions)
        # A doc_id column is ids, not a feature, as `ltr train` reads it.
        loaded = [
            [load_dataset(f, id_column=present_id_column(f)) for f in p.files] for p in partitions
        ]
        # Sparse LETOR files may stop short of the widest feature id: re-read them aligned.
        width = max(d.num_features for part in loaded for d in part)
        parts = [
            concat_datasets(
                [
                    d if d.num_features == width else load_dataset(f, num_features=width)
                    for f, d in zip(p.files, part, strict=True)
                ]
            )
            for p, part in zip(partitions, loaded, strict=True)
        ]
        rest, holdout, split = _time_split(config, partitions, parts)
        summary = {
            "source": str(cfg.path),
            "partitions": [str(p.date) for p in partitions],
            "split": split,
        }
    train, valid = split_by_query_hash(rest, cfg.valid_fraction, salt="valid")
    return NightlyData(train, valid, holdout, summary | _sizes(train, valid, holdout))


def _check_demo_allowed(config: NightlyConfig) -> None:
    """No partition: the bundled demo data only installs a first model. Over a deployed one a
    missing or empty data directory is an outage upstream, not a reason to serve a toy."""
    cfg = config.data
    current = read_current(config.publish.registry, config.model.name)
    if cfg.bundled_demo and current is None:
        return
    data_dir = cfg.path
    what = "no dated partitions of training data" if data_dir.is_dir() else "does not exist"
    if not data_dir.is_dir() and data_dir.exists():
        what = "is not a directory"
    why = (
        f" (data.bundled_demo applies only before a first model is deployed; "
        f"{config.model.name} {current} is)"
        if cfg.bundled_demo
        else ""
    )
    raise CommandError(f"{data_dir}: training data directory {what}{why}")


def _time_split(
    config: NightlyConfig, partitions: list[Partition], parts: list[RankingDataset]
) -> tuple[RankingDataset, RankingDataset, str]:
    """(training + validation, holdout, how it was split): the newest partition is held out,
    its columns checked against the training ones before hours of training, not after."""
    if len(parts) < 2:
        rest, holdout = split_by_query_hash(parts[0], config.data.holdout_fraction, "holdout")
        return rest, holdout, "query hash (one partition)"
    rest, holdout = concat_datasets(parts[:-1]), parts[-1]
    newest = partitions[-1]
    if holdout.names() != rest.names():
        raise CommandError(f"{_files(newest)}: {_column_difference(rest, holdout)}")
    median = float(np.median([p.num_docs for p in parts[:-1]]))
    if holdout.num_docs < HOLDOUT_MIN_SHARE * median:
        log.warning(
            "%s: the held-out partition has %d rows, under %d%% of the median training "
            "partition's %d: the gate decides on little data",
            _files(newest),
            holdout.num_docs,
            round(100 * HOLDOUT_MIN_SHARE),
            round(median),
        )
    return rest, holdout, f"time: held out {newest.date}"


def _files(partition: Partition) -> str:
    return ", ".join(str(f) for f in partition.files)


def _column_difference(train: RankingDataset, holdout: RankingDataset) -> str:
    """Why the held-out columns do not match the training ones, in a few words."""
    want, got = train.names(), holdout.names()
    missing = [n for n in want if n not in got]
    extra = [n for n in got if n not in want]
    parts = []
    if missing:
        parts.append(f"lacks {', '.join(missing[:10])}")
    if extra:
        parts.append(f"has {', '.join(extra[:10])} that training has not")
    if not parts:
        at = next(i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b)
        parts.append(
            f"has the columns in another order (column {at + 1}: {got[at]}, "
            f"training has {want[at]})"
        )
    return (
        f"held-out partition's {len(got)} feature columns do not match the training "
        f"partitions' {len(want)}: it {'; it '.join(parts)}"
    )


def _feature_spec(config: NightlyConfig) -> FeatureSpec | None:
    features = config.features
    if not features.query and features.items is None:
        return None
    return FeatureSpec(
        features.query, features.items, features.item_set, features.id_column,
        features.items_id_column,
    )  # fmt: skip


def _sourced_data(config: NightlyConfig, spec: FeatureSpec, partitions: list[Any]) -> NightlyData:
    """Partitions with the item table joined and query columns checked (Parquet data)."""
    table = read_item_table(spec.items, spec.table_id_column) if spec.items is not None else None
    parts = []
    for p in partitions:
        files = [
            apply_sources(load_dataset(f, id_column=data_id_column(spec, f)), spec, table)
            for f in p.files
        ]
        parts.append(concat_datasets(files))
    rest, holdout, split = _time_split(config, partitions, parts)
    train, valid = split_by_query_hash(rest, config.data.valid_fraction, salt="valid")
    summary = {
        "source": str(config.data.path),
        "partitions": [str(p.date) for p in partitions],
        "split": split,
        "item_set": None if table is None else f"{spec.item_set}@{table.version()}",
        "query_features": spec.query,
    }
    plan = source_plan(spec, table)
    return NightlyData(train, valid, holdout, summary | _sizes(train, valid, holdout), None, plan)


def _debiased(
    config: NightlyConfig,
    train: RankingDataset,
    valid: RankingDataset,
    holdout: RankingDataset,
    summary: dict[str, Any],
) -> NightlyData:
    """Estimate examination on the training clicks; validation and holdout get IPW labels."""
    from trainer.clicks.ipw_eval import ipw_relabel
    from trainer.clicks.propensity import estimate_from_dataset, write_propensities

    estimate = estimate_from_dataset(train)
    path = config.work_dir / "propensities.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_propensities(path, estimate)
    summary["theta"] = [round(float(t), 4) for t in estimate.theta[:10]]
    note = estimate.pooling_note()
    if note is not None:
        summary["pooled_positions"] = [list(r) for r in estimate.pooled_ranges()]
        log.warning("%s", note)
    summary["valid_holdout_labels"] = "IPW (clicks / theta of the served position)"
    valid, holdout = ipw_relabel(valid, estimate.theta), ipw_relabel(holdout, estimate.theta)
    return NightlyData(train, valid, holdout, summary, path)


def _sizes(*sets: RankingDataset) -> dict[str, Any]:
    out: dict[str, Any] = {"features": sets[0].num_features}
    for label, data in zip(("train", "valid", "holdout"), sets, strict=True):
        out[f"{label}_queries"] = data.num_queries
        out[f"{label}_documents"] = data.num_docs
    return out


def train_candidate(
    config: NightlyConfig, data: NightlyData, out: Path
) -> tuple[Path, dict[str, list[float]]]:
    """Train the configured engine into the version directory `out` (with the feature sources
    and item snapshot in it when the data has them)."""
    if data.sources is not None:
        staged = staging_dir(out)
        trained, history = train_candidate(config, replace(data, sources=None), staged)
        return attach_sources(trained, out, data.sources), history
    model = config.model
    names = metric_names(config, data.propensities is not None)
    named = {"metric": names["train"], "valid_metric": names["valid"]}
    if model.engine == "dnn":
        from trainer.engines.dnn_model import train_dnn_model

        options = model.dnn
        progress = _RecordingProgress(options.epochs, unit="epoch", **named)
        with progress:
            path = train_dnn_model(
                data.train, data.valid, options, out, progress, name=model.name
            ).model_dir
    else:
        from trainer.engines.tree_model import train_tree_model

        params = model.lambdamart
        objective = None
        if data.propensities is not None:
            from trainer.lambdamart.debias_choice import click_objective

            debias = config.data.debias
            assert debias != "none"
            objective = click_objective(data.train, params, data.propensities, debias=debias)
        progress = _RecordingProgress(params.num_trees, **named)
        with progress:
            path = train_tree_model(
                model.engine,
                data.train,
                data.valid,
                params,
                out,
                name=model.name,
                progress=progress,
                objective=objective,
                valid_metric="ndcg" if objective is None else "dcg",  # IPW labels: see _debiased
            ).model_dir
    history = {"train": progress.train_history, "valid": progress.valid_history}
    return path, {k: v for k, v in history.items() if v}


def feature_importance(artifact: Artifact) -> dict[str, float]:
    """Split counts per feature (tree models); empty for networks."""
    if artifact.manifest.kind != "lambdamart":
        return {}
    ensemble = TreeEnsemble.from_json_bytes(artifact.files["model.json"])
    counts = np.zeros(ensemble.num_features, dtype=np.int64)
    for tree in ensemble.trees:
        np.add.at(counts, tree.split_feature, 1)
    names = artifact.manifest.feature_names
    return {names[i]: float(c) for i, c in enumerate(counts) if c}


def deployed_artifact(config: NightlyConfig) -> Deployed:
    """CURRENT and its model; a model that does not load is for the gate to judge."""
    registry, name = config.publish.registry, config.model.name
    current = read_current(registry, name)
    if current is None:
        return Deployed(None)
    try:
        return Deployed(current, load_version(registry / name / current))
    except ArtifactError as exc:
        log.warning("deployed model %s/%s does not load (%s)", name, current, exc)
        return Deployed(current, None, f"{name}/{current}: {exc}")


def preflight(config: NightlyConfig, source: str = "nightly config", warn: bool = True) -> None:
    """What would fail only after training (hours on real data), checked before it; errors
    name `source` (the config file) and the key."""
    registry = config.publish.registry
    try:
        registry.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CommandError(
            f"{source}: publish.registry: {registry} is a file, not a directory"
        ) from None
    except OSError as exc:
        raise CommandError(
            f"{source}: publish.registry: cannot create {registry} ({exc.strerror})"
        ) from None
    if not os.access(registry, os.W_OK | os.X_OK):
        raise CommandError(f"{source}: publish.registry: {registry} is not writable")
    # The model's own directory, where the version is installed: read-only, the whole training
    # ran before the install failed (an operations trial).
    model_dir = registry / config.model.name
    if model_dir.is_dir() and not os.access(model_dir, os.W_OK | os.X_OK):
        raise CommandError(f"{source}: publish.registry: {model_dir} is not writable")
    if config.publish.redis_url or os.environ.get("LTR_REDIS_URL"):
        old_version_ttl()  # read when the publish switches the item set, after training
    logs = config.experiment.logs
    missing = bool(logs) and "://" not in str(logs) and not Path(str(logs)).exists()
    # With a model deployed this run may start an experiment; the next one decides it from
    # these logs (with nothing deployed the candidate is simply published).
    if warn and config.experiment.enabled and missing and read_current(registry, config.model.name):
        log.warning(
            "%s: experiment.logs: %s does not exist; the next run reads it to decide the "
            "experiment this run starts",
            source,
            logs,
        )


def _train_on_cluster(
    config: NightlyConfig, out: Path
) -> tuple[Path, RankingDataset, dict[str, Any], dict[str, list[float]]] | None:
    """model.engine = "lightgbm-dask": the workers read and train (trainer.nightly.cluster)."""
    from trainer.nightly.cluster import train_on_cluster

    names = metric_names(config, debiased=False)
    progress = _RecordingProgress(
        config.model.lambdamart.num_trees, metric=names["train"], valid_metric=names["valid"]
    )
    with progress:
        trained = train_on_cluster(
            config, out, lambda log: progress.update(log.iteration, None, log.valid_ndcg)
        )
    if trained is None:
        return None
    history = {"valid": progress.valid_history} if progress.valid_history else {}
    return *trained, history


def run_nightly(config: NightlyConfig) -> NightlyOutcome:
    preflight(config)
    decided = None
    if config.experiment.enabled:
        from trainer.experiments.nightly import decide_running

        decided = decide_running(config)
    version = new_version_id()
    staging = config.work_dir / "candidates"
    staging.mkdir(parents=True, exist_ok=True)
    _remove_stale_candidates(staging)
    on_cluster = None
    if config.model.engine == "lightgbm-dask":
        if config.data.bundled_demo and read_current(config.publish.registry, config.model.name):
            # The demo data is for a first install only (_check_demo_allowed).
            data_cfg = config.data.model_copy(update={"bundled_demo": False})
            config = config.model_copy(update={"data": data_cfg})
        on_cluster = _train_on_cluster(config, staging / version)
        if on_cluster is None:  # no partition yet: the bundled demo data, trained here
            demo_model = config.model.model_copy(update={"engine": "lightgbm"})
            config = config.model_copy(update={"model": demo_model})
    if on_cluster is not None:
        candidate_dir, holdout, summary, history = on_cluster
        metrics = metric_names(config, debiased=False)
    else:
        data = load_data(config)
        holdout, summary = data.holdout, data.summary
        candidate_dir, history = train_candidate(config, data, staging / version)
        metrics = metric_names(config, data.propensities is not None)
    candidate = load_version(candidate_dir)
    expected = None
    if candidate.manifest.kind == "lambdamart":
        from app.scoring.reference import predict

        ensemble = TreeEnsemble.from_json_bytes(candidate.files["model.json"])
        expected = predict(ensemble, holdout.features)
    deployed = deployed_artifact(config)
    gate = run_gate(
        candidate,
        deployed.artifact,
        holdout,
        config.gate,
        expected,
        deployed_error=deployed.error,
    )
    report = {
        "model": config.model.name,
        "version": candidate.manifest.version,
        "engine": config.model.engine,
        "data": summary,
        "gate": gate.to_dict(),
        "history": history,
        "history_metrics": {k: v for k, v in metrics.items() if k in history},
        "feature_importance": feature_importance(candidate),
        "training": candidate.manifest.training,
        "explanations": version_views(candidate, deployed.artifact, holdout),
    }
    if not gate.passed:
        raise _refuse(config, version, candidate_dir, report, gate, deployed.version)
    try:
        write_report(candidate_dir, report)  # beside the artifact; not part of its verified files
    except OSError as exc:  # the work_dir full after hours of training: say where, free it
        shutil.rmtree(candidate_dir, ignore_errors=True)
        raise ArtifactError(
            f"{os_error_text(exc)}; the candidate passed the gate but was not published (removed)"
        ) from None
    # One lock from install to EXPERIMENT: a concurrent publish must not prune the candidate
    # before the experiment that protects it names it.
    with model_lock(config.publish.registry, config.model.name):
        # The gate ran outside the lock (it takes long): another run or a rollback may have
        # moved CURRENT since, and this candidate was not compared with what now serves.
        now = read_current(config.publish.registry, config.model.name)
        if now != deployed.version:
            gate.passed = False
            gate.reasons.append(
                f"the deployed model changed during the run (gated against "
                f"{deployed.version or 'no model'}, CURRENT is now {now or 'no model'}); "
                "not published"
            )
            raise _refuse(config, version, candidate_dir, report, gate, deployed.version)
        try:
            published, experiment = _publish(config, candidate_dir, decided)
        except (ArtifactError, OSError) as exc:
            # Passed the gate, refused at publish (the item set could not be made live in
            # Redis, the registry's disk full): nothing moved; the report goes where refused
            # runs keep theirs (a disk trial found the candidate left among the candidates,
            # its report reading like a published one).
            extra = {"publish_error": str(exc)}
            try:
                refused = _keep_refused(config, version, candidate_dir, report, gate, extra)
            except OSError:  # the work_dir full too: the candidate goes, the error stands
                shutil.rmtree(candidate_dir, ignore_errors=True)
                raise ArtifactError(f"{exc}; nothing published") from None
            raise ArtifactError(f"{exc}; nothing published (report: {refused})") from None
    report_dir = _place_reports(config, candidate_dir, published)
    for warning in published.warnings:
        log.warning("%s", warning)
    shutil.rmtree(candidate_dir, ignore_errors=True)
    return NightlyOutcome(published, gate, report_dir, experiment)


def _place_reports(config: NightlyConfig, candidate_dir: Path, published: PublishResult) -> Path:
    """The reports beside the published version, each renamed into place whole; where the
    registry has no room for them (the version is live by now: a disk trial was told "nothing
    published" for a version serving), they stay under work_dir/published/<version> and a
    warning says so. The directory holding them."""
    try:
        for name in ("report.html", "report.json"):
            partial = published.path / f".{name}.partial"
            try:
                shutil.copy2(candidate_dir / name, partial)
                os.replace(partial, published.path / name)
            finally:
                partial.unlink(missing_ok=True)
        return published.path
    except OSError as exc:
        for name in ("report.html", "report.json"):
            with contextlib.suppress(OSError):
                (published.path / name).unlink(missing_ok=True)  # not one of two reports
        kept = config.work_dir / "published" / published.version
        where = f"kept in {kept}"
        try:
            kept.mkdir(parents=True, exist_ok=True)
            for name in ("report.html", "report.json"):
                os.replace(candidate_dir / name, kept / name)  # a rename: no room needed
        except OSError as keep_exc:
            where = f"lost ({os_error_text(keep_exc)})"
        published.warnings.append(
            f"{published.name} {published.version} is published and serving, but its report "
            f"could not be written beside it ({os_error_text(exc)}): {where}"
        )
        return kept


def _refuse(
    config: NightlyConfig,
    version: str,
    candidate_dir: Path,
    report: dict[str, Any],
    gate: GateResult,
    deployed: str | None,
) -> NightlyRefused:
    """Keep the report under work_dir/refused, drop the candidate: the error to raise."""
    try:
        kept = _keep_refused(config, version, candidate_dir, report, gate)
    except OSError as exc:
        raise ArtifactError(
            f"{os_error_text(exc)}; the gate refused the candidate ({'; '.join(gate.reasons)}); "
            "nothing published, no report kept"
        ) from None
    return NightlyRefused(
        gate.reasons,
        kept,
        name=config.model.name,
        version=version,
        deployed=deployed,
        gate=gate,
    )


# A candidate directory this old was left by a run that was killed (a successful or refused
# run removes its own); younger ones may be another run's, training now.
STALE_CANDIDATE_SECONDS = 24 * 3600


def _remove_stale_candidates(staging: Path) -> None:
    now = time.time()
    for path in staging.iterdir():
        with contextlib.suppress(OSError):
            if path.is_dir() and now - path.stat().st_mtime > STALE_CANDIDATE_SECONDS:
                shutil.rmtree(path)
                log.info("removed %s, the candidate of a run that did not finish", path)


def _keep_refused(
    config: NightlyConfig,
    version: str,
    candidate_dir: Path,
    report: dict[str, Any],
    gate: GateResult,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write the report under work_dir/refused/<version> and drop the candidate; the directory."""
    refused = config.work_dir / "refused" / version
    try:
        write_report(refused, report | {"gate": gate.to_dict()} | (extra or {}))
    except OSError:
        with contextlib.suppress(OSError):
            refused.rmdir()
        raise
    finally:  # kept or not, the candidate goes: a full work_dir must not stay full
        shutil.rmtree(candidate_dir, ignore_errors=True)
    _prune_reports(refused.parent)
    return refused


# Reports of refused runs kept in work_dir (a report is 1-2 MB); older ones are removed. A
# nightly refused every night keeps a month of them; they had no limit at all.
REFUSED_REPORTS_KEPT = 30


def _prune_reports(directory: Path) -> None:
    """Keep the newest REFUSED_REPORTS_KEPT reports (version ids begin with their UTC time)."""
    with contextlib.suppress(OSError):
        reports = sorted(p for p in directory.iterdir() if p.is_dir())
        for old in reports[:-REFUSED_REPORTS_KEPT]:
            shutil.rmtree(old, ignore_errors=True)


def _publish(
    config: NightlyConfig, candidate_dir: Path, decided: dict[str, Any] | None
) -> tuple[PublishResult, dict[str, Any] | None]:
    experimenting = config.experiment.enabled and (
        read_current(config.publish.registry, config.model.name) is not None
    )
    published = publish(
        candidate_dir,
        config.publish.registry,
        keep=config.publish.keep,
        redis_url=config.publish.redis_url or os.environ.get("LTR_REDIS_URL"),
        redis_prefix=config.publish.redis_prefix,
        # With nothing deployed yet there is nothing to compare against: deploy it.
        as_candidate=experimenting,
    )
    if not experimenting:
        return published, None
    from trainer.experiments.nightly import start_for_candidate

    return published, {"decided": decided, "started": start_for_candidate(config, published)}
