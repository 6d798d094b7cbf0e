import numpy as np
import pytest

from tests.support.lambda_example import LABELS, LAMBDAS
from trainer.lambdamart.lambdas import LambdaObjective, lambdas_and_hessians

WORKED_EXAMPLE_LABELS = np.array(LABELS, dtype=np.float64)
WORKED_EXAMPLE_LAMBDAS = LAMBDAS


def _ndcg_at(labels: np.ndarray, order: np.ndarray, k: int) -> float:
    disc = 1.0 / np.log2(np.arange(len(order)) + 2.0)
    disc[k:] = 0.0
    dcg = float(np.sum((2.0 ** labels[order] - 1.0) * disc))
    ideal = float(np.sum((2.0 ** np.sort(labels)[::-1] - 1.0) * disc))
    return dcg / ideal


def _naive(scores, labels, sigma, k=None, m=None):
    """Swap every pair in the ranking and recompute NDCG: the definition, O(n^3)."""
    n = len(scores)
    k = n if k is None else k
    m = n if m is None else m
    order = np.argsort(-scores, kind="stable")
    base = _ndcg_at(labels, order, k)
    lam, hess, weight = np.zeros(n), np.zeros(n), np.zeros((n, n))
    for a in range(min(n, m)):
        for b in range(a + 1, min(n, m)):
            if a >= k and b >= k:
                continue
            i, j = order[a], order[b]
            if labels[i] == labels[j]:
                continue
            hi, lo = (i, j) if labels[i] > labels[j] else (j, i)
            swapped = order.copy()
            swapped[a], swapped[b] = swapped[b], swapped[a]
            delta = abs(_ndcg_at(labels, swapped, k) - base)
            rho = 1.0 / (1.0 + np.exp(sigma * (scores[hi] - scores[lo])))
            lam[hi] += sigma * rho * delta
            lam[lo] -= sigma * rho * delta
            hess[hi] += sigma**2 * delta * rho * (1 - rho)
            hess[lo] += sigma**2 * delta * rho * (1 - rho)
            weight[hi, lo] = delta
    return lam, hess, weight


def test_worked_example_query_1830():
    lam, hess = lambdas_and_hessians(np.zeros(10), WORKED_EXAMPLE_LABELS, np.array([0, 10]))
    np.testing.assert_allclose(lam, WORKED_EXAMPLE_LAMBDAS, atol=5e-4)
    # At equal scores rho = 1/2, so each pair's hessian is half its lambda (sigma = 1).
    _, _, weight = _naive(np.zeros(10), WORKED_EXAMPLE_LABELS, 1.0)
    np.testing.assert_allclose(hess, 0.25 * (weight.sum(0) + weight.sum(1)), rtol=1e-12)


def test_unnormalised_natural_log_convention():
    # The three-document worked example (labels 1, 2, 1, all scores 0, unnormalised DCG with a
    # natural-log discount). Its printed lambdas (-0.344, 0.816, -0.64) treat document 3 as
    # label 0; with the labels as given, these are the values.
    objective = LambdaObjective(
        np.array([1.0, 2.0, 1.0]), np.array([0, 3]), gain_discount="dcg_natural_log"
    )
    lam, _, _ = objective.compute(np.zeros(3))
    np.testing.assert_allclose(lam, [-0.532, 0.721, -0.189], atol=5e-4)
    dcg_12 = 2.0 * (1 / np.log(2) - 1 / np.log(3))
    dcg_23 = 2.0 * (1 / np.log(3) - 1 / np.log(4))
    np.testing.assert_allclose(lam, [-dcg_12 / 2, (dcg_12 + dcg_23) / 2, -dcg_23 / 2], rtol=1e-12)


