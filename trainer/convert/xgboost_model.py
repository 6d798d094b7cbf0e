"""XGBoost JSON model (`Booster.save_model("m.json")`) → tree dump, parsed by us.

XGBoost sends `x < split_condition` left, comparing float32 values. For float32 x,
`x < c` is `x <= nextafter(c, -inf)` in float32, and that float32 number is exact in float64,
so the dump's `<=` rule with that threshold routes every float32 input exactly as XGBoost does.
A leaf's value is its `split_conditions` entry (XGBoost stores the leaf value in that slot).
For the identity-link objectives we accept, `predict()` = base_score + sum of leaf values.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from app.artifacts.tree_dump import Tree, TreeDumpError, TreeEnsemble
from trainer.convert.lightgbm_model import ModelFormatError

IDENTITY_PREFIXES = ("rank:", "reg:squarederror", "reg:absoluteerror", "reg:pseudohuber")
IDENTITY_OBJECTIVES = {"reg:linear", "reg:quantileerror", "reg:squaredlogerror"}


def _base_score(raw: Any, source: str) -> float:
    """`"5E-1"` in XGBoost 1.x/2.x, `"[5E-1]"` (one per target) in 3.x."""
    text = str(raw).strip().strip("[]")
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ModelFormatError(f"{source}: base_score {raw!r} is not a number") from None
    if len(values) != 1:
        raise ModelFormatError(f"{source}: multi-target models are not supported")
    return float(np.float32(values[0]))


def _tree(raw: dict[str, Any], num_features: int, where: str) -> Tree:
    try:
        left_children = np.asarray(raw["left_children"], dtype=np.int64)
        right_children = np.asarray(raw["right_children"], dtype=np.int64)
        split_indices = np.asarray(raw["split_indices"], dtype=np.int64)
        conditions = np.asarray(raw["split_conditions"], dtype=np.float32)
        default_left = np.asarray(raw["default_left"], dtype=bool)
        split_type = np.asarray(raw.get("split_type", []), dtype=np.int64)
        leaf_vector = int(raw.get("tree_param", {}).get("size_leaf_vector", "1"))
        # Hessian sums per node: TreeSHAP's weights (XGBoost's `cover`); old dumps may lack it.
        hessians = np.asarray(raw.get("sum_hessian", []), dtype=np.float32)
    except KeyError as exc:
        raise ModelFormatError(f"{where}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ModelFormatError(f"{where}: {exc}") from None
    if leaf_vector > 1:
        raise ModelFormatError(f"{where}: vector leaves (multi-target) are not supported")
    if split_type.size and np.any(split_type != 0):
        raise ModelFormatError(f"{where}: categorical splits are not supported")
    n = left_children.size
    if not (right_children.size == split_indices.size == conditions.size == n) or n == 0:
        raise ModelFormatError(f"{where}: node arrays differ in length")
    # Walk from the root so pruned (deleted) nodes, still present in the arrays, drop out.
    # Internal nodes are numbered in visiting order (root = 0), leaves 0..n_leaves-1.
    internal: list[int] = []
    leaves: list[int] = []
    new_index = np.zeros(n, dtype=np.int64)
    stack = [0]
    while stack:
        node = stack.pop()
        if not 0 <= node < n or len(internal) + len(leaves) > n:
            raise ModelFormatError(f"{where}: node arrays are not a tree")
        if left_children[node] < 0:
            new_index[node] = ~len(leaves)
            leaves.append(node)
        else:
            new_index[node] = len(internal)
            internal.append(node)
            stack += [int(right_children[node]), int(left_children[node])]
    internal_ids = np.asarray(internal, dtype=np.int64)
    leaf_ids = np.asarray(leaves, dtype=np.int64)
    cond = conditions[internal_ids]
    with np.errstate(over="ignore"):  # below -float32 max is -inf, which is what we want
        threshold = np.nextafter(cond, np.float32(-np.inf)).astype(np.float64)
    return Tree(
        split_feature=split_indices[internal_ids].astype(np.int32),
        threshold=threshold,
        left=new_index[left_children[internal_ids]].astype(np.int32),
        right=new_index[right_children[internal_ids]].astype(np.int32),
        default_left=default_left[internal_ids],
        leaf_value=conditions[leaf_ids].astype(np.float64),
        cover=hessians[internal_ids].astype(np.float64) if hessians.size == n else None,
        leaf_cover=hessians[leaf_ids].astype(np.float64) if hessians.size == n else None,
    )


NOT_JSON = "not JSON (save the model with Booster.save_model('model.json'))"
# A JSON object's opening: a model meant to be JSON (a UBJSON `{L...` model is not).
_JSON_START = re.compile(rb"\s*\{\s*(\"|\})")


def _json_error(model_json: bytes, exc: json.JSONDecodeError, source: str) -> str:
    """One line for a JSON document that does not parse: where, and whether it is cut short."""
    if not _JSON_START.match(model_json):
        return f"{source}: {NOT_JSON}"
    where = f"{source}:{exc.lineno}:{exc.colno}"
    # An error at the very end means the text stopped mid-document (a partial copy or download).
    if exc.pos >= len(exc.doc.rstrip()):
        return f"{where}: truncated JSON, the file ends inside the model ({exc.msg})"
    return f"{where}: invalid JSON ({exc.msg})"


def convert_xgboost(model_json: bytes, *, source: str = "model.json") -> TreeEnsemble:
    """Parse an XGBoost JSON model; the result scores like `Booster.predict(DMatrix(X))`.

    Input rows are float32 [n_rows, n_features] (XGBoost itself reads float32), NaN = missing.
    Errors (ModelFormatError) start with `source`.
    """
    try:
        doc = json.loads(model_json)
        learner = doc["learner"]
        booster = learner["gradient_booster"]
        params = learner["learner_model_param"]
        objective = learner["objective"]["name"]
    except json.JSONDecodeError as exc:
        raise ModelFormatError(_json_error(model_json, exc, source)) from None
    except UnicodeDecodeError:
        raise ModelFormatError(f"{source}: {NOT_JSON}") from None
    except (KeyError, TypeError):
        raise ModelFormatError(f"{source}: not an XGBoost JSON model") from None
    if booster.get("name") != "gbtree":
        raise ModelFormatError(f"{source}: booster {booster.get('name')!r} is not supported")
    if int(params.get("num_class", "0")) > 1 or int(params.get("num_target", "1")) > 1:
        raise ModelFormatError(f"{source}: multiclass / multi-target models are not supported")
    if not (objective.startswith(IDENTITY_PREFIXES) or objective in IDENTITY_OBJECTIVES):
        raise ModelFormatError(
            f"{source}: objective {objective!r} transforms its output; "
            "convert a ranking or regression model"
        )
    num_features = int(params["num_feature"])
    trees = []
    for i, raw in enumerate(booster["model"]["trees"]):
        where = f"{source}: tree {i}"
        tree = _tree(raw, num_features, where)
        try:
            tree.validate(num_features, where)
        except TreeDumpError as exc:
            raise ModelFormatError(str(exc)) from None
        trees.append(tree)
    if not trees:
        raise ModelFormatError(f"{source}: the model has no trees")
    names = list(learner.get("feature_names") or []) or None
    meta = {"source": "xgboost", "objective": objective, "feature_names": names}
    base = _base_score(params.get("base_score", "0.5"), source)
    return TreeEnsemble(num_features=num_features, trees=trees, base_score=base, meta=meta)


def early_stopping_note(model_json: bytes, trees: int) -> str | None:
    """What to tell a user whose model recorded an early-stopping `best_iteration` before its
    last round: the dump keeps every tree, as `Booster.predict` scores, while the scikit-learn
    wrappers' `predict` stops at the best round."""
    try:
        learner = json.loads(model_json)["learner"]
        best = int(learner.get("attributes", {})["best_iteration"])
        per_round = int(
            learner["gradient_booster"]["model"]["gbtree_model_param"].get("num_parallel_tree", "1")
        )
    except (KeyError, TypeError, ValueError):
        return None
    rounds = trees // max(per_round, 1)
    if best + 1 >= rounds:
        return None
    return (
        f"the model records best_iteration={best} (early stopping) but holds {rounds} rounds: "
        f"all {rounds} were converted, as Booster.predict scores; XGBRanker.predict would use "
        f"the first {best + 1}. To serve those, save booster[: {best + 1}] and convert that."
    )
