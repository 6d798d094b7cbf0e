"""The item id hash index against a binary search over the sorted ids, collisions included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.features import item_index
from app.features.item_index import ItemIndex, id_hashes

ids_strategy = st.lists(st.text(min_size=1, max_size=12), min_size=0, max_size=60, unique=True)


def reference_rows(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if ids.shape[0] == 0:
        return np.full(keys.shape[0], -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, keys), ids.shape[0] - 1)
    return np.where(ids[at] == keys, at, -1)


def sorted_ids(values: list[str]) -> np.ndarray:
    # numpy drops trailing NULs from unicode elements: such ids cannot be stored as written.
    return np.unique(np.asarray([v.rstrip("\x00") or "x" for v in values], dtype=np.str_))


@settings(max_examples=200, deadline=None)
@given(ids_strategy, st.lists(st.text(max_size=14), max_size=40))
def test_rows_equal_a_binary_search(values: list[str], others: list[str]) -> None:
    ids = sorted_ids(values)
    keys = np.asarray([*ids.tolist()[::2], *others, "never-an-id-" * 3], dtype=np.str_)
    assert np.array_equal(ItemIndex(ids).rows(keys), reference_rows(ids, keys))


@settings(max_examples=50, deadline=None)
@given(ids_strategy, st.lists(st.text(max_size=14), max_size=40))
def test_colliding_hashes_still_find_every_row(values: list[str], others: list[str]) -> None:
    # A hash with almost no spread: every id shares its hash with many others.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            item_index,
            "id_hashes",
            lambda a: np.asarray([len(x) % 3 for x in a.tolist()], dtype=np.uint64),
        )
        ids = sorted_ids(values)
        keys = np.asarray([*ids.tolist(), *others], dtype=np.str_)
        index = ItemIndex(ids)
        assert np.array_equal(index.rows(keys), reference_rows(ids, keys))


def test_hash_does_not_depend_on_array_width() -> None:
    narrow = np.asarray(["a", "doc-7", "é✓"], dtype=np.str_)
    wide = np.asarray(["a", "doc-7", "é✓", "a" * 40], dtype=np.str_)
    assert np.array_equal(id_hashes(narrow), id_hashes(wide)[:3])
    assert len(set(id_hashes(wide).tolist())) == 4


def test_ids_longer_than_the_constant_table_hash_and_look_up() -> None:
    ids = np.asarray(sorted(["x" * 70, "x" * 69 + "y", "z"]), dtype=np.str_)
    keys = np.asarray(["x" * 69 + "y", "x" * 71, "z"], dtype=np.str_)
    assert ItemIndex(ids).rows(keys).tolist() == [1, -1, 2]


def test_empty_index_and_empty_keys() -> None:
    empty = ItemIndex(np.asarray([], dtype="<U1"))
    assert empty.rows(np.asarray(["a"])).tolist() == [-1]
    assert ItemIndex(np.asarray(["a"])).rows(np.asarray([], dtype="<U1")).tolist() == []
