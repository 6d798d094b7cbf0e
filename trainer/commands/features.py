"""`ltr features`: item feature sets: push to Redis, inspect, diff, roll back.

A source is an item table (`items.parquet`), a model version directory (the snapshot it
carries) or `redis:SET[@VERSION]` (the live version when none is given).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import orjson
import typer

from trainer.commands.errors import CommandError, clear_errors, echo_err, fail
from trainer.commands.json_values import json_value
from trainer.features.report_text import diff_lines, inspect_lines
from trainer.features.set_retention import MAX_OLD_TTL_SECONDS

if TYPE_CHECKING:
    import redis

    from trainer.features.item_table import ItemTable

Opt = typer.Option
features_app = typer.Typer(
    help="Item feature sets: push to Redis, inspect, diff, roll back.", no_args_is_help=True
)
RedisUrl = Annotated[
    str | None, Opt("--redis-url", help="Redis URL [default: LTR_REDIS_URL].", show_default=False)
]
Prefix = Annotated[
    str | None,
    Opt(
        "--redis-prefix",
        "--prefix",  # its first name here; the other commands' is --redis-prefix
        help="Redis key prefix [default: LTR_REDIS_PREFIX or ltr:].",
    ),
]
IdColumn = Annotated[str, Opt(help="Item id column of a Parquet table.")]
AsJson = Annotated[bool, Opt("--json", help="Print one JSON object.")]
OldTtl = Annotated[
    int | None,
    Opt(
        "--old-ttl",
        min=0,
        max=MAX_OLD_TTL_SECONDS,
        envvar="LTR_ITEM_SET_OLD_TTL_SECONDS",
        show_default=False,
        help="Seconds a version switched over (neither live nor kept for a rollback) stays "
        "in Redis; 0 removes it at once [default: LTR_ITEM_SET_OLD_TTL_SECONDS or 86400].",
    ),
]


@features_app.command("push")
def push_command(
    set_name: Annotated[str, Opt("--set", help="Item feature set name.")],
    items: Annotated[Path | None, Opt(help="Item table (Parquet) to push.")] = None,
    model: Annotated[
        Path | None, Opt(help="Push the snapshot a model version directory carries instead.")
    ] = None,
    id_column: IdColumn = "doc_id",
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
    registry: Annotated[
        Path,
        Opt(
            help="Registry root: a warning for each served model that reads this set and "
            "features the table lacks.",
            envvar="LTR_REGISTRY",
        ),
    ] = Path("registry"),
    old_ttl: OldTtl = None,
    as_json: AsJson = False,
) -> None:
    """Write a whole new version, verify it, then switch the live pointer (atomic); the live
    version pushed again is verified and what Redis lost rewritten."""
    from trainer.data.errors import DataFormatError
    from trainer.features.redis_sets import PushError, eviction_warning, push_item_set
    from trainer.features.served_readers import lacking_readers
    from trainer.features.set_keys import check_name

    if (items is None) == (model is None):
        fail("give exactly one of --items FILE or --model VERSION_DIR")
    with clear_errors(DataFormatError, PushError, ValueError, *_redis_errors()):
        check_name("item set", set_name)
        table = _table(items, model, id_column)
        version, reads = _model_set(model)
        warnings = []
        if reads is not None and reads != set_name:
            # The version's snapshot under another name: nothing serving it reads that set.
            warnings.append(
                f"warning: {model} reads item set {reads!r}; this pushes its snapshot as "
                f"{set_name!r}, which that model does not read"
            )
        warnings += lacking_readers(registry, set_name, table.names)
        with connect(redis_url) as client:
            # Said before the push: it may be what makes the push fail.
            warnings += [w for w in (eviction_warning(client),) if w is not None]
            for warning in warnings:
                echo_err(warning)
            result = push_item_set(
                client, _prefix(prefix), set_name, table, version=version, old_ttl=old_ttl
            )
    summary = {
        "set": result.set,
        "version": result.version,
        "previous": result.previous,
        "items": result.items,
        "features": len(table.names),
        "seconds": round(result.seconds, 3),
        "unchanged": result.unchanged,
        "repaired": result.repaired,
        "expiring": result.expired,
        "warnings": warnings,
    }
    if as_json:
        typer.echo(orjson.dumps(summary).decode())
    elif result.unchanged:
        typer.echo(
            f"{set_name}: {result.version} is already live ({result.items} items verified, "
            f"{result.repaired} rewritten)"
        )
    else:
        typer.echo(
            f"{set_name}: {result.version} live ({result.items} items x {len(table.names)} "
            f"features, {result.seconds:.1f} s); was {result.previous or 'none'}"
        )


@features_app.command("inspect")
def inspect_command(
    source: Annotated[
        str, typer.Argument(help="redis:SET[@VERSION], items.parquet or a model dir")
    ],
    sample: Annotated[int, Opt(min=0, help="Items to show.")] = 3,
    id_column: IdColumn = "doc_id",
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
    as_json: AsJson = False,
) -> None:
    """Counts, versions and a sample of items."""
    from trainer.data.errors import DataFormatError
    from trainer.features.redis_sets import PushError

    with clear_errors(DataFormatError, PushError, ValueError, *_redis_errors()):
        if source.startswith("redis:"):
            report = _inspect_redis(source, sample, redis_url, prefix)
        else:
            table = _load_source(source, id_column, redis_url, prefix)
            report = {
                "source": table.source,
                "items": len(table.ids),
                "features": table.names,
                "version": table.version(),
                "missing_values": int(np.isnan(table.matrix).sum()),
                "sample": [
                    _row(str(table.ids[i]), table.matrix[i], table.names)
                    for i in range(min(sample, len(table.ids)))
                ],
            }
    _print(report, as_json, inspect_lines)


@features_app.command("diff")
def diff_command(
    a: Annotated[str, typer.Argument(help="redis:SET[@VERSION], items.parquet or a model dir")],
    b: Annotated[str, typer.Argument(help="the same kinds of source")],
    id_column: IdColumn = "doc_id",
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
    as_json: AsJson = False,
) -> None:
    """What differs between two item feature sets: features, items, values."""
    from trainer.data.errors import DataFormatError
    from trainer.features.item_diff import diff_tables
    from trainer.features.redis_sets import PushError

    with clear_errors(DataFormatError, PushError, ValueError, *_redis_errors()):
        left = _load_source(a, id_column, redis_url, prefix)
        right = _load_source(b, id_column, redis_url, prefix)
        report = diff_tables(left, right)
    _print(report, as_json, diff_lines)
    if report["identical"] is False:
        # As diff(1): 0 the same, 1 different, 2 trouble, so a script can test it.
        if not as_json:
            echo_err("the sets differ")
        raise typer.Exit(1)


@features_app.command("rollback")
def rollback_command(
    set_name: Annotated[str, Opt("--set", help="Item feature set name.")],
    to: Annotated[str, Opt(help="The version to make live again.")],
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
    old_ttl: OldTtl = None,
    as_json: AsJson = False,
) -> None:
    """Point the set back at an earlier version, verified complete (every item, right size)."""
    from trainer.features.redis_sets import PushError, switch_version
    from trainer.features.set_keys import check_name

    with clear_errors(PushError, *_redis_errors()):
        check_name("item set", set_name)
        check_name("version", to)
        with connect(redis_url) as client:
            previous = switch_version(client, _prefix(prefix), set_name, to, old_ttl)
    if as_json:
        typer.echo(orjson.dumps({"set": set_name, "live": to, "previous": previous}).decode())
    else:
        was = "already live" if previous == to else f"was {previous or 'none'}"
        typer.echo(f"{set_name}: {to} live again ({was})")


def _inspect_redis(
    source: str, sample: int, redis_url: str | None, prefix: str | None
) -> dict[str, Any]:
    from app.features.item_redis import meta_key
    from trainer.features.redis_sets import live_version, read_meta, sample_items, versions_key
    from trainer.features.set_keys import item_counts
    from trainer.features.set_retention import version_memory

    set_name, version = _redis_source(source)
    pre = _prefix(prefix)
    with connect(redis_url) as client:
        live = live_version(client, pre, set_name)
        listed = [v.decode() for v in client.zrange(versions_key(pre, set_name), 0, -1)]
        known = sorted(set(listed) | ({live} if live else set()))
        metas = {v: read_meta(client, pre, set_name, v) or {} for v in known}
        # A version whose TTL ran out stays listed until the next switch drops it: gone, it
        # is nothing a rollback can reach (it showed as "- 0 NO"). The live one always shows.
        metas = {v: m for v, m in metas.items() if m or v == live}
        widths = {v: 4 * len(m["names"]) for v, m in metas.items() if m}
        present = item_counts(client, pre, set_name, widths) if widths else {}
        versions = [
            {
                "version": v,
                "live": v == live,
                "items": info.get("count"),
                "items_present": present.get(v, 0),  # keys there and of the right size
                # As rollback checks it: every item's key there, of the right size.
                "complete": bool(info) and present.get(v) == info.get("count"),
                "created_at": info.get("created_at"),
                # Seconds until Redis drops it (pushed or rolled back over); None: kept.
                "expires_in": _expires_in(client, meta_key(pre, set_name, v)),
                # Estimated from a few keys (None where Redis refuses MEMORY USAGE).
                "memory_bytes": version_memory(client, pre, set_name, v, present.get(v, 0)),
            }
            for v, info in metas.items()
        ]
        shown = version or live
        rows: list[dict[str, Any]] = []
        meta = read_meta(client, pre, set_name, shown) if shown else None
        if shown and meta is not None:
            names = list(meta["names"])
            for item_id, raw in sample_items(client, pre, set_name, shown, sample):
                if len(raw) == 4 * len(names):
                    rows.append(_row(item_id, np.frombuffer(raw, dtype="<f4"), names))
    if live is None and not listed:
        raise CommandError(f"no item set {set_name!r} in Redis (prefix {pre!r})")
    if version and meta is None:
        # A mistyped version showed the set's table and no sample, with exit 0.
        have = ", ".join(known) or "none"
        raise CommandError(f"item set {set_name!r} has no version {version!r} (versions: {have})")
    return {
        "set": set_name,
        "live": live,
        "versions": versions,
        "shown": shown,
        "features": None if meta is None else meta["names"],
        "sample": rows,
    }


def _expires_in(client: redis.Redis, key: str) -> int | None:
    ttl = int(client.ttl(key))
    return ttl if ttl >= 0 else None


def _print(
    report: dict[str, Any], as_json: bool, lines: Callable[[dict[str, Any]], list[str]]
) -> None:
    typer.echo(orjson.dumps(report).decode() if as_json else "\n".join(lines(report)))


def _row(item_id: str, values: np.ndarray, names: list[str]) -> dict[str, Any]:
    return {
        "id": item_id,
        "features": {n: json_value(v) for n, v in zip(names, values.tolist(), strict=True)},
    }


def _redis_source(source: str) -> tuple[str, str]:
    """(set, version or "") of `redis:SET[@VERSION]`, both checked as names."""
    from trainer.features.set_keys import check_name

    set_name, _, version = source[len("redis:") :].partition("@")
    check_name("item set", set_name)
    return set_name, check_name("version", version) if version else ""


def _load_source(
    source: str, id_column: str, redis_url: str | None, prefix: str | None
) -> ItemTable:
    from trainer.features.item_table import read_item_table, table_from_version
    from trainer.features.redis_sets import live_version, read_item_set

    if source.startswith("redis:"):
        set_name, version = _redis_source(source)
        with connect(redis_url) as client:
            pre = _prefix(prefix)
            chosen = version or live_version(client, pre, set_name)
            if chosen is None:
                raise CommandError(f"no live version of item set {set_name!r} in Redis")
            return read_item_set(client, pre, set_name, chosen)
    path = Path(source)
    if path.is_dir():
        return table_from_version(path)
    if not path.exists() and not path.suffix:
        # A bare name is more likely a Redis set than a file that is missing.
        raise CommandError(
            f"{source}: no such file or model directory (an item set in Redis is redis:{source})"
        )
    return read_item_table(path, id_column)


def _table(items: Path | None, model: Path | None, id_column: str) -> ItemTable:
    from trainer.features.item_table import read_item_table, table_from_version

    if model is not None:
        return table_from_version(model)
    assert items is not None
    return read_item_table(items, id_column)


def _model_set(model: Path | None) -> tuple[str | None, str | None]:
    """(the set version, the set name) a model version directory's manifest names."""
    if model is None:
        return None, None
    from app.artifacts.store import load_version

    items = load_version(model).manifest.item_features
    return (None, None) if items is None else (items.version, items.set)


