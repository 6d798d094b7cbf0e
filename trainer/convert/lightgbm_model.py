"""LightGBM `model.txt` → tree dump, parsed by us (no LightGBM needed to convert).

Before any tree sees a row, `Booster.predict` drops every value with |x| <= kZeroThreshold from
it (c_api.cpp `RowPairFunctionFromDenseMatrix`: the row becomes sparse pairs), so the tree reads
0.0 there; kZeroThreshold is float32(1e-35) widened to double (`ZERO_THRESHOLD`). Then the
numerical split (tree.h `NumericalDecision`), with `decision_type` bit 0 = categorical,
bit 1 = default left, bits 2-3 = missing type (0 None, 1 Zero, 2 NaN):
- None: NaN is replaced by 0.0 and compared, so "missing" goes wherever 0.0 goes.
- Zero: NaN and |x| <= kZeroThreshold take the default direction.
- NaN: NaN takes the default direction; zero compares normally.
Then `x <= threshold` goes left, which is the tree dump's rule once thresholds inside the zero
band are moved to its edge (`_zero_band_threshold`). Leaf values already include the shrinkage,
and LightGBM's raw score is the plain sum of leaf values in tree order (no base score), which is
the tree dump's sum too, so scores are bit-identical for float32 and float64 inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeDumpError, TreeEnsemble
from app.errors import LtrError

CATEGORICAL_BIT = 1
DEFAULT_LEFT_BIT = 2
MISSING_NONE, MISSING_ZERO, MISSING_NAN = 0, 1, 2

# Objectives whose Booster.predict() is the raw sum of trees (no sigmoid, softmax or exp).
IDENTITY_OBJECTIVES = {
    "lambdarank",
    "rank_xendcg",
    "regression",
    "regression_l1",
    "huber",
    "fair",
    "quantile",
    "mape",
}


class ModelFormatError(LtrError, ValueError):
    """A model file we cannot convert faithfully; the message says why."""


@dataclass
class _Sections:
    header: dict[str, str]
    trees: list[tuple[int, dict[str, str]]]  # (line of `Tree=i`, the block's key=value pairs)
    tree_offsets: list[int]  # byte offset of each `Tree=i` line
    ended: bool  # the `end of trees` line was seen
    last_line: int
    first_line: str


def _sections(model_text: str) -> _Sections:
    """The header's key=value pairs and each `Tree=i` block's, with where each block starts."""
    found = _Sections({}, [], [], False, 0, "")
    current = found.header
    offset = 0
    for lineno, raw in enumerate(model_text.splitlines(keepends=True), start=1):
        start, offset = offset, offset + len(raw.encode("utf-8"))
        found.last_line = lineno
        line = raw.strip()
        if lineno == 1:
            found.first_line = line
        if line == "end of trees":
            found.ended = True
            break
        if not line or "=" not in line:
            continue
        key, _, value = line.partition("=")
        if key == "Tree":
            current = {}
            found.trees.append((lineno, current))
            found.tree_offsets.append(start)
            continue
        current[key] = value
    return found


def _check_complete(found: _Sections, source: str) -> None:
    """Refuse a cut-short or inconsistent file before LightGBM sees it (at verification): its
    loader aborts the whole process (`Log::Fatal` inside an OpenMP loop) instead of raising."""
    if not found.ended:
        where = f"in Tree={len(found.trees) - 1}" if found.trees else "in the header"
        raise ModelFormatError(
            f"{source}:{found.last_line}: truncated model: the file ends {where}, "
            "with no 'end of trees' line"
        )
    if "tree_sizes" not in found.header:
        return
    try:
        sizes = [int(v) for v in found.header["tree_sizes"].split()]
    except ValueError:
        raise ModelFormatError(f"{source}: tree_sizes= is not a list of integers") from None
    if len(sizes) != len(found.trees):
        raise ModelFormatError(
            f"{source}: tree_sizes= lists {len(sizes)} trees, the file has "
            f"{len(found.trees)} Tree= blocks"
        )
    # LightGBM seeks to each tree by these byte sizes, so every block must start exactly there.
    expected = found.tree_offsets[0] if found.tree_offsets else 0
    for (lineno, _), offset, size in zip(found.trees, found.tree_offsets, sizes, strict=True):
        if offset != expected:
            raise ModelFormatError(
                f"{source}:{lineno}: this tree starts at byte {offset}, tree_sizes= puts it at "
                f"{expected} (the file was edited or cut and joined)"
            )
        expected += size


def _array(block: dict[str, str], key: str, dtype: type, where: str) -> np.ndarray:
    if key not in block:
        raise ModelFormatError(f"{where}: missing {key}=")
    try:
        return np.array(block[key].split(), dtype=dtype)
    except ValueError as exc:
        raise ModelFormatError(f"{where}: bad {key}= ({exc})") from None


def _zero_band_threshold(threshold: np.ndarray) -> np.ndarray:
    """Thresholds float64 [n] for the raw value x that decide as LightGBM's `snap(x) <= t`.

    snap(x) is 0.0 for |x| <= ZERO_THRESHOLD and x otherwise, so only t inside the band differ:
    for 0 <= t < Z every x <= Z goes left (t becomes Z); for -Z <= t < 0 only x < -Z does (t
    becomes the double just below -Z). LightGBM writes t = -Z itself, e.g. for a split between
    negative values and zeros, where `x <= t` would send x = -Z left and LightGBM sends it right.
    """
    below = np.nextafter(-ZERO_THRESHOLD, -np.inf)
    out = np.where((threshold >= 0.0) & (threshold < ZERO_THRESHOLD), ZERO_THRESHOLD, threshold)
    return np.where((threshold >= -ZERO_THRESHOLD) & (threshold < 0.0), below, out)


def _tree(block: dict[str, str], where: str) -> Tree:
    if block.get("is_linear", "0") != "0":
        raise ModelFormatError(f"{where}: linear trees (linear_tree=true) are not supported")
    if block.get("num_cat", "0") != "0":
        raise ModelFormatError(f"{where}: categorical splits are not supported")
    leaf_value = _array(block, "leaf_value", np.float64, where)
    if leaf_value.size == 1:
        empty_i = np.zeros(0, dtype=np.int32)
        return Tree(empty_i, np.zeros(0), empty_i, empty_i, np.zeros(0, dtype=bool), leaf_value)
    decision = _array(block, "decision_type", np.int64, where)
    threshold = _zero_band_threshold(_array(block, "threshold", np.float64, where))
    if np.any(decision & CATEGORICAL_BIT):
        raise ModelFormatError(f"{where}: categorical splits are not supported")
    missing_type = (decision >> 2) & 3
    bit_left = (decision & DEFAULT_LEFT_BIT) != 0
    # MissingType::None sends NaN where 0.0 goes; the stored default bit is meaningless then
    # (0.0 <= t exactly when 0.0 <= the moved threshold: the move keeps the sign).
    default_left = np.where(missing_type == MISSING_NONE, threshold >= 0.0, bit_left)
    missing_zero = missing_type == MISSING_ZERO
    # Training counts per node: TreeSHAP's weights and expected value (LightGBM's own).
    has_counts = "internal_count" in block and "leaf_count" in block
    return Tree(
        split_feature=_array(block, "split_feature", np.int32, where),
        threshold=threshold,
        left=_array(block, "left_child", np.int32, where),
        right=_array(block, "right_child", np.int32, where),
        default_left=default_left.astype(bool),
        leaf_value=leaf_value,
        missing_zero=missing_zero if missing_zero.any() else None,
        cover=_array(block, "internal_count", np.float64, where) if has_counts else None,
        leaf_cover=_array(block, "leaf_count", np.float64, where) if has_counts else None,
    )


def convert_lightgbm(
    model_text: str, feature_names: list[str] | None = None, *, source: str = "model.txt"
) -> TreeEnsemble:
    """Parse a LightGBM text model (`Booster.save_model` / `model_to_string`).

    The result scores like `Booster.predict(X)` (raw score) on float [n_rows, n_features] input,
    NaN included. `meta` records the source, objective and the model's own feature names
    (`feature_names` overrides them). Errors (ModelFormatError) start with `source`.
    """
    found = _sections(model_text)
    header, blocks = found.header, found.trees
    # LightGBM's text models start with a `tree` line: a cut one is truncated, not foreign.
    if found.first_line == "tree" or "max_feature_idx" in header:
        _check_complete(found, source)
    if "max_feature_idx" not in header:
        raise ModelFormatError(f"{source}: not a LightGBM text model (no max_feature_idx= line)")
    if header.get("num_class", "1") != "1" or header.get("num_tree_per_iteration", "1") != "1":
        raise ModelFormatError(f"{source}: multiclass models are not supported")
    if "average_output" in header:
        raise ModelFormatError(f"{source}: random-forest models (average_output) are not supported")
    objective_line = header.get("objective", "")
    objective = objective_line.split(" ")[0]
    if objective and objective not in IDENTITY_OBJECTIVES:
        raise ModelFormatError(
            f"{source}: objective {objective!r} transforms its output; "
            "convert a ranking or regression model"
        )
    if "sqrt" in objective_line.split(" ")[1:]:
        # reg_sqrt=true: predict() squares the trees' sum back (sign(x) * x^2).
        raise ModelFormatError(
            f"{source}: objective {objective_line!r} (reg_sqrt) transforms its output; "
            "retrain without reg_sqrt"
        )
    try:
        num_features = int(header["max_feature_idx"]) + 1
    except ValueError:
        raise ModelFormatError(f"{source}: max_feature_idx is not an integer") from None
    names = feature_names or header.get("feature_names", "").split()
    if names and len(names) != num_features:
        raise ModelFormatError(
            f"{source}: {len(names)} feature names for a model of {num_features} features"
        )
    if not blocks:
        raise ModelFormatError(f"{source}: the model has no trees")
    trees = []
    for lineno, block in blocks:
        where = f"{source}:{lineno}"
        tree = _tree(block, where)
        try:
            tree.validate(num_features, where)
        except TreeDumpError as exc:
            raise ModelFormatError(str(exc)) from None
        trees.append(tree)
    meta = {"source": "lightgbm", "objective": objective, "feature_names": names or None}
    return TreeEnsemble(num_features=num_features, trees=trees, base_score=0.0, meta=meta)
