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
from trainer.commands.errors import CommandError, clear_errors, echo_err, fail

log = logging.getLogger(__name__)
# A refusal is not an error: the job did its work and kept the deployed model. Its own code
# lets a scheduler tell it from bad input (2) and not retry it (deploy/k8s podFailurePolicy).
EXIT_REFUSED = 3
# The config keys these flags set: an error in a value a flag gave names the flag, not the file.
NIGHTLY_FLAGS = {
    "publish.registry": "--registry (or LTR_REGISTRY)",
    "data.dir": "--data",
    "gate.allow_feature_change": "--allow-feature-change",
    "gate.allow_broken_deployed": "--allow-broken-deployed",
}


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
        # "set@version" made live in Redis before CURRENT moved; or, with no Redis URL, the
        # set the version carries but did not push (services reading Redis keep theirs).
        "item_set": outcome.published.item_set,
        "item_set_not_pushed": outcome.published.item_set_not_pushed,
        "gate": outcome.gate.to_dict(),
        "report": str(outcome.report_dir / "report.html"),
        "data_source": _data_source(outcome.report_dir),
    }


def _data_source(report_dir: Path) -> str | None:
    """What the candidate was trained on, as its report.json records it (the bundled demo
    data, partitions of a directory, logs)."""
    try:
        source = orjson.loads((report_dir / "report.json").read_bytes())["data"]["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(source)


def _refused(exc: Any) -> dict[str, Any]:
    """The `--json` object of a run whose candidate was not published."""
    return {
        "status": "refused",
        "name": exc.name,
        "version": exc.version,
        "previous": exc.deployed,
        "reasons": exc.reasons,
        "gate": None if exc.gate is None else exc.gate.to_dict(),
        "report": str(exc.report_dir / "report.html"),
    }


def summary(result: dict[str, Any]) -> str:
    """What the run did to the registry, in one line: a version installed only as an
    experiment's candidate was not published (CURRENT did not move)."""
    done = f"{result['name']} {result['version']}"
    items = ""
    if result.get("item_set"):
        items = f"; item set {result['item_set']} live in Redis"
    elif result.get("item_set_not_pushed"):
        items = f"; item set {result['item_set_not_pushed']} not pushed to Redis (no Redis URL)"
    if result.get("data_source"):
        done += f" trained on {result['data_source']}"
    if result["status"] == "published":
        previous = result["previous"] or "none"
        return f"published {done} (previous: {previous}{items}; {result['report']})"
    started = (result["experiment"] or {}).get("started")
    role = (
        f"as the candidate of experiment {started['name']}"
        if started is not None
        else "without an experiment (another one still runs)"
    )
    return (
        f"installed {done} {role}; CURRENT stays {result['previous']}{items} ({result['report']})"
    )


def nightly_command(
    config: Annotated[Path | None, typer.Option(help="Nightly config (TOML).")] = None,
    registry: Annotated[
        Path | None, typer.Option(help="Override [publish] registry.", envvar="LTR_REGISTRY")
    ] = None,
    # Text, not a Path: a redis:// URL must reach the config as written (pathlib drops a `/`).
    data_dir: Annotated[
        str | None, typer.Option("--data", help="Override [data] dir (a path or a URL).")
    ] = None,
    bootstrap_demo: Annotated[
        bool,
        typer.Option(
            "--bootstrap-demo",
            help="Only if the registry has no model yet: train and publish a first one, on "
            "the data's partitions when there are some, else on the bundled demo data. "
            "With a model deployed, do nothing.",
        ),
    ] = False,
    allow_feature_change: Annotated[
        bool,
        typer.Option(
            "--allow-feature-change",
            help="Publish a candidate the deployed model cannot be compared with (other "
            "features) for this run (gate.allow_feature_change).",
        ),
    ] = False,
    allow_broken_deployed: Annotated[
        bool,
        typer.Option(
            "--allow-broken-deployed",
            help="Publish even though the deployed model does not load, for this run "
            "(gate.allow_broken_deployed).",
        ),
    ] = False,
    loop: Annotated[bool, typer.Option("--loop", help="Run every day at --at, forever.")] = False,
    at: Annotated[
        str | None,
        typer.Option(help="Local time of the daily run with --loop.", show_default="02:00"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Train, gate against the deployed model, and publish only a candidate that passes.

    Exit codes:
    0 published or installed as a candidate (or nothing to bootstrap);
    3 refused: not published (the gate, or CURRENT moved during the run);
    2 bad input or an expected error: nothing published;
    1 unexpected crash; 130 interrupted (Ctrl-C).
    A refusal leaves the deployed model serving; with --json it prints its summary.
    """
    from trainer.config import ConfigError
    from trainer.data.errors import DataFormatError
    from trainer.nightly.config import load_config
    from trainer.nightly.run import NightlyRefused, preflight

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    overrides: dict[str, Any] = {"publish.registry": registry, "data.dir": data_dir}
    # A flag only turns an opt-in on; left off, the config file decides.
    overrides["gate.allow_feature_change"] = True if allow_feature_change else None
    overrides["gate.allow_broken_deployed"] = True if allow_broken_deployed else None
    expected = (NightlyRefused, ArtifactError, DataFormatError, ConfigError, ValueError)
    if at is not None and not loop:
        # It ran at once and published, the time ignored.
        fail("--at goes with --loop (without it the run is now)")
    at = at or "02:00"
    with clear_errors(*expected):
        cfg = load_config(config, overrides, NIGHTLY_FLAGS)
        # run_nightly's own check, early and with the file's name (its warnings: run_nightly's).
        preflight(cfg, str(config or "nightly config"), warn=False)
        if bootstrap_demo:
            current = read_current(cfg.publish.registry, cfg.model.name)
            if current is not None:
                if as_json:  # one object on stdout, as every --json run prints
                    done = {"status": "nothing_to_bootstrap", "model": cfg.model.name}
                    typer.echo(orjson.dumps({**done, "deployed": current}).decode())
                else:
                    typer.echo(f"{cfg.model.name}: {current} is deployed; nothing to bootstrap")
                return
            cfg = cfg.model_copy(
                update={"data": cfg.data.model_copy(update={"bundled_demo": True})}
            )
        if not loop:
            try:
                result = _run_once(cfg)
            except NightlyRefused as exc:
                if as_json:
                    typer.echo(orjson.dumps(_refused(exc)).decode())
                echo_err(f"refused: {exc}")
                raise typer.Exit(EXIT_REFUSED) from None
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
        except (*expected, CommandError) as exc:
            # One line, as a one-off run's exit 2 or 3: no data yet is expected (a compose
            # trial got a traceback logged as a crash every night).
            echo_err(f"nightly run refused or failed: {exc}")
        except Exception:
            log.exception("nightly run crashed; the deployed model is untouched")


def register(app: typer.Typer) -> None:
    app.command("nightly")(nightly_command)
