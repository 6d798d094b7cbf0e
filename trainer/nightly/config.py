"""The nightly job's configuration file (TOML): where data is, what to train, the gate, where to
publish. Every section is optional; every key with its default: docs/OPERATIONS.md ("The
nightly config, key by key"); deploy/nightly.toml is a commented example."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from app.artifacts.manifest import NAME_PATTERN
from trainer.commands.errors import CommandError
from trainer.dnn.options import DNNOptions
from trainer.lambdamart.params import LambdaMARTParams
from trainer.metrics.report import ranking_report
from trainer.toml_lines import at_key, key_line


def _quality_metrics() -> tuple[str, ...]:
    """The ranking-quality keys of `ranking_report`, read off one tiny report so the list
    follows the report; its `queries` / `documents` counts say nothing about quality."""
    report = ranking_report(np.zeros(1), np.ones(1), np.array([0, 1], dtype=np.int64))
    return tuple(k for k in report if k not in {"queries", "documents"})


GATE_METRICS = _quality_metrics()
# `scheme://...`: a URL, kept as text (pathlib folds `//` into `/`: redis:/host:6379/0).
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
LOG_URL_SCHEMES = ("redis://", "rediss://", "unix://")  # what trainer.clicks.logs reads


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Section):
    # source = "files": a directory of LETOR text or Parquet files. Partitions are files or
    # sub-directories whose name holds a date (YYYY-MM-DD or YYYYMMDD); the newest `partitions`
    # are used. source = "logs": a JSONL file, a directory of them, or a redis:// URL. A URL
    # stays text; anything else is a path (relative: to the working directory).
    dir: Path | str = Path("data")
    source: Literal["files", "logs"] = "files"
    partitions: int = Field(7, ge=1)
    # With two or more partitions the newest one is the held-out set (time split, no leakage);
    # with one, `holdout_fraction` of its queries (chosen by a hash of the query id) are.
    holdout_fraction: float = Field(0.2, gt=0, lt=1)
    valid_fraction: float = Field(0.1, gt=0, lt=1)  # of the training queries, for early stopping
    bundled_demo: bool = False  # use the bundled demo data when `dir` holds no partition
    # source = "logs": how the clicks' position bias is removed (`ltr train --debias`; "none"
    # trains on raw clicks). The examination curve is estimated (EM) on the training part, and
    # validation and holdout are scored with IPW labels, so neither early stopping nor the gate
    # favours the ranking that was served.
    debias: Literal["none", "ipw", "pairwise", "position-bias", "click-model"] = "click-model"
    # model.engine = "lightgbm-dask": where the Dask workers find the dated Parquet partitions
    # (a path they see or an fsspec URL: s3://bucket/clicks, gs://..., hdfs://...); default:
    # `dir`. The workers list and read them; this process reads only the held-out partition.
    url: str | None = None

    @field_validator("dir", mode="before")
    @classmethod
    def _url_or_path(cls, value: object) -> object:
        if isinstance(value, str) and not URL.match(value):
            return Path(value)
        return value

    @property
    def path(self) -> Path:
        """`dir` as a local directory (a URL is refused for it at load: NightlyConfig)."""
        return Path(self.dir)


class DaskConfig(_Section):
    """model.engine = "lightgbm-dask": the cluster that reads the data and trains."""

    scheduler: str | None = None  # e.g. "tcp://dask-scheduler:8786"
    # The port LightGBM's network listens on, on every worker machine (one worker per machine:
    # a firewalled cluster opens just it); None: free ports LightGBM picks at random.
    listen_port: int | None = Field(None, ge=1, le=65535)
    partition_rows: int = Field(262_144, ge=1)  # files are cut at query starts into about this


class ModelConfig(_Section):
    # The registry directory's name: checked here, not when the trained model is published.
    name: str = Field("default", pattern=NAME_PATTERN)
    engine: Literal["native", "lightgbm", "lightgbm-dask", "dnn"] = "native"
    lambdamart: LambdaMARTParams = Field(
        default_factory=lambda: LambdaMARTParams(num_trees=300, early_stopping_rounds=30)
    )
    dnn: DNNOptions = Field(default_factory=DNNOptions)


class GateConfig(_Section):
    # Default: ndcg@10; dcg@10 for debiased click logs, whose holdout has IPW labels (an unbiased
    # estimate of DCG needs no per-query normaliser: clicks.ipw_eval).
    metric: str | None = None
    # The candidate may be `tolerance + relative_tolerance * |deployed value|` below the deployed
    # model. Defaults: 0.002 and 0; for debiased click logs 0 and 0.01, since IPW DCG is not on
    # NDCG's [0, 1] scale.
    tolerance: float = Field(0.002, ge=0)
    relative_tolerance: float = Field(0.0, ge=0)
    rescore_tolerance: float = Field(1e-6, ge=0)  # relative, exported vs trained scores
    # Fail closed: a deployed model that cannot score the held-out rows (other feature
    # columns) or does not load refuses the candidate, unless the operator opts in here (or
    # with `ltr nightly --allow-feature-change` / `--allow-broken-deployed`) for one run.
    allow_feature_change: bool = False
    allow_broken_deployed: bool = False

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str | None) -> str | None:
        # Checked at load: an unknown key used to fail only after hours of training.
        if value is not None and value not in GATE_METRICS:
            raise ValueError(f"{value!r} is not one of {', '.join(GATE_METRICS)}")
        return value


class PublishConfig(_Section):
    registry: Path = Path("registry")
    keep: int = Field(5, ge=1)
    redis_url: str | None = None
    redis_prefix: str = "ltr:"


class FeaturesConfig(_Section):
    """Feature sources (as `ltr train --features-spec`): query-level columns of the data and
    an item table joined by document id. The published version carries the item set, and
    `publish` makes it live in Redis before CURRENT moves."""

    query: list[str] = Field(default_factory=list)
    items: Path | None = None  # Parquet item table; the data must be Parquet with `id_column`
    item_set: str = Field("items", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    id_column: str = "doc_id"
    items_id_column: str | None = None  # the item table's id column; unset: id_column


class ExperimentConfig(_Section):
    """Online experiment instead of a straight deploy (docs/EXPERIMENTS.md): a model that
    passes the gate is installed as the candidate of an experiment beside CURRENT, and each
    run first decides the running experiment from the service's logs."""

    enabled: bool = False
    mode: Literal["interleave", "ab"] = "interleave"
    traffic: float = Field(0.1, gt=0, le=1)
    # The impression/feedback logs: JSONL file, directory of them, or redis://...?prefix=ltr:
    logs: str | None = None
    min_impressions: int = Field(1000, ge=1)
    alpha: float = Field(0.05, gt=0, lt=1)
    ab_metric: Literal["clicks", "dcg"] = "clicks"

    @model_validator(mode="after")
    def _needs_logs(self) -> ExperimentConfig:
        if self.enabled and not self.logs:
            raise _KeysError(
                "enabled", "experiment.enabled needs experiment.logs (the service's logs)"
            )
        return self


