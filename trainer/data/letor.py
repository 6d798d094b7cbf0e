"""LETOR/SVMlight text: `label qid:N id:value ... # comment`, or without `qid:` and with
LightGBM's `<file>.query` group file beside it; optional `<file>.user` and `<file>.position`.

Feature ids are 1-based and sparse (an absent id is 0.0, as in SVMlight); `nan` marks a
missing value. Queries must be contiguous.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import first_bad_label, located
from trainer.data.letor_line import LineError, parse_line, strip_comment
from trainer.data.letor_side import read_group_sizes, read_positions, read_user_ids, side_path
from trainer.data.loader import IS_A_DIRECTORY
from trainer.data.sniff import not_letor_text

if TYPE_CHECKING:
    from trainer.data.letor_scan import Scan

_WIDTH_SAMPLE_BYTES = 1 << 16
_WRITE_CHUNK_ROWS = 4096


def read_letor(path: str | Path, num_features: int | None = None) -> RankingDataset:
    """Read a LETOR/SVMlight file into a query-grouped dataset.

    `num_features` forces the width (a test file whose largest id is smaller than the training
    file's still lines up); an id above it is an error. Raises DataFormatError naming the file,
    the line and what is wrong.
    """
    from trainer.data.letor_scan import scan  # compiled on first use (then cached)

    path = Path(path)
    if num_features is not None and num_features < 1:
        raise ValueError(f"num_features must be >= 1, got {num_features}")
    if path.is_dir():
        raise located(path, None, IS_A_DIRECTORY)
    if not path.is_file():
        raise located(path, None, "no such file")
    data = path.read_bytes()
    other = not_letor_text(data)
    if other is not None:
        raise located(path, None, other)
    width = num_features if num_features is not None else _guess_width(path, data)
    found = scan(data, width, num_features or 0)
    n, features = found.n, found.features
    if n == 0:
        raise located(path, 1, "empty file: no data rows")
    max_id = found.max_id
    for row in np.flatnonzero(found.deferred[:n]):
        features, top = _reparse(path, data, features, int(row), found, num_features)
        max_id = max(max_id, top)
    width = num_features if num_features is not None else max_id
    if features.shape[1] != width:
        features = features[:, :width] if features.shape[1] > width else _widen(features, width)
    features = np.ascontiguousarray(features[:n])
    labels, qids, has_qid, line_no = found.labels, found.qids, found.has_qid, found.line_no
    bad_label = first_bad_label(labels[:n])
    if bad_label is not None:
        raise located(path, int(line_no[bad_label[0]]), f"label {bad_label[1]}")
    offsets, query_ids = _groups(path, qids[:n], has_qid[:n], line_no[:n])
    user_path, position_path = side_path(path, ".user"), side_path(path, ".position")
    return RankingDataset(
        features=features,
        labels=labels[:n].copy(),
        group_offsets=offsets,
        query_ids=query_ids,
        source=str(path),
        user_ids=read_user_ids(user_path, offsets.size - 1) if user_path.is_file() else None,
        positions=read_positions(position_path, n) if position_path.is_file() else None,
        source_rows=line_no[:n].astype(np.int64),
    )


def _guess_width(path: Path, data: bytes) -> int:
    """The largest feature id among the first lines, to size the matrix before the scan."""
    width = 1
    for raw in data[:_WIDTH_SAMPLE_BYTES].split(b"\n")[:-1]:
        try:
            parsed = parse_line(strip_comment(raw).decode("utf-8-sig", errors="replace"))
        except LineError:
            continue  # the scan reports it with its line number
        if parsed is not None and parsed.ids:
            width = max(width, *parsed.ids)
    return width


def _widen(features: np.ndarray, width: int) -> np.ndarray:
    wider = np.zeros((features.shape[0], width), dtype=np.float32)
    wider[:, : features.shape[1]] = features
    return wider


def _reparse(
    path: Path,
    data: bytes,
    features: np.ndarray,
    row: int,
    found: Scan,
    num_features: int | None,
) -> tuple[np.ndarray, int]:
    """Parse a line the scanner deferred with the reference parser; (features, largest id)."""
    raw = data[found.line_span[row, 0] : found.line_span[row, 1]]
    try:
        parsed = parse_line(strip_comment(raw).decode("utf-8-sig", errors="replace"), num_features)
    except LineError as exc:
        raise located(path, int(found.line_no[row]), str(exc)) from None
    if parsed is None:  # the scanner saw a byte it does not treat as blank; so be it
        raise located(path, int(found.line_no[row]), "malformed line")
    found.labels[row] = parsed.label
    found.qids[row] = parsed.qid if parsed.qid is not None else 0
    found.has_qid[row] = parsed.qid is not None
    top = max(parsed.ids, default=0)
    if top > features.shape[1]:
        features = _widen(features, max(top, features.shape[1] * 3 // 2 + 1))
    features[row] = 0.0
    if parsed.ids:
        features[row, np.asarray(parsed.ids) - 1] = np.asarray(parsed.values, dtype=np.float32)
    return features, top


def _groups(
    path: Path, qids: np.ndarray, has_qid: np.ndarray, line_no: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(group_offsets int64 [n_queries + 1], query_ids [n_queries]) from `qid:` or `.query`."""
    n = qids.shape[0]
    mixed = np.flatnonzero(has_qid != has_qid[0])
    if mixed.size:
        row = int(mixed[0])
        what = "qid: given but earlier lines have none" if has_qid[row] else "missing qid:"
        raise located(path, int(line_no[row]), what)
    query_path = side_path(path, ".query")
    if not has_qid[0]:
        if not query_path.is_file():
            raise located(path, int(line_no[0]), f"no qid: and no group file {query_path.name}")
        sizes = read_group_sizes(query_path, n)
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), np.arange(sizes.size)
    starts = np.concatenate([[0], np.flatnonzero(qids[1:] != qids[:-1]) + 1])
    run_qids = qids[starts]
    _, first, inverse = np.unique(run_qids, return_index=True, return_inverse=True)
    repeated = np.flatnonzero(first[inverse] != np.arange(run_qids.size))
    if repeated.size:
        run = int(repeated[0])
        seen = int(line_no[starts[first[inverse[run]]]])
        raise located(
            path,
            int(line_no[starts[run]]),
            f"qid {run_qids[run]} reappears after another query (first seen at line {seen}); "
            "queries must be contiguous",
        )
    offsets = np.concatenate([starts, [n]]).astype(np.int64)
    if query_path.is_file() and not np.array_equal(
        read_group_sizes(query_path, n), np.diff(offsets)
    ):
        raise located(query_path, None, "group sizes disagree with the data's qid: column")
    return offsets, run_qids.copy()


