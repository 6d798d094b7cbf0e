"""`ltr dataset --from-logs`: the service's impression + feedback logs → Parquet training data
(train.parquet, valid.parquet: qid, label, position, user_id, features) split by time, and
propensities.json (examination probability per position, EM under the position-based model)."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from trainer.commands.errors import CommandError, clear_errors, echo_err, fail
from trainer.data.errors import MAX_LABEL, DataFormatError
from trainer.staged_dir import staged_dir

Opt = typer.Option
LABELS = "Labels"


def parse_time(text: str) -> float:
    """Unix seconds, or an ISO 8601 time (UTC unless it names a zone)."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):  # float() takes "nan" and "inf": no time to cut at
            fail(f"--valid-after {text!r}: expected Unix seconds or an ISO 8601 time")
        return seconds
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        fail(f"--valid-after {text!r}: expected Unix seconds or an ISO 8601 time")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


SOURCED_NOTE = (
    "note: {model}'s query and item-store features are plain columns here; a model trained "
    'on this by hand asks clients for all of them. `ltr nightly` with source = "logs" keeps '
    "the deployed version's feature sources and item set."
)


def manifest_names(path: Path) -> tuple[list[str], str, bool]:
    """(feature names, model name, whether some features come from the query or the item
    store) of a version directory or its manifest.json."""
    from pydantic import ValidationError

    from app.artifacts.manifest import Manifest

    file = path / "manifest.json" if path.is_dir() else path
    try:
        manifest = Manifest.model_validate_json(file.read_bytes())
    except FileNotFoundError:
        raise CommandError(f"{file}: no such file") from None
    except ValidationError as exc:
        raise CommandError(f"{file}: not a valid manifest ({exc.error_count()} errors)") from None
    return list(manifest.feature_names), manifest.name, manifest.has_sources


