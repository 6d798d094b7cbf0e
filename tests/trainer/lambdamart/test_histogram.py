import numpy as np

from trainer.lambdamart.histogram import (
    build_feature_histogram,
    build_gathered_histograms,
    subtract_histogram,
)


def test_column_and_gathered_histograms_agree_and_subtract():
    rng = np.random.default_rng(0)
    n_docs, n_features, stride = 400, 5, 9
    n_real = np.array([8, 3, 1, 8, 5], dtype=np.int32)
    bins = np.stack([rng.integers(0, n_real[f] + 1, n_docs) for f in range(n_features)])
    bins = bins.astype(np.uint8)
    grad, hess = rng.normal(size=n_docs), rng.random(n_docs)
    rows = np.sort(rng.choice(n_docs, 60, replace=False)).astype(np.int32)
    feats = np.array([0, 2, 3, 4])
    by_column = np.full((n_features, stride, 3), np.nan)
    spare = np.empty((stride, 3))
    for f in feats:
        build_feature_histogram(
            bins[f], rows, grad[rows], hess[rows], by_column[f], n_real[f] + 1, spare
        )
    gathered = np.full((n_features, stride, 3), np.nan)
    scratch = np.zeros((n_features, 60), dtype=np.uint8)
    row_bins = np.ascontiguousarray(bins.T)
    build_gathered_histograms(
        row_bins, rows, grad[rows], hess[rows], feats, n_real, gathered, scratch
    )
    for f in feats:
        used = slice(0, n_real[f] + 1)
        np.testing.assert_allclose(gathered[f, used], by_column[f, used], rtol=1e-12)
        expected = np.zeros((n_real[f] + 1, 3))
        np.add.at(expected[:, 0], bins[f, rows], grad[rows])
        np.add.at(expected[:, 1], bins[f, rows], hess[rows])
        np.add.at(expected[:, 2], bins[f, rows], 1.0)
        np.testing.assert_allclose(by_column[f, used], expected, rtol=1e-12, atol=1e-15)
    assert np.isnan(gathered[1]).all()  # features not asked for are left alone
    everything = np.arange(n_docs, dtype=np.int32)
    parent = np.zeros((stride, 3))
    build_feature_histogram(bins[0], everything, grad, hess, parent, n_real[0] + 1, spare)
    subtract_histogram(parent, by_column[0], n_real[0] + 1)
    rest = np.setdiff1d(everything, rows)
    sibling = np.zeros((stride, 3))
    build_feature_histogram(bins[0], rest, grad[rest], hess[rest], sibling, n_real[0] + 1, spare)
    np.testing.assert_allclose(parent, sibling, atol=1e-12)
