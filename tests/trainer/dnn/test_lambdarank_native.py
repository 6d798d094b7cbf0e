"""The two halves of the product agree: the gradient of the LambdaRank loss with respect to the
scores is minus the native LambdaMART lambdas for the same lists."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from tests.support.lambda_example import LABELS, LAMBDAS
from trainer.dnn.losses import lambdarank_loss
from trainer.lambdamart.lambdas import lambdas_and_hessians

WORKED_EXAMPLE_LABELS = LABELS
WORKED_EXAMPLE_LAMBDAS = LAMBDAS


def padded(values, offsets, fill):
    """[n_docs] → [n_lists, max_len], `fill` after each list's end."""
    sizes = np.diff(offsets)
    out = np.full((sizes.size, sizes.max()), fill, dtype=np.float64)
    for q, n in enumerate(sizes):
        out[q, :n] = values[offsets[q] : offsets[q + 1]]
    return out


def loss_gradient(scores, labels, offsets, sigma=1.0, k=None, max_pairs_rank=None):
    """d loss / d scores [n_docs], all lists in one padded batch."""
    mask = torch.tensor(padded(np.ones(len(labels)), offsets, 0.0) > 0)
    s = torch.tensor(padded(scores, offsets, 0.0), requires_grad=True)
    y = torch.tensor(padded(labels, offsets, -1.0))
    loss = lambdarank_loss(
        s, y, mask, sigma=sigma, k=k, reduction="sum", max_pairs_rank=max_pairs_rank
    )
    loss.backward()
    assert s.grad is not None
    return s.grad.numpy()[mask.numpy()]


def test_worked_example_lambdas():
    labels = np.array(WORKED_EXAMPLE_LABELS, dtype=np.float64)
    offsets = np.array([0, 10])
    native, _ = lambdas_and_hessians(np.zeros(10), labels, offsets, sigma=1.0)
    grad = loss_gradient(np.zeros(10), labels, offsets)
    assert np.round(native, 3).tolist() == pytest.approx(WORKED_EXAMPLE_LAMBDAS, abs=1e-9)
    assert np.round(-grad, 3).tolist() == pytest.approx(WORKED_EXAMPLE_LAMBDAS, abs=1e-9)
    np.testing.assert_allclose(-grad, native, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    ("sigma", "k", "max_pairs_rank"),
    [(1.0, None, None), (2.0, None, None), (1.0, 3, None), (0.5, 10, None), (1.0, None, 5)],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_equals_native_lambdas(sigma, k, max_pairs_rank, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 25, size=12)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n = int(offsets[-1])
    labels = rng.integers(0, 5, size=n).astype(np.float64)
    # Rounded scores make ties, which both sides must break by stored order.
    scores = np.round(rng.normal(size=n), 1)
    native, _ = lambdas_and_hessians(scores, labels, offsets, sigma, k, max_pairs_rank)
    grad = loss_gradient(scores, labels, offsets, sigma, k, max_pairs_rank)
    assert np.abs(native).max() > 0
    np.testing.assert_allclose(-grad, native, rtol=1e-10, atol=1e-13)
