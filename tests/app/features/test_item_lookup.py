"""The compiled lookup from a body's id tokens against the index's Python path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.features import item_lookup
from app.features.item_index import ItemIndex, id_hashes
from app.features.item_lookup import IdTokens
from app.features.item_snapshot import ItemSnapshot, SnapshotError, write_snapshot


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    item_lookup.KERNEL.compile_now()


def tokens_of(keys: list[str | int], framed: bool = False) -> IdTokens:
    """The ids as the body walk copies them: `tok,tok,...` (or `[tok,tok]`, as the shed
    path's buffer holds them)."""
    text = orjson.dumps(keys)
    if not framed:
        text = text[1:-1] + b","
    buf = np.frombuffer(text, dtype=np.uint8)
    begin = 1 if framed else 0
    return IdTokens(buf, begin, len(text) - (1 if framed else 0), len(keys))


def python_rows(index: ItemIndex, keys: list[str | int]) -> np.ndarray:
    return index.rows(np.asarray([str(k) for k in keys], dtype=np.str_))


ascii_ids = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\'),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(ascii_ids, max_size=60, unique=True),
    st.lists(st.one_of(ascii_ids, st.integers(-(2**63), 2**63 - 1)), max_size=40),
    st.booleans(),
)
def test_token_rows_equal_the_python_rows(
    values: list[str], others: list[str | int], framed: bool
) -> None:
    ids = np.unique(np.asarray([*values, "0", "-5", "18446744073709551615"], dtype=np.str_))
    index = ItemIndex(ids)
    keys: list[str | int] = [*ids.tolist()[::2], *others, "never-an-id-" * 3]
    keys += [int(k) for k in ("0", "-5", "18446744073709551615")]
    rows = index.token_rows(tokens_of(keys, framed))
    assert rows is not None
    assert rows.tolist() == python_rows(index, keys).tolist()


def test_wide_ids_and_prefixes_of_stored_ids() -> None:
    ids = np.asarray(sorted(["x" * 70, "x" * 69 + "y", "z", "ab", "abc"]), dtype=np.str_)
    index = ItemIndex(ids)
    keys: list[str | int] = ["x" * 69 + "y", "x" * 71, "x" * 69, "z", "a", "ab", "abcd", ""]
    rows = index.token_rows(tokens_of(keys))
    assert rows is not None
    assert rows.tolist() == python_rows(index, keys).tolist()
    assert rows.tolist()[:2] == [ids.tolist().index("x" * 69 + "y"), -1]


def test_stored_id_with_a_nul_inside_is_not_its_prefix() -> None:
    # "a\x00b" and "a" hash apart; forced into one bucket, the stored id's tail still differs.
    ids = np.asarray(["a", "a\x00b"], dtype=np.str_)
    index = ItemIndex(ids)
    index.hashes[:] = id_hashes(np.asarray(["a"]))[0]
    index.rows_by_hash[:] = [1, 0]  # the longer id first in the bucket's walk
    rows = index.token_rows(tokens_of(["a"]))
    assert rows is not None and rows.tolist() == [0]


def test_a_walk_past_a_colliding_hash_finds_the_row() -> None:
    ids = np.asarray(["a", "b"], dtype=np.str_)
    index = ItemIndex(ids)
    index.hashes[:] = id_hashes(np.asarray(["b"]))[0]  # both stored ids share b's hash
    index.rows_by_hash[:] = [0, 1]
    index.starts[:] = 0
    index.starts[int(index.hashes[0] >> index.shift) + 1 :] = 2
    rows = index.token_rows(tokens_of(["b", "a"]))
    assert rows is not None and rows.tolist() == [1, -1]


@pytest.mark.parametrize("keys", [['a\\"b'], ["é"], ["doc-1", "ü"]])
def test_declines_escaped_and_non_ascii_ids(keys: list[str | int]) -> None:
    index = ItemIndex(np.asarray(["a", "doc-1", "é"], dtype=np.str_))
    assert index.token_rows(tokens_of(keys)) is None


def test_declines_minus_zero() -> None:
    index = ItemIndex(np.asarray(["0"], dtype=np.str_))
    buf = np.frombuffer(b"-0,", dtype=np.uint8)
    assert index.token_rows(IdTokens(buf, 0, 3, 1)) is None


def test_declines_fewer_tokens_than_counted() -> None:
    index = ItemIndex(np.asarray(["a"], dtype=np.str_))
    tokens = tokens_of(["a"])
    assert index.token_rows(IdTokens(tokens.buf, tokens.begin, tokens.end, 2)) is None


def test_snapshot_lookup_from_tokens_equals_the_list_lookup() -> None:
    rng = np.random.default_rng(3)
    ids = np.asarray(sorted(f"doc-{i}" for i in range(500)), dtype=np.str_)
    matrix = rng.random((500, 6), dtype=np.float32)
    snapshot = ItemSnapshot(ids, matrix, [f"f{j}" for j in range(6)])
    keys: list[str | int] = ["doc-7", "nope", "doc-499", "doc-7", 12]
    columns = np.asarray([5, 0, 3], dtype=np.int64)
    fast, fast_found = snapshot.lookup(keys, columns, tokens_of(keys))
    slow, slow_found = snapshot.lookup(keys, columns)
    assert np.array_equal(fast, slow, equal_nan=True)
    assert fast_found.tolist() == slow_found.tolist() == [True, False, True, True, False]


def test_an_id_with_trailing_nuls_is_not_the_stored_id_without_them() -> None:
    # numpy's unicode arrays drop trailing NULs: "doc-7\x00" must not read doc-7's row.
    ids = np.asarray(["doc-7", "doc-8"], dtype=np.str_)
    snapshot = ItemSnapshot(ids, np.ones((2, 3), dtype=np.float32), ["a", "b", "c"])
    keys: list[str | int] = ["doc-7\x00", "doc-7", "doc-8\x00\x00", "doc-\x008"]
    values, found = snapshot.lookup(keys, np.arange(3))
    assert found.tolist() == [False, True, False, False]
    assert np.isnan(values[0]).all() and not np.isnan(values[1]).any()


def test_a_snapshot_refuses_ids_with_nul_characters(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"row 1 .*NUL"):
        write_snapshot(tmp_path, ["a", "b\x00"], np.zeros((2, 1)))


@pytest.mark.parametrize("ids_writable", [True, False])  # built in memory / memory-mapped
@pytest.mark.parametrize("buf_writable", [True, False])  # the body walks' buffers / bytes
def test_a_lookup_runs_the_kernel_compiled_at_load(
    ids_writable: bool, buf_writable: bool, tmp_path
) -> None:
    """numba compiles a kernel anew for each writable / read-only mix of its arrays (~1 s on
    a cold cache, in the first request that brings one): whatever the memory of the ids and
    of the token bytes, a lookup uses what the background load compiled."""
    from app.features.item_lookup_kernel import find_rows

    ids = np.asarray(["a", "bb", "ccc"], dtype=np.str_)
    if not ids_writable:
        np.save(tmp_path / "ids.npy", ids)
        ids = np.load(tmp_path / "ids.npy", mmap_mode="r")
    index = ItemIndex(ids)
    tokens = tokens_of(["ccc", "a", "zz"])
    if buf_writable:
        tokens = IdTokens(tokens.buf.copy(), tokens.begin, tokens.end, tokens.count)
    compiled = len(find_rows.signatures)
    rows = index.token_rows(tokens)
    assert rows is not None and rows.tolist() == [2, 0, -1]
    assert len(find_rows.signatures) == compiled
