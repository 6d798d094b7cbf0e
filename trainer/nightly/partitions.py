"""Finding the newest date partitions of the training data and splitting them without leakage."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.commands.errors import CommandError
from trainer.data.dataset import RankingDataset

DATE_IN_NAME = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})")
DATA_SUFFIXES = {".txt", ".letor", ".svm", ".parquet", ".pq", ".train", ".test"}
log = logging.getLogger(__name__)


def _hidden(name: str) -> bool:
    """Dot-files are uploads in progress and editor or sync leftovers; `_SUCCESS`,
    `_temporary/` and the like are Spark's and Hadoop's bookkeeping, never data."""
    return name.startswith((".", "_"))


@dataclass(frozen=True)
class Partition:
    date: dt.date
    files: list[Path]


def _date_of(name: str) -> dt.date | None:
    match = DATE_IN_NAME.search(name)
    if not match:
        return None
    try:
        return dt.date(*(int(g) for g in match.groups()))
    except ValueError:
        return None


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix in DATA_SUFFIXES else []
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.suffix in DATA_SUFFIXES
        and not any(_hidden(part) for part in p.relative_to(path).parts)
    )


def find_partitions(root: Path, newest: int) -> list[Partition]:
    """The newest `newest` dated partitions under `root`, oldest first."""
    if not root.is_dir():
        raise CommandError(f"{root}: training data directory does not exist")
    by_date: dict[dt.date, list[Path]] = {}
    entries: dict[dt.date, list[str]] = {}
    for entry in sorted(root.iterdir()):
        date = _date_of(entry.name)
        if date is None or _hidden(entry.name):
            continue
        files = _data_files(entry)
        by_date.setdefault(date, []).extend(files)
        if files:
            entries.setdefault(date, []).append(entry.name)
    dated = [Partition(d, files) for d, files in sorted(by_date.items()) if files]
    chosen = dated[-newest:]
    for part in chosen:
        # Still read (a day may be split on purpose), but a copy such as `2026-11-22.bak/`
        # beside `2026-11-22/` would count that day twice.
        if len(entries[part.date]) > 1:
            log.warning(
                "%s: partition %s is assembled from %d entries: %s",
                root,
                part.date,
                len(entries[part.date]),
                ", ".join(entries[part.date]),
            )
    return chosen


def query_hash_fraction(query_ids: np.ndarray) -> np.ndarray:
    """A stable pseudo-random number in [0, 1) per query id (same id → same number, any run)."""
    out = np.empty(len(query_ids), dtype=np.float64)
    for i, qid in enumerate(query_ids):
        digest = hashlib.blake2b(str(qid).encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") / 2.0**64
    return out


def split_by_query_hash(
    data: RankingDataset, fraction: float, salt: str = ""
) -> tuple[RankingDataset, RankingDataset]:
    """(rest, held) where `held` has about `fraction` of the queries, chosen by query-id hash."""
    ids = np.array([f"{salt}{q}" for q in data.query_ids], dtype=object)
    held = query_hash_fraction(ids) < fraction
    if held.all() or not held.any():  # tiny data: still give both sides a query
        held = np.zeros(data.num_queries, dtype=bool)
        held[-max(1, round(fraction * data.num_queries)) :] = True
    if held.all():
        raise CommandError(f"{data.source}: too few queries ({data.num_queries}) to split")
    return data.subset_queries(np.flatnonzero(~held)), data.subset_queries(np.flatnonzero(held))


def find_url_partitions(url: str, newest: int) -> list[tuple[dt.date, list[str]]]:
    """As `find_partitions`, for Parquet partitions at a path or fsspec URL, listed where this
    runs (a Dask worker, for the cluster engine): the newest `newest` (date, file URLs), oldest
    first."""
    import fsspec

    from trainer.data.parquet_files import PARQUET_SUFFIXES, list_parquet_files

    fs, root = fsspec.core.url_to_fs(url)
    if not fs.isdir(root):
        raise CommandError(f"{url}: training data directory does not exist (seen from the cluster)")
    by_date: dict[dt.date, list[str]] = {}
    for entry in fs.ls(root, detail=True):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        date = _date_of(name)
        if date is None or name.startswith((".", "_")):
            continue
        is_parquet = entry["type"] == "file" and name.lower().endswith(PARQUET_SUFFIXES)
        if entry["type"] == "directory" or is_parquet:
            found = list_parquet_files(fs.unstrip_protocol(entry["name"]))
            by_date.setdefault(date, []).extend(found)
    dated = [(d, sorted(files)) for d, files in sorted(by_date.items()) if files]
    return dated[-newest:]