class NightlyConfig(_Section):
    data: DataConfig = Field(default_factory=DataConfig)
    features: FeaturesConfig = Field(default_factory=FeaturesConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    dask: DaskConfig = Field(default_factory=DaskConfig)
    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig)
    work_dir: Path = Path("var/nightly")  # staging area for candidates and rejected reports

    @model_validator(mode="after")
    def _debiased_logs(self) -> NightlyConfig:
        data = self.data
        debiased = data.source == "logs" and data.debias != "none"
        if debiased and self.model.engine != "native":
            raise _KeysError(
                "data.debias",
                f"data.debias = {data.debias!r} trains with the native engine only; "
                f"set model.engine = 'native' or data.debias = 'none'",
            )
        if self.model.engine == "lightgbm-dask":
            if not self.dask.scheduler:
                raise _KeysError(
                    "model.engine", 'model.engine = "lightgbm-dask" needs dask.scheduler'
                )
            if data.source != "files":
                raise _KeysError(
                    "data.source", 'model.engine = "lightgbm-dask" reads data.source = "files"'
                )
        _check_data_url(self)
        if self.gate.metric is None:
            self.gate.metric = "dcg@10" if debiased else "ndcg@10"
        chosen = self.gate.model_fields_set
        if debiased and not chosen & {"tolerance", "relative_tolerance"}:
            self.gate.tolerance, self.gate.relative_tolerance = 0.0, 0.01
        return self


