import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from trainer.dnn.models import build_ranker
from trainer.dnn.normalisation import fit_standardiser
from trainer.dnn.options import DNNOptions

OPTIONS = DNNOptions(hidden=[8], embedding_dim=4)


def ranker_and_next_draw(clusters, shared):
    torch.manual_seed(3)
    standardiser = fit_standardiser(np.random.default_rng(0).normal(size=(50, 5)))
    ranker = build_ranker(OPTIONS, standardiser, clusters + shared, shared)
    return ranker, torch.rand(3)  # what dropout would draw next


def test_shared_rows_start_alike_whatever_the_number_of_cluster_rows():
    # Two field orders give different cluster ids (here 3 and 7 rows) over the same 5 field and
    # combination rows: those start with the same weights and the global generator runs on alike.
    few, next_few = ranker_and_next_draw(3, 5)
    many, next_many = ranker_and_next_draw(7, 5)
    assert few.table.shape == (8, 4) and many.table.shape == (12, 4)
    torch.testing.assert_close(few.table[3:], many.table[3 + 4 :], rtol=0, atol=0)
    torch.testing.assert_close(next_few, next_many, rtol=0, atol=0)
    assert few.embedding is not None and many.embedding is not None
    assert not few.embedding.weight[-1].any() and not many.embedding.weight[-1].any()
    assert float(few.table.detach().std()) == pytest.approx(0.1, rel=0.5)


def test_user_vector_is_the_sum_of_the_rows_and_padding_adds_nothing():
    ranker, _ = ranker_and_next_draw(3, 5)
    pad = 8
    rows = torch.tensor([[1, 3, pad, 7], [0, pad, pad, pad]])
    got = ranker.user_vectors(rows)
    assert got.shape == (2, 4)
    table = ranker.table.detach()
    torch.testing.assert_close(got[0], table[1] + table[3] + table[7])
    torch.testing.assert_close(got[1], table[0])


def test_the_unknown_row_cannot_be_a_shared_row():
    with pytest.raises(ValueError, match="unknown cluster"):
        ranker_and_next_draw(0, 5)
