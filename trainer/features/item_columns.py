"""The columns of an item table, checked: item ids as text, feature names, feature values as
float32. Every refusal names the file and the column, and the row where one is at fault."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer.data.errors import DataFormatError
from trainer.data.float32 import BEYOND_FLOAT32, to_float32
from trainer.data.parquet import RESERVED, is_numeric

if TYPE_CHECKING:
    import pyarrow as pa


def _at(path: Path, row: int | None, column: str, what: str) -> DataFormatError:
    where = f"row {row}, column {column!r}" if row is not None else f"column {column!r}"
    return DataFormatError(f"{path}: {where}: {what}")


def _first(mask: np.ndarray) -> int:
    """1-based row of the first True."""
    return int(np.flatnonzero(mask)[0]) + 1


def item_ids(path: Path, table: pa.Table, id_column: str) -> np.ndarray:
    """The ids as a unicode array (an integer id 17 is the item "17")."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(id_column)
    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if not (pa.types.is_integer(kind) or _is_text(kind)):
        # A float id cast to text named items "1", "0.5", "1e+20" and "nan" (a NaN is no
        # null): ids a request's "1.0" or 1e20 never meets. Booleans, dates: no better.
        raise _at(path, None, id_column, f"has type {kind}, expected text or integers")
    if column.null_count:
        row = _first(column.is_null().to_numpy(zero_copy_only=False))
        raise _at(path, row, id_column, "null item id")
    try:
        text = pc.cast(column, pa.string())
    except pa.ArrowNotImplementedError:
        raise _at(
            path, None, id_column, f"has type {column.type}, expected text or integers"
        ) from None
    except pa.ArrowInvalid as exc:
        raise _not_text(path, column, id_column, exc) from None
    nul = pc.match_substring(text, "\x00").to_numpy(zero_copy_only=False)
    if nul.any():
        # numpy's unicode arrays drop trailing NULs: "a\x00" would silently become "a".
        raise _at(path, _first(nul), id_column, "item id contains a NUL character")
    return np.asarray(text.to_numpy(zero_copy_only=False), dtype=np.str_)


def _is_text(kind: pa.DataType) -> bool:
    import pyarrow as pa

    return any(
        check(kind)
        for check in (
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_string_view,
        )
    )


def _not_text(path: Path, column: pa.ChunkedArray, id_column: str, exc: Exception) -> Exception:
    for row, value in enumerate(column.to_pylist(), start=1):
        if isinstance(value, bytes):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return _at(path, row, id_column, f"item id {value!r} is not valid UTF-8 text")
    return _at(path, None, id_column, f"cannot be read as text ({str(exc).splitlines()[0]})")


def check_feature_names(path: Path, names: list[str]) -> None:
    for name in names:
        if not name:
            raise _at(path, None, name, "an empty column name cannot name a feature")
        if name in RESERVED:
            reserved = ", ".join(RESERVED)
            raise _at(
                path, None, name, f"is reserved by the training data format ({reserved}); rename it"
            )


def feature_values(path: Path, table: pa.Table, name: str) -> np.ndarray:
    """The column as float32 (null → NaN); a finite number float32 cannot hold is refused
    rather than served as ±inf (an infinity written in the file stays one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    kind = column.type
    if not is_numeric(kind):
        raise _at(path, None, name, f"has type {kind}, expected a number")
    wide = np.asarray(pc.cast(column, pa.float64(), safe=False).fill_null(np.nan).to_numpy())
    values, overflow = to_float32(wide)
    if overflow.any():
        row = _first(overflow)
        raise _at(path, row, name, f"{wide[row - 1]:g} {BEYOND_FLOAT32}")
    return values
