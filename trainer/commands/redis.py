"""`ltr redis restore`: put back in Redis what the registry's deployed versions need, after
Redis lost its data (a restart without persistence, FLUSHALL, eviction): docs/OPERATIONS.md,
"When Redis loses its data"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from trainer.commands.errors import CommandError, clear_errors, echo_err
from trainer.commands.options import RedisPrefix

if TYPE_CHECKING:
    from trainer.redis_restore import Restored, RestoreReport

Opt = typer.Option
redis_app = typer.Typer(help="Redis: restore what deployed models need.", no_args_is_help=True)


@redis_app.command("restore")
def restore_command(
    registry: Annotated[Path, Opt(help="Registry root.", envvar="LTR_REGISTRY")] = Path("registry"),
    redis_url: Annotated[
        str | None,
        Opt("--redis-url", help="Redis URL [default: LTR_REDIS_URL].", show_default=False),
    ] = None,
    redis_prefix: RedisPrefix = "ltr:",
    name: Annotated[
        list[str] | None, Opt("--name", help="Only this model (repeatable) [default: every one].")
    ] = None,
    as_json: Annotated[bool, Opt("--json", help="Print one JSON object.")] = False,
) -> None:
    """Put back in Redis what the deployed versions need (after Redis lost its data).

    For every model's CURRENT version (and a running experiment's candidate):
    push its user embeddings and make its item set live (from its snapshot)
    unless Redis holds them intact (a key of the wrong type is replaced),
    then announce.
    Exit 0: done; 2: something could not be restored (all else was)."""
    import redis

    from trainer.commands.features import connect
    from trainer.features.redis_sets import eviction_warning
    from trainer.features.set_retention import old_version_ttl
    from trainer.redis_restore import restore_redis

    with clear_errors(ValueError, redis.RedisError):
        old_version_ttl()  # read at each item set's switch: a bad value is refused first
        url = redis_url or os.environ.get("LTR_REDIS_URL") or None
        with connect(url) as client:
            warning = eviction_warning(client)
        assert url is not None  # connect refuses none
        if warning is not None:
            echo_err(warning)
        if not registry.is_dir():
            raise CommandError(f"{registry}: no such registry directory")
        report = restore_redis(registry, url, redis_prefix, name)
        if not report.versions and not report.missing_models:
            raise CommandError(f"{registry}: no deployed model (no CURRENT) to restore")
    problems = [
        *report.errors,
        *(f"{m}: no such deployed model in {registry}" for m in report.missing_models),
    ]
    if as_json:
        typer.echo(orjson.dumps(_as_json(report, problems, warning)).decode())
    else:
        for restored in report.versions:
            typer.echo(_line(restored))
        announced = ", ".join(report.announced) or "nothing (nothing was restored)"
        typer.echo(f"announced: {announced}")
    for problem in problems:
        echo_err(f"error: {problem}")
    if problems:
        raise typer.Exit(2)


def _line(r: Restored) -> str:
    items = f"item set {r.item_set} {r.item_set_state}" if r.item_set else "no item set"
    embeddings = "no user embeddings" if r.embeddings == "none" else f"embeddings {r.embeddings}"
    notes = "".join(f"; {note}" for note in r.notes)
    return f"{r.model} {r.version} ({r.role}): {embeddings}, {items}{notes}"


def _as_json(report: RestoreReport, problems: list[str], warning: str | None) -> dict[str, object]:
    return {
        "status": "error" if problems else "ok",
        "versions": [
            {
                "model": r.model,
                "version": r.version,
                "role": r.role,
                "embeddings": r.embeddings,
                "item_set": r.item_set,
                "item_set_state": r.item_set_state,
                "notes": r.notes,
                "errors": r.errors,
            }
            for r in report.versions
        ],
        "announced": report.announced,
        "errors": problems,
        "warnings": [] if warning is None else [warning],
        "exit_code": 2 if problems else 0,
    }


def register(app: typer.Typer) -> None:
    app.add_typer(redis_app, name="redis")