def _redis_errors() -> tuple[type[Exception], ...]:
    import redis

    return (redis.RedisError,)


def _prefix(prefix: str | None) -> str:
    return prefix if prefix is not None else os.environ.get("LTR_REDIS_PREFIX", "ltr:")


def connect(redis_url: str | None) -> redis.Redis:
    """A client of `redis_url` (else LTR_REDIS_URL) that answered PING; CommandError naming
    the URL without its password when it is malformed or Redis does not answer."""
    import redis

    url = redis_url or os.environ.get("LTR_REDIS_URL")
    if not url:
        raise CommandError("no Redis: give --redis-url or set LTR_REDIS_URL")
    from trainer.redis_publish import check_redis_url, redacted

    try:
        check_redis_url(url, "--redis-url" if redis_url else "LTR_REDIS_URL")
    except ValueError as exc:  # not a matter of reaching it
        raise CommandError(str(exc)) from None
    client: redis.Redis | None = None
    try:
        client = redis.Redis.from_url(url, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError) as exc:
        what = str(exc)
        given = client is not None and client.get_connection_kwargs().get("password")
        if _asks_for_password(exc) and not given:
            what = "it needs a password (redis://:PASSWORD@host:port/db)"
        raise CommandError(f"cannot reach Redis at {redacted(url)}: {what}") from None
    return client


def _asks_for_password(exc: Exception) -> bool:
    import redis

    text = str(exc)
    # RESP3 (HELLO) and RESP2 (NOAUTH) say it differently.
    return isinstance(exc, redis.AuthenticationError) or text.startswith(("NOAUTH", "HELLO"))


def register(app: typer.Typer) -> None:
    app.add_typer(features_app, name="features")
