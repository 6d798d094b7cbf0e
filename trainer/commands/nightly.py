"""`ltr nightly`: the retrain-and-deploy job a scheduler runs every night."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from app.artifacts.store import ArtifactError, read_current
from trainer.commands.errors import clear_errors, echo_err

log = logging.getLogger(__name__)


def seconds_until(at: str, now: dt.datetime) -> float:
    """Seconds from `now` to the next local wall-clock time `at` ("HH:MM")."""
    try:
        hour, minute = (int(x) for x in at.split(":"))
        target = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:
        raise ValueError(f"--at expects HH:MM, got {at!r}") from None
    if target <= now:
        target += dt.timedelta(days=1)
    return (target - now).total_seconds()


def _run_once(config: Any) -> dict[str, Any]:
    from trainer.nightly.run import run_nightly

    outcome = run_nightly(config)
    return {
        "status": "published" if outcome.experiment is None else "candidate",
        "experiment": outcome.experiment,
        "name": outcome.published.name,
        "version": outcome.published.version,
        "previous": outcome.published.previous,
        "warnings": outcome.published.warnings,
        "gate": outcome.gate.to_dict(),
        "report": str(outcome.report_dir / "report.html"),
    }


def summary(result: dict[str, Any]) -> str:
    """What the run did to the registry, in one line: a version installed only as an
    experiment's candidate was not published (CURRENT did not move)."""
    done = f"{result['name']} {result['version']}"
    if result["status"] == "published":
        return f"published {done} (previous: {result['previous']}; {result['report']})"
    started = (result["experiment"] or {}).get("started")
    role = (
        f"as the candidate of experiment {started['name']}"
        if started is not None
        else "without an experiment (another one still runs)"
    )
    return f"installed {done} {role}; CURRENT stays {result['previous']} ({result['report']})"


def nightly_command(
    config: Annotated[Path | None, typer.Option(help="Nightly config (TOML).")] = None,
    registry: Annotated[
        Path | None, typer.Option(help="Override [publish] registry.", envvar="LTR_REGISTRY")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option("--data", help="Override [data] dir.")] = None,
    bootstrap_demo: Annotated[
        bool,
        typer.Option(
            "--bootstrap-demo",
            help="Only if the registry has no model yet: train one on the bundled demo data.",
        ),
    ] = False,
    loop: Annotated[bool, typer.Option("--loop", help="Run every day at --at, forever.")] = False,
    at: Annotated[str, typer.Option(help="Local time of the daily run with --loop.")] = "02:00",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Train, gate against the deployed model, and publish only a candidate that passes."""
    from trainer.config import ConfigError
    from trainer.data.errors import DataFormatError
    from trainer.nightly.config import load_config
    from trainer.nightly.run import NightlyRefused

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    overrides = {"publish.registry": registry, "data.dir": data_dir}
    expected = (NightlyRefused, ArtifactError, DataFormatError, ConfigError, ValueError)
    with clear_errors(*expected):
        cfg = load_config(config, overrides)
        if bootstrap_demo:
            current = read_current(cfg.publish.registry, cfg.model.name)
            if current is not None:
                typer.echo(f"{cfg.model.name}: {current} is deployed; nothing to bootstrap")
                return
            cfg = cfg.model_copy(
                update={"data": cfg.data.model_copy(update={"bundled_demo": True})}
            )
        if not loop:
            result = _run_once(cfg)
            if as_json:
                typer.echo(orjson.dumps(result).decode())
            else:
                typer.echo(summary(result))
            return
        seconds_until(at, dt.datetime.now())  # validate --at before the first sleep
    while True:
        wait = seconds_until(at, dt.datetime.now())
        log.info("next nightly run in %.0f s (at %s)", wait, at)
        time.sleep(wait)
        try:
            result = _run_once(cfg)
            log.info("%s", summary(result))
        except expected as exc:
            echo_err(f"nightly run refused or failed: {exc}")
        except Exception:
            log.exception("nightly run crashed; the deployed model is untouched")


def register(app: typer.Typer) -> None:
    app.command("nightly")(nightly_command)
