"""What every training-data reader refuses, each with the file and the line (or row and
column): labels beyond the grades 0..31, finite features float32 cannot hold, Parquet without
feature columns, files that are not LETOR text at all, and long bad tokens quoted in full."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data.errors import DataFormatError
from trainer.data.letor import read_letor
from trainer.data.loader import load_dataset
from trainer.data.parquet import read_parquet
from trainer.data.parquet_files import read_rows

GOOD = "1 qid:1 1:0.5 2:0.25\n"
LABEL_CAP = r"is above 31: relevance labels are grades 0\.\.31 \(gain 2\^label - 1; XGBoost"
FLOAT32 = r"is beyond the range of float32 \(about ±3\.4e38\), the type features are kept in"


def letor(tmp_path: Path, text: str | bytes, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def parquet(tmp_path: Path, name: str = "d.parquet", **columns: list[object]) -> Path:
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


def read_all_rows(path: Path, features: list[str]) -> object:
    """The multi-file (Dask) reader, run in-process on the whole file."""
    return read_rows((str(path), 0, pq.read_metadata(path).num_rows), features)


# 1. Labels: gain 2^label - 1 overflows float64 from 1024 (a 0-tree model with NaN metrics).


@pytest.mark.parametrize("label", ["32", "1024", "31.5", "1e300"])
def test_letor_refuses_labels_above_31(tmp_path: Path, label: str) -> None:
    path = letor(tmp_path, GOOD + f"{label} qid:1 1:1\n")
    with pytest.raises(DataFormatError, match=r"data\.txt:2: label \S+ " + LABEL_CAP):
        read_letor(path)


def test_letor_keeps_labels_0_to_31(tmp_path: Path) -> None:
    data = read_letor(letor(tmp_path, "31 qid:1 1:1\n0 qid:1 1:2\n4.5 qid:2 1:1\n"))
    assert data.labels.tolist() == [31.0, 0.0, 4.5]


def test_parquet_refuses_labels_above_31(tmp_path: Path) -> None:
    path = parquet(tmp_path, qid=[1, 1, 2], label=[31, 1024, 0], f=[1.0, 2.0, 3.0])
    message = r"d\.parquet: row 2, column 'label': 1024 " + LABEL_CAP
    with pytest.raises(DataFormatError, match=message):
        read_parquet(path)
    ok = parquet(tmp_path, "ok.parquet", qid=[1], label=[31], f=[1.0])
    assert read_parquet(ok).labels.tolist() == [31.0]


def test_parquet_files_refuse_labels_above_31(tmp_path: Path) -> None:
    path = parquet(tmp_path, qid=[1, 1, 2], label=[0.0, 2.0, 40.0], f=[1.0, 2.0, 3.0])
    message = r"d\.parquet: row 3, column 'label': 40 " + LABEL_CAP
    with pytest.raises(DataFormatError, match=message):
        read_all_rows(path, ["f"])


def test_negative_labels_are_still_refused_first_come_first_served(tmp_path: Path) -> None:
    path = letor(tmp_path, GOOD + "-1 qid:1 1:1\n99 qid:1 1:1\n")
    with pytest.raises(DataFormatError, match=r"data\.txt:2: label -1 is negative"):
        read_letor(path)


# 2. Parquet with no feature column crashed training on a pydantic validation error.


def test_parquet_without_feature_columns(tmp_path: Path) -> None:
    path = parquet(tmp_path, qid=[1, 1, 2], label=[1, 0, 2], position=[1, 2, 1])
    message = r"^\S*d\.parquet: no feature columns \(columns: qid, label, position\)"
    with pytest.raises(DataFormatError, match=message):
        read_parquet(path)
    with pytest.raises(DataFormatError, match=message):
        load_dataset(path)


def test_parquet_with_only_an_id_column_waits_for_the_item_table(tmp_path: Path) -> None:
    path = parquet(tmp_path, qid=[1, 1], label=[1, 0], doc_id=["a", "b"])
    data = read_parquet(path, id_column="doc_id")
    assert data.num_features == 0 and data.doc_ids is not None


# 3. Finite features beyond float32's range became inf silently.


@pytest.mark.parametrize(
    # 1e400 and -1e999 are past float64's range too: read as ±inf, they were kept (a held-out
    # trial), while 1e39 was refused.
    "value",
    ["1e40", "-1e39", "340282366920938463463374607431768211456", "3.5e38", "1e400", "-1e999"],
)
def test_letor_refuses_finite_values_beyond_float32(tmp_path: Path, value: str) -> None:
    path = letor(tmp_path, GOOD + f"0 qid:1 1:1 2:{value}\n")
    message = rf"data\.txt:2: value '{value}' of feature 2 " + FLOAT32
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's 'overflow encountered in cast' is gone too
        with pytest.raises(DataFormatError, match=message):
            read_letor(path)


def test_letor_keeps_inf_nan_and_float32s_largest_value(tmp_path: Path) -> None:
    path = letor(tmp_path, "0 qid:1 1:inf 2:-inf 3:nan 4:3.4028235e38 5:-3.4028235e38\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = read_letor(path).features[0]
    big = np.finfo(np.float32).max
    assert row[:2].tolist() == [np.inf, -np.inf] and np.isnan(row[2])
    assert row[3:].tolist() == [big, -big]


def test_parquet_refuses_finite_values_beyond_float32(tmp_path: Path) -> None:
    path = parquet(tmp_path, qid=[1, 1], label=[1, 0], f=[1.0, float("inf")], g=[0.0, -1e300])
    message = r"d\.parquet: row 2, column 'g': -1e\+300 " + FLOAT32
    with pytest.raises(DataFormatError, match=message):
        read_parquet(path)
    with pytest.raises(DataFormatError, match=message):
        read_all_rows(path, ["f", "g"])


def test_parquet_keeps_written_infinities(tmp_path: Path) -> None:
    path = parquet(tmp_path, qid=[1, 1], label=[1, 0], f=[float("inf"), float("nan")])
    assert read_parquet(path).features[0, 0] == np.inf
    frame = read_all_rows(path, ["f"])
    assert frame["f"].iloc[0] == np.inf  # type: ignore[index]


# 4. A 5,000-character token was printed whole in the error.


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("1 qid:" + "x" * 5000 + " 1:1\n", r"qid 'x{40}'… \(5,000 characters\) is not an integer"),
        ("1 qid:" + "9" * 5000 + " 1:1\n", r"qid 9{40}… \(5,000 characters\) does not fit in 64"),
        ("y" * 5000 + " qid:1 1:1\n", r"label 'y{40}'… \(5,000 characters\) is not a number"),
        ("1 qid:1 " + "z" * 5000 + "\n", r"malformed token 'z{40}'… \(5,000 characters\)"),
        ("1 qid:1 1:" + "v" * 5000 + "\n", r"value 'v{40}'… \(5,000 characters\) of feature 1"),
        ("1 qid:1 " + "8" * 5000 + ":1\n", r"feature id 8{40}… \(5,000 characters\) is too large"),
    ],
)
def test_long_tokens_are_cut_in_errors(tmp_path: Path, line: str, what: str) -> None:
    with pytest.raises(DataFormatError, match=r"data\.txt:2: " + what) as caught:
        read_letor(letor(tmp_path, GOOD + line))
    assert len(str(caught.value)) < 300


def test_long_parquet_qids_are_cut_in_errors(tmp_path: Path) -> None:
    long = "q" * 5000
    path = parquet(tmp_path, qid=[long, "b", long], label=[1, 0, 1], f=[1.0, 2.0, 3.0])
    message = r"d\.parquet: row 3, column 'qid': qid q{40}… \(5,000 characters\) reappears"
    with pytest.raises(DataFormatError, match=message) as caught:
        read_parquet(path)
    assert len(str(caught.value)) < 300


# 5. Files that are not LETOR text at all failed on their first token.


def test_gzip_file_is_not_letor_text(tmp_path: Path) -> None:
    path = letor(tmp_path, gzip.compress((GOOD * 3).encode()), "train.txt.gz")
    message = r"train\.txt\.gz: gzip-compressed: decompress it \(gunzip\); this is not LETOR text$"
    with pytest.raises(DataFormatError, match=message):
        read_letor(path)
    with pytest.raises(DataFormatError, match=message):
        load_dataset(path)


@pytest.mark.parametrize(
    "text",
    [
        "qid,label,f1,f2\n1,2,0.5,0.25\n",
        "# exported\n1,2,0.5,0.25\n",
        '"qid","label","f1"\n',
    ],
)
def test_csv_is_not_letor_text(tmp_path: Path, text: str) -> None:
    path = letor(tmp_path, text, "train.csv")
    message = (
        r"train\.csv: looks like CSV \(commas, no id:value tokens\), not LETOR text: "
        r"convert it to Parquet with qid, label and feature columns$"
    )
    with pytest.raises(DataFormatError, match=message):
        load_dataset(path)


def test_cr_line_endings_are_named(tmp_path: Path) -> None:
    path = letor(tmp_path, GOOD.replace("\n", "\r") * 3)
    with pytest.raises(DataFormatError, match=r"data\.txt: lines end in CR alone, not LF: conv"):
        read_letor(path)


def test_parquet_named_as_text_is_named(tmp_path: Path) -> None:
    path = parquet(tmp_path, "train.txt", qid=[1], label=[1], f=[1.0])
    with pytest.raises(DataFormatError, match=r"train\.txt: a Parquet file: name it \.parquet"):
        load_dataset(path)


@pytest.mark.parametrize(
    "text",
    [
        "1 qid:1 1:1\r\n0 qid:1 2:1\r\n",  # CRLF
        "1 qid:1 1:1\r",  # one line, a trailing CR
        "1 qid:1 1:1 # a comment, with commas\n",
        "# a, b, c\n1 qid:1 1:1\n",
    ],
)
def test_letor_text_is_still_read(tmp_path: Path, text: str) -> None:
    assert read_letor(letor(tmp_path, text)).features[0, 0] == 1.0


def test_the_cluster_reader_refuses_fractional_labels_where_lightgbm_trains_on_them(
    tmp_path: Path,
) -> None:
    """The Dask engine's fractional labels were refused by LightGBM on the workers, with a
    message naming no file; the native engine and evaluation take them."""
    path = parquet(tmp_path, qid=[1, 1, 2], label=[1, 2.5, 0], f=[1.0, 2.0, 3.0])
    span = (str(path), 0, 3)
    assert read_rows(span, ["f"])["label"].tolist() == [1.0, 2.5, 0.0]
    with pytest.raises(
        DataFormatError,
        match=r"d\.parquet: row 2, column 'label': label 2\.5 is not a whole grade: "
        r"--engine lightgbm-dask \(LightGBM's lambdarank\) takes whole grades 0\.\.31",
    ):
        read_rows(span, ["f"], whole_labels=True)
