"""LETOR/SVMlight reader: values, groups, side files and every error with its line number."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from trainer.data.errors import DataFormatError
from trainer.data.letor import read_letor

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"


def write(tmp_path: Path, text: str, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_reads_sparse_rows_comments_and_groups(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a header comment\n"
        "2 qid:7 1:0.5 3:-1.25e1 # docid = a\n"
        "\n"
        "0 qid:7 2:nan\r\n"
        "1 qid:3 3:4 1:.5 # unsorted ids are accepted\n",
    )
    data = read_letor(path)
    nan = math.nan
    expected = np.array([[0.5, 0, -12.5], [0, nan, 0], [0.5, 0, 4]], dtype=np.float32)
    np.testing.assert_array_equal(data.features, expected)
    assert data.features.dtype == np.float32 and data.features.flags.c_contiguous
    np.testing.assert_array_equal(data.labels, [2.0, 0.0, 1.0])
    assert data.labels.dtype == np.float64
    np.testing.assert_array_equal(data.group_offsets, [0, 2, 3])
    assert data.group_offsets.dtype == np.int64
    np.testing.assert_array_equal(data.query_ids, [7, 3])
    assert data.feature_names is None and data.user_ids is None and data.positions is None
    assert data.source == str(path)


def test_values_match_python_float_on_every_path(tmp_path: Path) -> None:
    # Short decimals take the compiled fast path; long mantissas, huge exponents and inf are
    # re-parsed by the reference parser. Both must give float32(float(text)).
    texts = ["0.1", "-7", "+.5", "5.", "1e-30", "3.4e38", "0.12345678901234567", "inf", "1E5"]
    body = "".join(f"1 qid:1 1:{t}\n" for t in texts)
    data = read_letor(write(tmp_path, body))
    expected = np.array([float(t) for t in texts]).astype(np.float32)
    np.testing.assert_array_equal(data.features[:, 0], expected)


def test_num_features_forces_width(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 2:3\n0 qid:1 1:1\n")
    data = read_letor(path, num_features=5)
    assert data.features.shape == (2, 5)
    np.testing.assert_array_equal(data.features[0], [0, 3, 0, 0, 0])
    with pytest.raises(DataFormatError, match=r"data\.txt:1: feature id 2 exceeds num_features=1"):
        read_letor(path, num_features=1)
    with pytest.raises(ValueError, match="num_features"):
        read_letor(path, num_features=0)


def test_width_grows_past_the_first_lines(tmp_path: Path) -> None:
    # The width guessed from the first 64 KiB must grow when a later line has a larger id.
    head = "0 qid:1 1:1\n" * 7000
    data = read_letor(write(tmp_path, head + "1 qid:1 400:2.5\n"))
    assert data.features.shape == (7001, 400)
    assert data.features[-1, 399] == np.float32(2.5) and data.features[:-1, 1:].sum() == 0


def test_width_grows_several_times_on_both_paths(tmp_path: Path) -> None:
    head = "0 qid:1 1:1\n" * 7000
    tail = "1 qid:1 5:5\n1 qid:1 50:50\n1 qid:1 900:9 30:3\n1 qid:1 400:4\n"  # 3rd: unsorted
    data = read_letor(write(tmp_path, head + tail))
    assert data.features.shape == (7004, 900)
    rows = data.features[7000:]
    assert [(r, c, float(rows[r, c])) for r, c in zip(*np.nonzero(rows), strict=True)] == [
        (0, 4, 5.0), (1, 49, 50.0), (2, 29, 3.0), (2, 899, 9.0), (3, 399, 4.0)
    ]  # fmt: skip
    assert np.all(data.features[:7000, 0] == 1) and data.features[:7000, 1:].sum() == 0


def test_query_file_instead_of_qid(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1\n0 1:2\n2 2:1\n")
    write(tmp_path, "2\n1\n", "data.txt.query")
    data = read_letor(path)
    np.testing.assert_array_equal(data.group_offsets, [0, 2, 3])
    np.testing.assert_array_equal(data.query_ids, [0, 1])


def test_side_files_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    """As the data file may (a trial: the .query file's BOM was 'not a positive integer')."""
    path = write(tmp_path, "1 1:1\n0 1:2\n2 2:1\n")
    write(tmp_path, "\ufeff2\n1\n", "data.txt.query")
    np.testing.assert_array_equal(read_letor(path).group_offsets, [0, 2, 3])


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ("2\n2\n", r"data\.txt\.query:2: group sizes reach 4 but the data has 3 rows"),
        ("1\n1\n", r"data\.txt\.query:2: group sizes sum to 2 but the data has 3 rows"),
        ("2\nx\n", r"data\.txt\.query:2: group size 'x' is not a positive integer"),
        ("2\n\u00b2\n", r"data\.txt\.query:2: group size '\u00b2' is not a positive integer"),
    ],
)
def test_query_file_errors(tmp_path: Path, groups: str, message: str) -> None:
    path = write(tmp_path, "1 1:1\n0 1:2\n2 2:1\n")
    write(tmp_path, groups, "data.txt.query")
    with pytest.raises(DataFormatError, match=message):
        read_letor(path)


