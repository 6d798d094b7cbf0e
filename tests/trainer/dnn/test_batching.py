import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from trainer.dnn.batching import PAD_LABEL, EpochShuffler, QueryLists


def make_lists(sizes, n_features=3, clusters=None):
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    features = np.arange(n * n_features, dtype=np.float32).reshape(n, n_features) + 1
    labels = np.arange(n, dtype=np.float64) % 5
    return QueryLists(features, labels, offsets, clusters), features, labels, offsets


def test_batch_pads_to_longest_list_and_masks_padding():
    lists, features, labels, _ = make_lists([2, 5, 1])
    batch = lists.batch(np.array([0, 1, 2]))
    assert batch.features.shape == (3, 5, 3)
    assert batch.mask.tolist() == [
        [True, True, False, False, False],
        [True] * 5,
        [True, False, False, False, False],
    ]
    assert torch.all(batch.features[~batch.mask] == 0)
    assert torch.all(batch.labels[~batch.mask] == PAD_LABEL)
    np.testing.assert_array_equal(batch.features[batch.mask].numpy(), features)
    np.testing.assert_array_equal(batch.labels[batch.mask].numpy(), labels)


@pytest.mark.parametrize("batch_queries", [1, 2, 3, 7, 100])
def test_a_query_is_never_split_and_every_query_comes_once(batch_queries):
    sizes = [1, 9, 3, 30, 2, 2, 17]
    lists, features, _, offsets = make_lists(sizes)
    order = EpochShuffler(len(sizes), seed=3).next_order()
    seen = []
    for batch in lists.batches(batch_queries, order):
        assert batch.features.shape[0] <= batch_queries
        for row, q in enumerate(batch.queries.tolist()):
            # The whole list is in this row, in stored order, nothing else.
            docs = batch.features[row][batch.mask[row]].numpy()
            np.testing.assert_array_equal(docs, features[offsets[q] : offsets[q + 1]])
            seen.append(q)
    assert seen == order.tolist()


def test_lists_of_any_length_including_one_long_list():
    lists = make_lists([1, 5000])[0]
    batch = lists.batch(np.array([1, 0]))
    assert batch.features.shape == (2, 5000, 3)
    assert batch.mask.sum().item() == 5001


def test_shuffle_is_seeded_and_changes_every_epoch():
    a, b = EpochShuffler(50, seed=7), EpochShuffler(50, seed=7)
    first = [a.next_order() for _ in range(3)]
    second = [b.next_order() for _ in range(3)]
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)
        assert sorted(x.tolist()) == list(range(50))
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[0], EpochShuffler(50, seed=8).next_order())


def test_cluster_index_follows_the_query():
    lists, _, _, _ = make_lists([2, 3, 1], clusters=np.array([4, 0, 9]))
    batch = lists.batch(np.array([2, 0]))
    assert batch.clusters.tolist() == [9, 4]
    assert lists.batch(np.array([1])).clusters.tolist() == [0]


def test_subset_keeps_lists_whole():
    lists, features, _, _ = make_lists([2, 3, 4], clusters=np.array([1, 2, 3]))
    sub = lists.subset(np.array([2, 0]))
    assert sub.sizes.tolist() == [4, 2]
    batch = sub.batch(np.array([0, 1]))
    np.testing.assert_array_equal(batch.features[0].numpy(), features[5:9])
    assert batch.clusters.tolist() == [3, 1]


def test_bad_offsets_are_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        QueryLists(np.zeros((3, 2), np.float32), np.zeros(3), np.array([0, 0, 3]))
    with pytest.raises(ValueError, match="end at n_docs"):
        QueryLists(np.zeros((3, 2), np.float32), np.zeros(3), np.array([0, 2]))
    with pytest.raises(ValueError, match="cluster"):
        QueryLists(np.zeros((3, 2), np.float32), np.zeros(3), np.array([0, 3]), np.array([1, 2]))