class _KeysError(ValueError):
    """A check across keys, naming the key whose line the error points at."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = tuple(key.split("."))


def _check_data_url(config: NightlyConfig) -> None:
    """A URL in `data.dir` only where something reads one: the logs' Redis, or the Dask
    workers' fsspec (s3://, gs://, ...)."""
    url = config.data.dir
    if not isinstance(url, str):
        return
    scheme = url.split("://", 1)[0] + "://"  # not the whole URL: it may hold a password
    if config.data.source == "logs":
        if not url.startswith(LOG_URL_SCHEMES):
            raise _KeysError(
                "data.dir",
                f"data.dir is a {scheme} URL: the logs are read from a JSONL file or "
                f"directory, or a {', '.join(LOG_URL_SCHEMES)} URL",
            )
    elif config.model.engine != "lightgbm-dask":
        raise _KeysError(
            "data.dir",
            f"data.dir is a {scheme} URL: data.source = 'files' reads a local directory "
            "(a URL is read by data.source = 'logs' (redis://) or model.engine = "
            "'lightgbm-dask' (s3://, gs://, ...))",
        )


def load_config(
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    flags: dict[str, str] | None = None,
) -> NightlyConfig:
    """The config at `path` with `overrides` (dotted key -> value; None: not given), whose
    errors name the command-line flag (`flags`: dotted key -> flag) that set the value."""
    raw: dict[str, Any] = {}
    text: str | None = None
    if path is not None:
        try:
            # utf-8-sig: editors on Windows start a file with a byte-order mark.
            text = Path(path).read_bytes().decode("utf-8-sig")
            raw = tomllib.loads(text)
        except FileNotFoundError:
            raise CommandError(f"{path}: no such config file") from None
        except OSError as exc:
            raise CommandError(f"{path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text") from None
        except tomllib.TOMLDecodeError as exc:
            raise CommandError(f"{path}: {exc}") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    given = {k: flag for k, flag in (flags or {}).items() if (overrides or {}).get(k) is not None}
    try:
        return NightlyConfig.model_validate(raw)
    except ValidationError as exc:
        raise CommandError(_config_error(exc, path, text, overrides or {}, given)) from None


def _config_error(
    exc: ValidationError,
    path: Path | None,
    text: str | None,
    overrides: dict[str, Any],
    flags: dict[str, str],
) -> str:
    """`file:line: key: what is wrong` for the first error (no line for a key the file does
    not write; the flag instead of the file for one the command line set); a check across
    keys names its keys itself."""
    first = exc.errors()[0]
    loc: tuple[str | int, ...] = tuple(first["loc"])
    error = first.get("ctx", {}).get("error")
    if isinstance(error, _KeysError):
        loc = (*loc, *error.key)
    dotted = ".".join(map(str, loc))
    known = None if overrides.get(dotted) is not None else text
    # `--data s3://...` was reported as the config file's data.dir.
    source = flags.get(dotted) or path or "nightly config"
    if isinstance(error, _KeysError):
        line = None if known is None else key_line(known, loc)
        return f"{source}{'' if line is None else f':{line}'}: {error}"
    return f"{at_key(source, known, loc)}: {first['msg']}"