def dataset_command(
    from_logs: Annotated[
        str, Opt("--from-logs", help="JSONL log file, directory of them, or redis://...?prefix=")
    ],
    out: Annotated[Path, Opt("--out", help="Directory to write (created if absent).")],
    valid_after: Annotated[
        str | None, Opt(help="Lists served after this time (Unix s or ISO 8601) validate.")
    ] = None,
    valid_fraction: Annotated[
        float | None, Opt(help="The latest fraction of lists validate (default 0.2).")
    ] = None,
    manifest: Annotated[
        Path | None,
        Opt(
            help=(
                "Model version dir (or manifest.json): names the feature columns and keeps "
                "only impressions with that many features, served by the manifest's model "
                "name (unless --model or --all-models says otherwise)."
            ),
            show_default="none",
        ),
    ] = None,
    model: Annotated[
        str | None,
        Opt(
            help="Only impressions served by this model name.",
            show_default="the manifest's model name, else every model",
        ),
    ] = None,
    all_models: Annotated[
        bool,
        Opt(
            "--all-models",
            help="Impressions of every model name, also with --manifest.",
            show_default="off",
        ),
    ] = False,
    click: Annotated[float, Opt(rich_help_panel=LABELS, help="Grade of a clicked result.")] = 1.0,
    purchase: Annotated[
        float, Opt(rich_help_panel=LABELS, help="Grade of a purchased result.")
    ] = 2.0,
    dwell: Annotated[
        float,
        Opt(rich_help_panel=LABELS, help="Grade of a result dwelt on --dwell-seconds or more."),
    ] = 1.0,
    dwell_seconds: Annotated[
        float, Opt(rich_help_panel=LABELS, help="Shortest dwell that counts.")
    ] = 30.0,
    propensities: Annotated[
        bool, Opt(help="Estimate examination per position (EM) into propensities.json.")
    ] = True,
    as_json: Annotated[bool, Opt("--json", help="Print one JSON object.")] = False,
) -> None:
    """Join impression and feedback logs into query-grouped Parquet with a time-based split."""
    from trainer.clicks.join import LabelRules, join_logs, split_by_time
    from trainer.clicks.logs import read_logs, truncated_warnings
    from trainer.clicks.position_variation import position_variation
    from trainer.data.parquet import write_parquet

    if valid_after is not None and valid_fraction is not None:
        fail("give --valid-after or --valid-fraction, not both")
    if all_models and model is not None:
        fail("give --model or --all-models, not both")
    cutoff = None if valid_after is None else parse_time(valid_after)
    fraction = 0.2 if cutoff is None and valid_fraction is None else valid_fraction
    if out.exists() and not out.is_dir():
        fail(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        # It was written over: another run's propensities.json stayed beside the new data.
        fail(
            f"--out {out}: not empty (a dataset is never written over another: give a new "
            "directory)"
        )
    for flag, grade in (("--click", click), ("--purchase", purchase), ("--dwell", dwell)):
        if not 0 <= grade <= MAX_LABEL:  # NaN fails too
            fail(f"{flag} {grade:g}: a relevance grade 0..{MAX_LABEL}, as training data takes")
    if not 0 <= dwell_seconds < math.inf:
        fail(f"--dwell-seconds {dwell_seconds:g}: a number of seconds >= 0")
    rules = LabelRules(click=click, purchase=purchase, dwell=dwell, dwell_seconds=dwell_seconds)
    with clear_errors(DataFormatError, ValueError, OSError), contextlib.ExitStack() as stack:
        names, model_name, sourced = manifest_names(manifest) if manifest else (None, None, False)
        logs = read_logs(from_logs)
        for warning in truncated_warnings(logs):
            echo_err(warning)
        wanted = None if all_models else (model or model_name)
        try:
            joined = join_logs(logs, names, rules, wanted)
            train, valid = split_by_time(joined, valid_after=cutoff, valid_fraction=fraction)
        except ValueError as exc:  # about what the logs hold: name them
            raise ValueError(f"{from_logs}: {exc}") from None
        staging = stack.enter_context(staged_dir(out))  # renamed into place at the end
        write_parquet(train.dataset, staging / "train.parquet")
        write_parquet(valid.dataset, staging / "valid.parquet")
        summary: dict[str, Any] = {
            "out": str(out),
            **joined.stats,
            "lines_truncated": len(logs.truncated),
            "truncated_at": logs.truncated,
            "skipped": joined.skipped,
            "train_lists": train.dataset.num_queries,
            "train_rows": train.dataset.num_docs,
            "valid_lists": valid.dataset.num_queries,
            "valid_rows": valid.dataset.num_docs,
            "train_until": float(train.times[-1]),
            "valid_from": float(valid.times[0]),
        }
        if propensities:
            summary["propensities"] = _propensities(train.dataset, staging / "propensities.json")
            summary["propensities"]["file"] = str(out / "propensities.json")
            variation = position_variation(logs.impressions)
            summary["propensities"]["position_variation"] = variation.to_json()
            if (confounded := variation.warning()) is not None:
                echo_err(f"warning: {confounded}")
    if sourced:
        echo_err(SOURCED_NOTE.format(model=model_name))
    if as_json:
        typer.echo(orjson.dumps(summary).decode())
        return
    typer.echo(
        f"wrote {summary['train_lists']:,} train lists ({summary['train_rows']:,} rows) and "
        f"{summary['valid_lists']:,} valid lists to {out}"
    )
    if joined.skipped:
        typer.echo(f"left out {summary['impressions_skipped']:,} impressions: {joined.skipped}")
    if summary["feedback_orphans"]:
        typer.echo(
            f"dropped {summary['feedback_orphans']:,} feedback events: "
            f"{summary['feedback_orphans_no_impression']:,} for requests with no kept impression, "
            f"{summary['feedback_orphans_not_served']:,} for candidates the request did not serve"
        )
    if propensities:
        theta = ", ".join(f"{t:.3f}" for t in summary["propensities"]["theta"][:10])
        typer.echo(f"examination by position (relative to 1): {theta}")
        if (randpair := summary["propensities"].get("randpair")) is not None:
            answers = sum(randpair["explored_answers"])
            known = randpair["positions"]
            typer.echo(
                f"from {answers:,} explored answers: positions 1-{known} by their swaps"
                if known >= 2
                else f"{answers:,} explored answers, too few clicks for a ratio: EM alone"
            )


def _propensities(train: Any, path: Path) -> dict[str, Any]:
    from trainer.clicks.propensity import estimate_from_dataset, write_propensities
    from trainer.lambdamart.unbiased import fit_power_discount

    estimate = estimate_from_dataset(train)
    extra: dict[str, Any] = {}
    with contextlib.suppress(ValueError):  # too few clicks to fit: training falls back to theta
        extra["ctr_power_eta"] = round(fit_power_discount(estimate.ctr, estimate.impressions), 6)
    write_propensities(path, estimate, **extra)
    note = estimate.pooling_note()
    if note is not None:
        echo_err(f"warning: {note}")
    return {**estimate.to_json(), **extra, "file": str(path)}


def register(app: typer.Typer) -> None:
    app.command("dataset")(dataset_command)
