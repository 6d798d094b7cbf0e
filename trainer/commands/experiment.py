"""`ltr experiment start|stop|status|report|decide`: online experiments between model versions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import typer

from app.registry.experiments import ExperimentError
from trainer.commands.errors import clear_errors, echo_err, fail
from trainer.commands.options import RedisPrefix

experiment_app = typer.Typer(
    help="Interleaving and A/B experiments between CURRENT and a candidate version.",
    no_args_is_help=True,
)

RegistryOpt = Annotated[Path, typer.Option(help="Registry root.", envvar="LTR_REGISTRY")]
ModelOpt = Annotated[str, typer.Option("--name", help="Model name (as in `ltr publish`).")]
RedisOpt = Annotated[
    str | None, typer.Option(help="Announce changes here.", envvar="LTR_REDIS_URL")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
LogsOpt = Annotated[
    str | None,
    typer.Option(
        help="Impression/feedback logs: a JSONL file, a directory of them, or "
        "redis://host:port/db?prefix=ltr:",
        envvar="LTR_IMPRESSIONS_JSONL",
    ),
]
ExperimentOpt = Annotated[
    str | None, typer.Option("--experiment", help="A past experiment's name (default: running).")
]


def _echo(out: Mapping[str, Any], as_json: bool, text: str) -> None:
    typer.echo(orjson.dumps(out).decode() if as_json else text)


@experiment_app.command("start")
def start_command(
    name: ModelOpt,
    candidate: Annotated[str, typer.Option(help="Version to serve beside CURRENT.")],
    mode: Annotated[
        Literal["interleave", "ab"],
        typer.Option(
            help="interleave: both versions rank every request in it, merged by team draft; "
            "ab: each user (or request) gets one arm."
        ),
    ] = "interleave",
    traffic: Annotated[
        float, typer.Option(help="Share of users (or requests) in it, in (0, 1].")
    ] = 0.1,
    experiment: Annotated[str | None, typer.Option(help="Experiment name.")] = None,
    registry: RegistryOpt = Path("registry"),
    redis_url: RedisOpt = None,
    redis_prefix: RedisPrefix = "ltr:",
    as_json: JsonOpt = False,
) -> None:
    """Serve CANDIDATE beside CURRENT to a stable share of users."""
    from trainer.experiments.lifecycle import start_experiment

    with clear_errors(ExperimentError, ValueError):
        spec = start_experiment(
            registry,
            name,
            candidate,
            mode=mode,
            traffic=traffic,
            name=experiment,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
        )
    _echo(
        spec.model_dump(mode="json"),
        as_json,
        f"started {spec.name}: control {spec.control} vs candidate {spec.candidate} ({spec.mode}, "
        f"{100 * spec.traffic:g} % of traffic)",
    )


@experiment_app.command("stop")
def stop_command(
    name: ModelOpt,
    reason: Annotated[str, typer.Option(help="Why (kept in the record).")] = "stopped by hand",
    registry: RegistryOpt = Path("registry"),
    redis_url: RedisOpt = None,
    redis_prefix: RedisPrefix = "ltr:",
    as_json: JsonOpt = False,
) -> None:
    """Stop the running experiment; CURRENT serves alone again. An EXPERIMENT file services
    refuse (corrupt, edited by hand) is removed, and the model's records still running are
    marked stopped."""
    from trainer.experiments.stopping import stop_experiment

    with clear_errors(ExperimentError, ValueError):
        stopped = stop_experiment(
            registry, name, reason, redis_url=redis_url, redis_prefix=redis_prefix
        )
    lines = []
    if stopped.removed is not None:
        lines.append(f"removed {stopped.removed}, which services refused: {stopped.refused}")
    lines += [f"stopped {record.spec.name}" for record in stopped.records]
    if len(stopped.records) == 1 and stopped.removed is None:
        out = stopped.records[0].model_dump(mode="json")  # as before: the one record
    else:
        out = {
            "removed": None if stopped.removed is None else str(stopped.removed),
            "refused": stopped.refused,
            "stopped": [record.model_dump(mode="json") for record in stopped.records],
        }
    _echo(out, as_json, "\n".join(lines))


@experiment_app.command("status")
def status_command(
    registry: RegistryOpt = Path("registry"),
    as_json: JsonOpt = False,
) -> None:
    """Every experiment in the registry and its state (paused: CURRENT is not its control;
    refused: services do not serve it, and why), and EXPERIMENT files services refuse."""
    from trainer.experiments.status import registry_status

    if not registry.is_dir():  # a mistyped path read as "no experiments", exit 0
        fail(f"{registry}: no such registry directory")
    status = registry_status(registry)
    _echo(status.to_json(), as_json, "\n".join(status.lines()) or "no experiments")


def _load(registry: Path, name: str, experiment: str | None, logs: str | None):  # type: ignore[no-untyped-def]
    from app.registry.experiments import find_record
    from trainer.clicks.logs import read_logs, truncated_warnings
    from trainer.experiments.analysis import analyse
    from trainer.experiments.credit import credit_from_logs
    from trainer.experiments.lifecycle import running_experiment

    if logs is None:
        fail("give --logs (the service's impression log: JSONL file, directory or Redis URL)")
    spec_name = experiment or running_experiment(registry, name).name
    record = find_record(registry, spec_name)
    if record.spec.model != name:
        raise ExperimentError(f"experiment {spec_name!r} belongs to model {record.spec.model!r}")
    read = read_logs(logs)
    for warning in truncated_warnings(read):  # a trial: skipped silently here, unlike dataset
        echo_err(warning)
    analysis = analyse(credit_from_logs(read, record.spec))
    return record, analysis


@experiment_app.command("report")
def report_command(
    name: ModelOpt,
    logs: LogsOpt = None,
    experiment: ExperimentOpt = None,
    html: Annotated[
        Path | None, typer.Option(help="Write the HTML page (with the plot) here.")
    ] = None,
    registry: RegistryOpt = Path("registry"),
    as_json: JsonOpt = False,
) -> None:
    """Impressions, wins/losses/ties, preference with its CI and tests, and a plot."""
    from trainer.data.errors import DataFormatError
    from trainer.experiments.lifecycle import pause_reason
    from trainer.experiments.report import report_json, summary_lines, write_html

    with clear_errors(ExperimentError, DataFormatError, ValueError):
        record, analysis = _load(registry, name, experiment, logs)
        paused = pause_reason(registry, record.spec) if record.status == "running" else None
        if html is not None:
            write_html(html, record, analysis, paused)
    text = "\n".join(summary_lines(record, analysis, paused))
    if html is not None:
        text += f"\nplot: {html}"
    _echo(report_json(record, analysis, paused), as_json, text)


@experiment_app.command("decide")
def decide_command(
    name: ModelOpt,
    logs: LogsOpt = None,
    min_impressions: Annotated[
        int, typer.Option(min=1, help="Decide nothing before this many impressions.")
    ] = 1000,
    alpha: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Significance: act when the always-valid p < it."),
    ] = 0.05,
    ab_metric: Annotated[
        Literal["clicks", "dcg"],
        typer.Option(help="A/B: compare clicks per impression, or the clicks' DCG."),
    ] = "clicks",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say, do not act.")] = False,
    registry: RegistryOpt = Path("registry"),
    redis_url: RedisOpt = None,
    redis_prefix: RedisPrefix = "ltr:",
    as_json: JsonOpt = False,
) -> None:
    """Promote the candidate if it wins significantly, roll it back if it loses."""
    from trainer.data.errors import DataFormatError
    from trainer.experiments.decision import DecisionPolicy
    from trainer.experiments.run_decision import apply_decision

    with clear_errors(ExperimentError, DataFormatError, ValueError):
        policy = DecisionPolicy(min_impressions=min_impressions, alpha=alpha, ab_metric=ab_metric)
        record, analysis = _load(registry, name, None, logs)
        decision = apply_decision(
            registry,
            record.spec,
            analysis,
            policy,
            dry_run=dry_run,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
        )
    out = {"experiment": record.spec.name, "dry_run": dry_run, **decision.to_json()}
    _echo(out, as_json, f"{record.spec.name}: {decision.action} — {decision.reason}")


def register(app: typer.Typer) -> None:
    app.add_typer(experiment_app, name="experiment")