def test_query_file_must_agree_with_qid(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:1\n0 qid:2 1:2\n2 qid:2 2:1\n")
    write(tmp_path, "2\n1\n", "data.txt.query")
    with pytest.raises(DataFormatError, match="disagree with the data's qid"):
        read_letor(path)


def test_user_and_position_side_files(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:1\n0 qid:1 1:2\n2 qid:2 2:1\n")
    write(tmp_path, "alice\nbob\n", "data.txt.user")
    write(tmp_path, "pos_1\npos_2\n3\n", "data.txt.position")
    data = read_letor(path)
    assert data.user_ids is not None and data.user_ids.tolist() == ["alice", "bob"]
    assert data.positions is not None and data.positions.tolist() == [1, 2, 3]
    assert data.positions.dtype == np.int64


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("data.txt.user", "alice\n", r"data\.txt\.user:1: 1 user ids for 2 queries"),
        ("data.txt.position", "1\n2\n", r"data\.txt\.position:2: 2 positions for 3 rows"),
        ("data.txt.position", "1\npos_x\n3\n", r"position:2: position 'pos_x' is not a pos"),
        ("data.txt.position", "1\n0\n3\n", r"position:2: position '0' is not a positive"),
    ],
)
def test_side_file_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, "1 qid:1 1:1\n0 qid:1 1:2\n2 qid:2 2:1\n")
    write(tmp_path, text, name)
    with pytest.raises(DataFormatError, match=message):
        read_letor(path)


GOOD = "1 qid:1 1:0.5 2:0.25\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x qid:1 1:1\n", r":1: label 'x' is not a number"),
        (GOOD + "nan qid:1 1:1\n", r":2: label 'nan' is not a finite number"),
        # A grade: gain 2^label - 1 made NDCG@1 -0.5 of a query with a -1 label.
        (GOOD + "-1 qid:1 1:1\n", r":2: label -1 is negative: relevance labels are grades >= 0"),
        (GOOD + "1 qid:1 1:1 # a comment\n-0.5 qid:1 1:x\n", r":3: value 'x' of feature 1"),
        (GOOD + "-0.5 qid:1 junk:1 1:1\n", r":2: feature id 'junk' is not an integer"),
        (
            GOOD + "0 qid:2 1:1\n1 qid:1 1:1\n",
            r":3: qid 1 reappears after another query "
            r"\(first seen at line 1\)",
        ),
        (GOOD + "1 qid:1 0:1\n", r":2: feature id 0 is not valid: ids are 1-based"),
        (GOOD + "1 qid:1 -3:1\n", r":2: feature id -3 is not valid"),
        (GOOD + "1 qid:1 1.5:1\n", r":2: feature id '1.5' is not an integer"),
        (GOOD + "1 qid:1 a:1\n", r":2: feature id 'a' is not an integer"),
        (GOOD + "1 qid:1 1:abc\n", r":2: value 'abc' of feature 1 is not a number"),
        (GOOD + "1 qid:1 1:\n", r":2: value '' of feature 1 is not a number"),
        (GOOD + "1 qid:1 1:1_0\n", r":2: value '1_0' of feature 1 is not a number"),
        # Other scripts' digits and blanks: float() and str.split() took them (`１` read as 1).
        (GOOD + "1 qid:1 1:\uff11\n", r":2: value '\uff11' of feature 1 is not a number"),
        (GOOD + "1 qid:\u0661 1:1\n", r":2: qid '\u0661' is not an integer"),
        (GOOD + "\u0661 qid:1 1:1\n", r":2: label '\u0661' is not a number"),
        (GOOD + "1 qid:1 1:1\u00a02:1\n", r":2: value '1\\xa02:1' of feature 1 is not a number"),
        (GOOD + "1 qid:1 1:2:3\n", r":2: value '2:3' of feature 1 is not a number"),
        (GOOD + "1 qid:1 junk\n", r":2: malformed token 'junk' \(expected id:value\)"),
        (GOOD + "1 qid:1 :5\n", r":2: malformed token ':5'"),
        (GOOD + "1 qid:1 3:1 3:2\n", r":2: duplicate feature id 3"),
        (GOOD + "1 qid:1 3:1 1:1 3:2\n", r":2: duplicate feature id 3"),
        (GOOD + "1 qid:x 1:1\n", r":2: qid 'x' is not an integer"),
        (GOOD + "1 1:1 qid:1\n", r":2: 'qid:1': qid: must come right after the label"),
        (GOOD + "\n1 1:1\n", r":3: missing qid:"),
        ("1 1:1\n1 qid:1 1:1\n", r":2: qid: given but earlier lines have none"),
        ("1 1:1\n", r":1: no qid: and no group file data\.txt\.query"),
        (GOOD + "1 qid:1 100001:1\n", r":2: feature id 100001 is too large \(at most 100,000\)"),
        (GOOD + "1 qid:99999999999999999999 1:1\n", r":2: qid 9+ does not fit in 64 bits"),
        ("", r":1: empty file: no data rows"),
        ("# only a comment\n\n", r":1: empty file: no data rows"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataFormatError, match=r"data\.txt" + message):
        read_letor(write(tmp_path, text))


def test_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    data = read_letor(write(tmp_path, "\ufeff2 qid:1 1:3\n"))
    assert data.labels.tolist() == [2.0] and data.features.tolist() == [[3.0]]


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="no such file"):
        read_letor(tmp_path / "absent.txt")
    with pytest.raises(DataFormatError, match=f"^{tmp_path}: is a directory"):
        read_letor(tmp_path)


def test_demo_data_counts() -> None:
    train = read_letor(DEMO / "rank.train")
    assert (train.num_docs, train.num_queries) == (3005, 201)
    test = read_letor(DEMO / "rank.test", num_features=train.num_features)
    assert (test.num_docs, test.num_queries, test.num_features) == (768, 50, 300)
    assert np.isin(train.labels, [0, 1, 2, 3, 4]).all()
    np.testing.assert_array_equal(np.bincount(train.labels.astype(int)), [645, 1211, 858, 222, 69])
    np.testing.assert_array_equal(np.bincount(test.labels.astype(int)), [206, 256, 252, 44, 10])
    sizes = [int(s) for s in (DEMO / "rank.train.query").read_text().split()]
    np.testing.assert_array_equal(train.group_sizes, sizes)
