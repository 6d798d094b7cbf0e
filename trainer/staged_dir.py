"""Output directories written whole or not at all.

A command writes into a hidden directory beside its `--out`, renamed into place once every
file is in: a run stopped part-way (Ctrl-C, SIGTERM, a full disk) leaves `--out` as it was,
where a cut train.txt had been taken for a dataset by `ltr train` (a held-out trial)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_dir(out: Path) -> Iterator[Path]:
    """A new, empty directory to write `out`'s files into: on leaving the block it replaces
    `out` (whose old contents, if any, are removed); on an exception it is removed and `out`
    is left as it was."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f".{out.name}.writing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if not out.exists():
        staging.rename(out)
        return
    replaced = parent / f".{out.name}.replaced-{os.getpid()}"
    out.rename(replaced)
    staging.rename(out)
    shutil.rmtree(replaced, ignore_errors=True)
