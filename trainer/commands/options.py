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
