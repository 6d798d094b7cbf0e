"""Each row remembers where it was read (LETOR line, Parquet row), so a check after reading
(what LightGBM refuses) names the place as the readers do."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.data.letor import read_letor
from trainer.data.parquet import read_parquet


def test_letor_rows_keep_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("# header\n1 qid:1 1:0.5\n\n0 qid:1 1:0.2\n# note\n2 qid:2 1:0.1\n")
    data = read_letor(path)
    np.testing.assert_array_equal(data.source_rows, [2, 4, 6])
    assert data.place(2) == f"{path}:6"
    assert data.place(1) == f"{path}:4"
    sub = data.subset_queries(np.array([1, 0]))
    np.testing.assert_array_equal(sub.source_rows, [6, 2, 4])
    assert sub.place(0) == f"{path}:6"


def test_parquet_rows_keep_their_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"qid": [1, 1, 2], "label": [1.0, 0.0, 2.0], "f": [0.1, 0.2, 0.3]}), path
    )
    data = read_parquet(path)
    np.testing.assert_array_equal(data.source_rows, [1, 2, 3])
    assert data.place(1) == f"{path}: row 2, column 'label'"
    assert data.place(2, "qid") == f"{path}: row 3, column 'qid'"
