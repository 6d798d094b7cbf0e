"""`ltr publish`: install a version into the registry and deploy it, or roll back."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from app.artifacts.store import ArtifactError
from trainer.commands.errors import clear_errors, echo_err, fail
from trainer.commands.options import RedisPrefix

if TYPE_CHECKING:  # imported when the command runs: `ltr --help` stays quick
    from trainer.publish import ItemSetUnreachable


def publish_command(
    model: Annotated[
        Path | None, typer.Option("--model", help="Version directory to publish (ltr train --out).")
    ] = None,
    registry: Annotated[Path, typer.Option(help="Registry root.", envvar="LTR_REGISTRY")] = Path(
        "registry"
    ),
    name: Annotated[str | None, typer.Option(help="Model name (default: the manifest's).")] = None,
    keep: Annotated[int, typer.Option(min=1, help="Versions to keep per model.")] = 5,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Point CURRENT back at the previous version.")
    ] = False,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="With --rollback: the installed version to go back to (when HISTORY cannot "
            "say which came before, after an older ltr moved CURRENT).",
        ),
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option(help="Push embeddings and announce here.", envvar="LTR_REDIS_URL")
    ] = None,
    redis_prefix: RedisPrefix = "ltr:",
    candidate: Annotated[
        bool,
        typer.Option(
            "--candidate",
            help="Install the version without moving CURRENT, for `ltr experiment start`.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Publish a trained version (atomic install, embeddings to Redis, CURRENT, announce)."""
    from trainer.features.set_retention import old_version_ttl
    from trainer.publish import (
        ItemSetUnreachable,
        experiment_pause_warning,
        publish,
        roll_back,
        rollback_warnings,
    )
    from trainer.redis_publish import check_redis_url

    with clear_errors(ArtifactError, ValueError), _without_redis_hint(ItemSetUnreachable, model):
        redis_url = redis_url or os.environ.get("LTR_REDIS_URL") or None
        if redis_url is not None:
            check_redis_url(redis_url)  # before anything is installed or moved
            old_version_ttl()  # read when an item set is switched: its error comes first
        if rollback:
            if model is not None or candidate:
                fail("--rollback takes --name, not --model or --candidate")
            if name is None:
                fail("--rollback needs --name")
            done = roll_back(registry, name, redis_url=redis_url, redis_prefix=redis_prefix, to=to)
            old, new = done.previous, done.version
            out: dict[str, object] = {"name": name, "from": old, "to": new}
            label = _restored_item_set(registry / name / new)
            out["item_set"] = label if redis_url else None
            out["item_set_not_pushed"] = None if redis_url else label
            out["redis_pushed"] = done.redis_pushed
            out["announced"] = done.announced
            for warning in (
                *rollback_warnings(registry, name, old, new),
                experiment_pause_warning(registry, name, new),
            ):
                if warning is not None:
                    echo_err(warning)
            if label is not None and not redis_url:
                echo_err(_not_pushed_note(label, registry / name / new))
            if not done.announced:
                echo_err(_polling_note(redis_url))
        else:
            if to is not None:
                fail("--to goes with --rollback")
            if model is None:
                fail("give --model DIR (a version directory) or --rollback --name NAME")
            res = publish(
                model,
                registry,
                name=name,
                keep=keep,
                redis_url=redis_url,
                redis_prefix=redis_prefix,
                as_candidate=candidate,
            )
            out = {
                "name": res.name,
                "version": res.version,
                "previous": res.previous,
                "path": str(res.path),
                "removed": res.removed,
                "redis_pushed": res.redis_pushed,
                "announced": res.announced,
                "item_set": res.item_set,
                "item_set_not_pushed": res.item_set_not_pushed,
                "warnings": res.warnings,
                "candidate": candidate,
                "repaired": res.repaired is not None,
                "repaired_reason": res.repaired,
            }
            if res.repaired is not None:
                echo_err(
                    f"note: repaired {res.path}: the installed copy did not verify "
                    f"({res.repaired}); replaced it with the copy from {model}"
                )
            for warning in res.warnings:
                echo_err(warning)
            if res.item_set_not_pushed is not None:
                echo_err(_not_pushed_note(res.item_set_not_pushed, res.path))
    if as_json:
        typer.echo(orjson.dumps(out).decode())
    elif rollback:
        typer.echo(f"{out['name']}: CURRENT {out['from']} -> {out['to']}{_item_set_part(out)}")
    elif candidate:
        typer.echo(
            f"installed {out['name']} {out['version']} as a candidate; CURRENT stays "
            f"{out['previous'] or 'none'} (start it: ltr experiment start --name {out['name']} "
            f"--candidate {out['version']}{_registry_option(registry)}){_item_set_part(out)}"
        )
    else:
        typer.echo(
            f"published {out['name']} {out['version']} (previous: {out['previous'] or 'none'})"
            f"{_item_set_part(out)}"
        )


def _polling_note(redis_url: str | None) -> str:
    why = "no --redis-url" if redis_url is None else "Redis could not be reached"
    return (
        f"note: not announced on Redis ({why}): services switch at their next registry poll "
        "(LTR_RELOAD_POLL_SECONDS, 5 s by default)"
    )


@contextmanager
def _without_redis_hint(
    unreachable: type[ItemSetUnreachable], model: Path | None
) -> Iterator[None]:
    """Redis down stops a deploy that must make an item set live: the error line says how to
    deploy without it, rather than leaving the operator to find out."""
    try:
        yield
    except unreachable as exc:
        # A refused publish removes the copy it installed: the set is pushed from the source.
        source = shlex.quote(str(model if model is not None else exc.path))
        fail(
            f"{exc}; to deploy without Redis, run the command again without --redis-url and "
            "with LTR_REDIS_URL unset: the version is installed and CURRENT moves, services "
            "that read items from Redis keep the set's live version there, and "
            f"`ltr features push --set {exc.set_name} --model {source}` pushes the set once "
            "Redis is back"
        )


def _item_set_part(out: dict[str, object]) -> str:
    """The item set made live in Redis, for the one-line summary: the models' and the shared
    set's versions move together, and an operator should see both."""
    return f"; item set {out['item_set']} live in Redis" if out.get("item_set") else ""


def _restored_item_set(version_dir: Path) -> str | None:
    """The `set@version` a rolled-back-to version was trained with (None: no item set), which
    a rollback with a Redis URL made live again. The rollback verified the version; its
    manifest alone says which set."""
    from app.artifacts.manifest import Manifest
    from app.artifacts.store import MANIFEST_FILE

    items = Manifest.model_validate_json((version_dir / MANIFEST_FILE).read_bytes()).item_features
    return None if items is None else f"{items.set}@{items.version}"


def _registry_option(registry: Path) -> str:
    """` --registry PATH` unless `ltr experiment start` would find this registry by itself
    (the same LTR_REGISTRY, else ./registry)."""
    if registry == Path(os.environ.get("LTR_REGISTRY") or "registry"):
        return ""
    return f" --registry {shlex.quote(str(registry))}"


def _not_pushed_note(label: str, path: Path) -> str:
    """An operator who meant the set to go to Redis learns it did not, and how to push it."""
    set_name = label.split("@", 1)[0]
    return (
        f"note: item set {label} was not pushed to Redis (no --redis-url): services that read "
        f"items from Redis (LTR_REDIS_URL set) keep serving the set's live version there, "
        f"services without Redis this version's in-process snapshot; push it with "
        f"`ltr features push --set {set_name} --model {path}` or publish with --redis-url"
    )


def register(app: typer.Typer) -> None:
    app.command("publish")(publish_command)
