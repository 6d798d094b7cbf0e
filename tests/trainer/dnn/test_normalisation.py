import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from trainer.dnn.normalisation import fit_standardiser


def test_statistics_ignore_nan_and_guard_constant_columns():
    x = np.array(
        [[1.0, 5.0, np.nan, 2.0], [3.0, 5.0, np.nan, np.nan], [5.0, 5.0, np.nan, 4.0]],
        dtype=np.float32,
    )
    st = fit_standardiser(x)
    assert st.mean.tolist() == pytest.approx([3.0, 5.0, 0.0, 3.0])
    assert st.std.tolist() == pytest.approx([np.sqrt(8 / 3), 1.0, 1.0, 1.0])


def test_nan_is_imputed_with_the_training_mean_where_training_had_missing_values():
    x = np.array([[0.0, 10.0], [2.0, 30.0], [np.nan, np.nan]], dtype=np.float32)
    st = fit_standardiser(x)
    out = st(torch.tensor([[np.nan, np.nan], [2.0, 10.0]], dtype=torch.float32))
    np.testing.assert_allclose(out.numpy(), [[0.0, 0.0], [1.0, -1.0]], atol=1e-6)


def test_nan_is_zero_for_a_feature_training_never_had_missing():
    # Column 0 is never missing (a sparse LETOR file writes its zeros by leaving it out, and a
    # request that leaves it out sends NaN): missing reads as the 0 training saw. Column 1 had
    # a missing value: its mean stands in.
    x = np.array([[0.0, 10.0], [2.0, np.nan], [4.0, 30.0]], dtype=np.float32)
    st = fit_standardiser(x)
    assert st.fill.tolist() == pytest.approx([0.0, 20.0])
    out = st(torch.tensor([[np.nan, np.nan]], dtype=torch.float32))
    zero = st(torch.tensor([[0.0, 20.0]], dtype=torch.float32))
    np.testing.assert_array_equal(out.numpy(), zero.numpy())
    np.testing.assert_allclose(out.numpy(), [[-2.0 / np.sqrt(8 / 3), 0.0]], atol=1e-6)


def test_rejects_empty_input():
    with pytest.raises(ValueError, match="non-empty"):
        fit_standardiser(np.zeros((0, 3), np.float32))


def test_rejects_an_infinity_rather_than_learning_nan_statistics():
    x = np.array([[1.0, 2.0], [3.0, np.inf]], dtype=np.float32)
    with pytest.raises(ValueError, match="feature column 1 holds an infinite value"):
        fit_standardiser(x)


def test_a_feature_without_spread_in_training_reads_as_training_saw_it_whatever_its_value():
    """A trial: a feature NaN in every training row, sent as 5, added -0.27 to the score from
    first-layer weights that never trained (they only ever saw 0)."""
    nan = np.nan
    # Varied; all missing; one value throughout; one value where present.
    x = np.array([[1.0, nan, 4.0, 7.0], [3.0, nan, 4.0, nan], [5.0, nan, 4.0, 7.0]])
    st = fit_standardiser(x.astype(np.float32))
    assert st.varied.tolist() == [True, False, False, False]
    sent = torch.tensor([[3.0, 5.0, 9.0, nan], [nan, np.inf, -np.inf, -1e30]])
    out = st(sent).numpy()
    np.testing.assert_array_equal(out[:, 1:], np.zeros((2, 3)))
    # The varied feature as before (never missing in training: NaN reads as 0).
    np.testing.assert_allclose(out[:, 0], [0.0, -3.0 / np.sqrt(8 / 3)], atol=1e-6)
    training = st(torch.from_numpy(x.astype(np.float32))).numpy()
    np.testing.assert_array_equal(training[:, 1:], np.zeros((3, 3)))


def test_every_feature_varied_gives_the_graph_as_before():
    st = fit_standardiser(np.array([[1.0, 2.0], [3.0, 5.0]], dtype=np.float32))
    assert st.varied.tolist() == [True, True] and not st._masked
