"""Command-line options that several commands share, as `Annotated` aliases."""

from __future__ import annotations

from typing import Annotated

import typer

ItemsIdColumn = Annotated[
    str | None,
    typer.Option(
        "--items-id-column",
        help="The --items table's id column when it is not named like the data's document id "
        "column (as `ltr train --items-id-column`).",
    ),
]
# `--prefix` too: the `ltr features` commands named it so, the others `--redis-prefix`.
RedisPrefix = Annotated[
    str,
    typer.Option(
        "--redis-prefix",
        "--prefix",
        envvar="LTR_REDIS_PREFIX",
        help="Prefix of every Redis key, as the service's LTR_REDIS_PREFIX.",
    ),
]
