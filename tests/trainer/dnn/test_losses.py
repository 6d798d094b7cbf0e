import math

import pytest

torch = pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from trainer.dnn.losses import lambdarank_loss, listnet_loss, pointwise_loss, ranknet_loss
from trainer.dnn.losses.lambdarank import current_ranks, delta_ndcg

LOSSES = {
    "pointwise": pointwise_loss,
    "ranknet": lambda s, y, m: ranknet_loss(s, y, m, sigma=1.5),
    "listnet": listnet_loss,
    "lambdarank": lambdarank_loss,
    "lambdarank@3": lambda s, y, m: lambdarank_loss(s, y, m, k=3),
    "lambdarank_sum": lambda s, y, m: lambdarank_loss(s, y, m, reduction="sum"),
}


def lists(*rows):
    scores = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    labels = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    return scores, labels, torch.ones_like(scores, dtype=torch.bool)


def test_pointwise_by_hand():
    s, y, m = lists(([1.0, 2.0], [0.0, 1.0]))
    assert pointwise_loss(s, y, m).item() == pytest.approx(1.0)


def test_ranknet_by_hand():
    s, y, m = lists(([0.0, 0.0], [1.0, 0.0]), ([2.0, 0.0], [0.0, 1.0]))
    # One preference pair per list: log 2 at a tie, log(1 + e^2) for the inverted pair.
    expected = (math.log(2) + math.log1p(math.exp(2.0))) / 2
    assert ranknet_loss(s, y, m).item() == pytest.approx(expected)
    s2, y2, m2 = lists(([1.0, 0.0], [1.0, 0.0]))
    assert ranknet_loss(s2, y2, m2, sigma=2.0).item() == pytest.approx(math.log1p(math.exp(-2)))


def test_listnet_by_hand():
    s, y, m = lists(([0.0, 0.0], [1.0, 0.0]))
    assert listnet_loss(s, y, m).item() == pytest.approx(math.log(2))
    s, y, m = lists(([math.log(3), 0.0], [0.0, 0.0]))
    assert listnet_loss(s, y, m).item() == pytest.approx(-0.5 * (math.log(0.75) + math.log(0.25)))


def test_lambdarank_by_hand():
    s, y, m = lists(([0.0, 0.0], [0.0, 1.0]))
    # Swapping rank 1 and 2: |1 - 1/log2(3)| / ideal DCG (1).
    delta = 1 - 1 / math.log2(3)
    assert lambdarank_loss(s, y, m).item() == pytest.approx(delta * math.log(2))
    # With a cut-off of 1 the second position is worth nothing: delta NDCG@1 = 1.
    assert lambdarank_loss(s, y, m, k=1).item() == pytest.approx(math.log(2))


def test_lambdarank_no_relevant_document_is_zero():
    s, y, m = lists(([0.3, -1.0, 2.0], [0.0, 0.0, 0.0]))
    s.requires_grad_(True)
    loss = lambdarank_loss(s, y, m)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(s.grad == 0)


def test_current_ranks_stable_ties_and_padding_last():
    scores = torch.tensor([[0.0, 5.0, 0.0, 9.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert current_ranks(scores, mask).tolist() == [[1, 0, 2, 3]]


def test_delta_ndcg_worked_example_pairs():
    labels = torch.tensor([[0, 0, 0, 1, 1, 0, 1, 1, 0, 0]], dtype=torch.float64)
    delta = delta_ndcg(torch.zeros_like(labels), labels, torch.ones_like(labels, dtype=torch.bool))
    # The worked example: deltaNDCG(1,4) = 0.222, (1,5) = 0.239, (1,7) = 0.260, (1,8) = 0.267.
    assert delta[0, 0, [3, 4, 6, 7]].tolist() == pytest.approx(
        [0.222, 0.239, 0.260, 0.267], abs=1e-3
    )


def random_batch(seed, batch=3, length=7):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, length, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (batch, length), generator=g).to(torch.float64)
    lengths = torch.tensor([length, length - 2, 3])
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return scores, labels, mask


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_padding_leaves_loss_and_gradients_unchanged(name, seed):
    loss_fn = LOSSES[name]
    scores, labels, mask = random_batch(seed)
    s1 = scores.clone().requires_grad_(True)
    loss1 = loss_fn(s1, labels, mask)
    loss1.backward()
    # Append padded items with scores and labels that would matter if read.
    pad = 4
    s2 = torch.cat([scores, torch.full((3, pad), 50.0, dtype=torch.float64)], 1)
    s2.requires_grad_(True)
    labels2 = torch.cat([labels, torch.full((3, pad), 3.0, dtype=torch.float64)], 1)
    mask2 = torch.cat([mask, torch.zeros(3, pad, dtype=torch.bool)], 1)
    loss2 = loss_fn(s2, labels2, mask2)
    loss2.backward()
    assert s1.grad is not None and s2.grad is not None
    assert loss2.item() == pytest.approx(loss1.item(), rel=1e-12, abs=1e-12)
    assert torch.allclose(s2.grad[:, :-pad], s1.grad, rtol=1e-12, atol=1e-14)
    assert torch.all(s2.grad[:, -pad:] == 0)
    assert torch.all(torch.isfinite(s2.grad))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_garbage_inside_padding_is_ignored(name):
    loss_fn = LOSSES[name]
    scores, labels, mask = random_batch(5)
    base = loss_fn(scores, labels, mask)
    noisy_scores = torch.where(mask, scores, torch.full_like(scores, -1e4))
    noisy_labels = torch.where(mask, labels, torch.full_like(labels, 7.0))
    assert loss_fn(noisy_scores, noisy_labels, mask).item() == pytest.approx(base.item(), rel=1e-12)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_prefers_the_right_order(name):
    loss_fn = LOSSES[name]
    labels = torch.tensor([[2.0, 1.0, 0.0, 0.0]])
    mask = torch.ones_like(labels, dtype=torch.bool)
    good = loss_fn(torch.tensor([[3.0, 2.0, 1.0, 0.0]]), labels, mask)
    bad = loss_fn(torch.tensor([[0.0, 1.0, 2.0, 3.0]]), labels, mask)
    assert good.item() < bad.item()