def write_letor(dataset: RankingDataset, path: str | Path, significant_digits: int = 9) -> None:
    """Write `label qid:Q id:value ...` (zeros omitted, NaN as `nan`) plus `.user`/`.position`.

    Nine significant digits give back the same float32 values on reading. Query ids are written
    when they are distinct integers, else the query's ordinal. Trailing all-zero columns leave
    no trace in the text: read it back with `num_features`.
    """
    path = Path(path)
    qids = dataset.query_ids
    if not (np.issubdtype(qids.dtype, np.integer) and np.unique(qids).size == qids.size):
        qids = np.arange(dataset.num_queries)
    row_qids = np.repeat(qids, dataset.group_sizes)
    with path.open("w", encoding="utf-8") as handle:
        write_rows(handle, dataset.features, dataset.labels, row_qids, significant_digits)
    if dataset.user_ids is not None:
        side_path(path, ".user").write_text("".join(f"{u}\n" for u in dataset.user_ids))
    if dataset.positions is not None:
        side_path(path, ".position").write_text("".join(f"{p}\n" for p in dataset.positions))


def write_rows(
    handle: TextIO,
    features: np.ndarray,
    labels: np.ndarray,
    row_qids: np.ndarray,
    significant_digits: int = 9,
) -> None:
    """Append rows (features [n, f], labels [n], row_qids [n]) to an open LETOR text file."""
    if not features.shape[0] == labels.shape[0] == row_qids.shape[0]:
        raise ValueError("features, labels and qids must have one entry per row")
    pair = f" %d:%.{significant_digits}g"
    by_count: dict[int, str] = {}
    for begin in range(0, features.shape[0], _WRITE_CHUNK_ROWS):
        block = features[begin : begin + _WRITE_CHUNK_ROWS]
        end = begin + block.shape[0]
        rows, cols = np.nonzero(block != 0)  # NaN is nonzero, so it is written
        counts = np.bincount(rows, minlength=block.shape[0])
        # One %-format of a whole chunk is far faster than formatting row by row: the flat
        # argument list holds each row's label followed by its (id, value) pairs.
        args = np.empty(block.shape[0] + 2 * rows.size, dtype=np.float64)
        slots = 2 * np.arange(rows.size) + rows + 1  # entry e of row r sits after r+1 labels
        args[slots] = cols + 1
        args[slots + 1] = block[rows, cols]
        args[np.arange(block.shape[0]) + 2 * np.concatenate([[0], np.cumsum(counts)[:-1]])] = (
            labels[begin:end]
        )
        template = "".join(
            f"%.17g qid:{q}" + (by_count.get(c) or by_count.setdefault(c, pair * c + "\n"))
            for c, q in zip(counts.tolist(), row_qids[begin:end].tolist(), strict=True)
        )
        handle.write(template % tuple(args.tolist()))
