"""The in-process item feature store: a snapshot of an item feature set, memory-mapped.

Two `.npy` files a model version carries (`allow_pickle=False`): `items.npy`, float32
[n_items, n_set_features] C-order, and `item_ids.npy`, the items' ids as a sorted, unique
unicode array [n_items]. A lookup goes through a hash index built at load
(`app.features.item_index`: one or two probes per id, where a binary search over a million
memory-mapped ids touches twenty pages) and one fancy index of the rows. Files of at least
`map_min_bytes` are opened with `mmap_mode="r"`, so a million-item snapshot costs page cache
rather than private memory (the index is private: 4 bytes per slot, two slots per item) and is
shared by every worker on the host; smaller ones are read: a file truncated in place under a
mapping kills the process that reads the pages it lost (SIGBUS), which a copy in memory
survives.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.artifacts.manifest import ItemFeatureSet
from app.errors import LtrError
from app.features.item_index import ItemIndex
from app.features.item_lookup import IdTokens


class SnapshotError(LtrError, ValueError):
    """An item snapshot that cannot be used (names the file)."""


class ItemSnapshot:
    """Rows of one item feature set, by item id."""

    def __init__(
        self,
        ids: np.ndarray,
        matrix: np.ndarray,
        names: Sequence[str],
        version: str | None = None,
    ) -> None:
        self.ids = ids  # unicode [n_items], sorted, unique
        self.matrix = matrix  # float32 [n_items, len(names)]
        self._values = np.asarray(matrix)  # the same memory, indexed without memmap's wrapper
        self.names = list(names)
        # The set version these rows are (a content hash): Redis serving the same version
        # must hold the same rows, so one it lacks is one it lost.
        self.version = version
        self.index = ItemIndex(ids)
        # Whether a file of the registry backs these rows (a write into it reaches them).
        self.mapped = isinstance(matrix, np.memmap) or isinstance(ids, np.memmap)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def load(cls, directory: Path, items: ItemFeatureSet, map_min_bytes: int = 0) -> ItemSnapshot:
        """Open the snapshot files of a (verified) version directory: memory-mapped when at
        least `map_min_bytes` long, else read."""
        if items.matrix_file is None or items.ids_file is None:
            raise SnapshotError(f"{directory}: the model names no item snapshot")
        matrix_path = Path(directory) / items.matrix_file
        ids_path = Path(directory) / items.ids_file
        matrix = _load_npy(matrix_path, map_min_bytes)
        ids = _load_npy(ids_path, map_min_bytes)
        if matrix.dtype != np.float32 or matrix.ndim != 2 or not matrix.flags.c_contiguous:
            raise SnapshotError(f"{matrix_path}: expected a C-order float32 matrix")
        if matrix.shape[1] != len(items.names):
            raise SnapshotError(
                f"{matrix_path}: {matrix.shape[1]} columns, the item set names {len(items.names)}"
            )
        if ids.dtype.kind != "U" or ids.ndim != 1 or ids.shape[0] != matrix.shape[0]:
            raise SnapshotError(f"{ids_path}: expected {matrix.shape[0]} unicode item ids")
        if ids.shape[0] > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            raise SnapshotError(f"{ids_path}: item ids must be sorted and unique")
        return cls(ids, matrix, items.names, items.version)

    def lookup(
        self, ids: Sequence[Any], columns: np.ndarray, tokens: IdTokens | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(float32 [len(ids), len(columns)] with NaN rows for unknown ids, bool found [len(ids)]).

        `columns`: int64 indices into the set's names, in the order the caller wants them;
        `tokens`: the same ids as the body wrote them, for the compiled lookup.
        """
        n = len(ids)
        if n == 0 or len(self) == 0:
            return np.full((n, len(columns)), np.nan, dtype=np.float32), np.zeros(n, dtype=bool)
        rows = self.index.token_rows(tokens) if tokens is not None and tokens.count == n else None
        if rows is None:
            names = [i if type(i) is str else str(i) for i in ids]
            rows = self.index.rows(np.asarray(names, dtype=np.str_))
            # numpy's unicode arrays drop trailing NULs, so "a\x00" would be found as "a"; no
            # stored id ends in one (write_snapshot refuses them).
            for k in (k for k, name in enumerate(names) if name[-1:] == "\x00"):
                rows[k] = -1
        found = rows >= 0
        pos = rows if found.all() else rows[found]
        identity = is_identity(columns, self.matrix.shape[1])
        values = self._values
        if pos.shape[0] == n:  # the usual case: one gather, no mask
            return (values[pos] if identity else values[pos][:, columns]), found
        out = np.full((n, len(columns)), np.nan, dtype=np.float32)
        block = values[pos]
        out[found] = block if identity else block[:, columns]
        return out, found


def write_snapshot(
    directory: Path, ids: Sequence[str], matrix: np.ndarray
) -> tuple[dict[str, Path], int]:
    """Write `items.npy` / `item_ids.npy` into `directory`, rows sorted by id.

    ids: unique strings [n]; matrix: float [n, k]. Returns ({file name: path}, n_items).
    """
    id_list = list(ids)
    for row, name in enumerate(id_list):
        if "\x00" in name:
            raise SnapshotError(f"item id at row {row} ({name!r}) contains a NUL character")
    id_array = np.asarray(id_list, dtype=np.str_)
    values = np.asarray(matrix, dtype=np.float32)
    if id_array.ndim != 1 or values.ndim != 2 or values.shape[0] != id_array.shape[0]:
        raise SnapshotError("item ids and feature rows do not line up")
    order = np.argsort(id_array, kind="stable")
    id_array = id_array[order]
    if id_array.shape[0] > 1:
        dup = np.flatnonzero(id_array[1:] == id_array[:-1])
        if dup.size:
            raise SnapshotError(f"duplicate item id {id_array[dup[0]]!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"items.npy": directory / "items.npy", "item_ids.npy": directory / "item_ids.npy"}
    np.save(files["items.npy"], np.ascontiguousarray(values[order]), allow_pickle=False)
    np.save(files["item_ids.npy"], id_array, allow_pickle=False)
    return files, int(id_array.shape[0])


def _load_npy(path: Path, map_min_bytes: int) -> np.ndarray:
    try:
        mapped = path.stat().st_size >= map_min_bytes
        array = np.load(path, mmap_mode="r" if mapped else None, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{path}: not a readable .npy file ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise SnapshotError(f"{path}: not a single array")
    return array


def is_identity(columns: np.ndarray, width: int) -> bool:
    """Whether `columns` selects all `width` columns in order (no copy needed)."""
    return len(columns) == width and bool(np.all(columns == np.arange(width)))