@pytest.mark.parametrize(("k", "m"), [(None, None), (3, None), (None, 5), (2, 6)])
def test_matches_swap_definition(k, m):
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(2, 12))
        labels = rng.integers(0, 4, n).astype(np.float64)
        scores = np.round(rng.normal(size=n), 1)  # ties happen: input order breaks them
        sigma = float(rng.uniform(0.5, 2.0))
        lam, hess = lambdas_and_hessians(scores, labels, np.array([0, n]), sigma, k, m)
        if labels.min() == labels.max():
            assert not lam.any() and not hess.any()
            continue
        ref_lam, ref_hess, _ = _naive(scores, labels, sigma, k, m)
        np.testing.assert_allclose(lam, ref_lam, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(hess, ref_hess, rtol=1e-9, atol=1e-12)


def test_minus_gradient_of_smoothed_loss():
    rng = np.random.default_rng(3)
    n, sigma = 9, 1.3
    labels = rng.integers(0, 3, n).astype(np.float64)
    scores = rng.normal(size=n)
    lam, hess = lambdas_and_hessians(scores, labels, np.array([0, n]), sigma)
    _, _, weight = _naive(scores, labels, sigma)  # |dNDCG| held fixed at these scores

    def loss(s):
        diff = s[:, None] - s[None, :]
        return float(np.sum(weight * np.log1p(np.exp(-sigma * diff))))

    eps = 1e-5
    for i in range(n):
        step = np.zeros(n)
        step[i] = eps
        up, down, mid = loss(scores + step), loss(scores - step), loss(scores)
        np.testing.assert_allclose(-(up - down) / (2 * eps), lam[i], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose((up - 2 * mid + down) / eps**2, hess[i], rtol=1e-3, atol=1e-6)


def test_queries_are_independent_and_permutation_equivariant():
    rng = np.random.default_rng(11)
    sizes = [5, 1, 8, 4, 6]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    labels = rng.integers(0, 3, offsets[-1]).astype(np.float64)
    labels[6:14] = 2.0  # a query whose labels are all equal
    scores = rng.normal(size=offsets[-1])  # distinct: permuting keeps the ranking
    lam, hess = lambdas_and_hessians(scores, labels, offsets)
    assert not lam[6:14].any() and not hess[6:14].any()
    assert not lam[5] and not hess[5]  # a single document has no pairs
    for q in range(len(sizes)):
        lo, hi = offsets[q], offsets[q + 1]
        alone, _ = lambdas_and_hessians(scores[lo:hi], labels[lo:hi], np.array([0, hi - lo]))
        np.testing.assert_allclose(lam[lo:hi], alone, rtol=1e-12)
        assert abs(lam[lo:hi].sum()) < 1e-12  # every pair pushes one up, one down
    perm = np.concatenate([offsets[q] + rng.permutation(s) for q, s in enumerate(sizes)])
    lam_p, hess_p = lambdas_and_hessians(scores[perm], labels[perm], offsets)
    np.testing.assert_allclose(lam_p, lam[perm], rtol=1e-12)
    np.testing.assert_allclose(hess_p, hess[perm], rtol=1e-12)


def test_padding_documents_below_the_truncation_change_nothing_above():
    labels = np.array([2.0, 0.0, 1.0, 0.0])
    scores = np.array([0.1, 0.9, 0.5, 0.3])
    lam, _ = lambdas_and_hessians(scores, labels, np.array([0, 4]), ndcg_truncation=2)
    padded_labels = np.concatenate([labels, [1.0, 0.0]])
    padded_scores = np.concatenate([scores, [-5.0, -6.0]])
    lam_p, _ = lambdas_and_hessians(padded_scores, padded_labels, np.array([0, 6]), 1.0, 2, 4)
    np.testing.assert_allclose(lam_p[:4], lam, rtol=1e-12)
    assert not lam_p[4:].any()


def test_large_score_gaps_stay_finite():
    labels = np.array([0.0, 1.0, 2.0, 0.0])
    scores = np.array([2000.0, -2000.0, 0.0, -900.0])
    lam, hess = lambdas_and_hessians(scores, labels, np.array([0, 4]), sigma=2.0)
    assert np.all(np.isfinite(lam)) and np.all(np.isfinite(hess))
    assert lam[1] > 0 and lam[0] < 0


def test_train_ndcg_by_product_matches_metric():
    from trainer.metrics.ndcg import mean_ndcg

    rng = np.random.default_rng(5)
    offsets = np.array([0, 7, 10, 25, 26, 40])
    labels = rng.integers(0, 3, 40).astype(np.float64)
    labels[7:10] = 0.0
    scores = np.round(rng.normal(size=40), 1)
    objective = LambdaObjective(labels, offsets, eval_at=5, empty_value=0.25)
    _, _, per_query = objective.compute(scores)
    expected = mean_ndcg(scores, labels, offsets, 5, 0.25)
    assert per_query.mean() == pytest.approx(expected, rel=1e-12)


def test_bad_offsets_are_rejected():
    with pytest.raises(ValueError, match="group_offsets"):
        lambdas_and_hessians(np.zeros(3), np.zeros(3), np.array([0, 2]))
    with pytest.raises(ValueError, match="at least one document"):
        lambdas_and_hessians(np.zeros(3), np.zeros(3), np.array([0, 0, 3]))
