"""The TreeSHAP kernel (numba): exact Shapley values of tree ensembles, O(vertices x depth / 2)
per row and tree instead of Algorithm 2's O(leaves x depth^2).

The quantity is Lundberg et al.'s ("From local explanations to global understanding with
explainable AI for trees", Nature Machine Intelligence 2, 2020): for a leaf of value v whose
path has distinct features j with cover fractions z_j and o_j = 1 if x follows every split on
j along the path (else 0), feature i gets

    v (o_i - z_i) sum_{S subset of the others} |S|! (d - |S| - 1)! / d! prod_S o_j prod_rest z_j
  = v (o_i - z_i) integral_0^1 prod_{j != i} f_j(t) dt,    f_j(t) = z_j + t (o_j - z_j)

(the Shapley weight is a Beta integral). The integrand is a polynomial of degree < d, so a
Gauss-Legendre rule with ceil(d / 2) points integrates it exactly; every quantity is carried
as its values at those points, as GPUTreeShap and Linear TreeShap do (Mitchell et al. 2022;
Yu et al., "Linear TreeShap", NeurIPS 2022). Written as G(t) (o_i - z_i) / f_i(t) with
G = prod_j f_j, sums over leaves factor through the tree: G at a vertex is its parent's times
one factor, the sum of v G over the leaves below a vertex is its children's sum, and feature
i's term is attributed edge by edge. A feature split on again below an edge e changes f_i for
the leaves underneath, so e's coefficient is (o_e - z_e) / f_e minus the same at the previous
edge on f (telescoping, as in Linear TreeShap): summed along a path these leave exactly the
last edge's; each telescoped piece alone is rational in t, but the rule is linear, so the sum
is integrated exactly.

o is 0 or 1, so at each edge x is in one of three states: it follows every split on the
feature so far (hot), it left the feature's path at this edge (cold: the previous edge on the
feature was hot or there is none), or earlier (cold-cold: coefficient 0, factor z). The
factors and coefficients of the first two states are row-free: computed per edge and point
from the edge's z and Z and its ancestor's Z (app/explain/tree_tables.py) once per block of
rows, which is cheaper than reading them from precomputed tables four times the size. Per row
the kernel follows splits, multiplies (down the tree) and adds (up it).

Splits follow the tree dump's rule exactly (app/scoring/reference.py): NaN, and |x| <= 1e-35 on
`missing_zero` nodes, take the default direction; otherwise `x <= threshold` goes left.
"""

from __future__ import annotations

import numpy as np

from app.numba_jit import nogil_jit

# LightGBM's kZeroThreshold as the dump defines it (1e-35f widened to double). A literal, not an
# import: numba freezes globals into its on-disk cache, which only this file's changes refresh.
ZERO_THRESHOLD = 1.0000000180025095e-35
MAX_LANES = 16  # rows walked together: enough to fill vector registers, few enough for L1


@nogil_jit
def shap_values(  # type: ignore[no-untyped-def]
    x,  # float64 [n_rows, n_features]
    parent,
    child_left,
    child_right,
    is_left,
    feature,
    threshold,
    default_left,
    missing_zero,
    edge_feature,
    ancestor,
    edge_cover,
    big_z,
    big_z_above,
    value,
    vertex_offset,
    quad_points,
    quad_nodes,
    quad_weights,
    out,  # float64 [n_rows, n_features + 1]; contributions are added to it
):
    """Adds each row's per-feature contributions of every tree to out[:, :n_features]."""
    n = x.shape[0]
    trees = vertex_offset.shape[0] - 1
    if n == 0 or trees == 0:
        return
    blocks = (n + MAX_LANES - 1) // MAX_LANES
    lanes = (n + blocks - 1) // blocks  # equal blocks: 10 rows are one block of 10, not 16 + 0
    # Whole vectors of 4 (10 rows walk as 12): no scalar remainder in the lane loops, ~12 %
    # faster for a top 10 even with the two spare lanes.
    lanes = (lanes + 3) // 4 * 4
    most = 0
    for t in range(trees):
        most = max(most, vertex_offset[t + 1] - vertex_offset[t])
    points = quad_points.max()
    g = np.empty((most, points, lanes), np.float64)  # prod of the path's factors
    s = np.empty((most, points, lanes), np.float64)  # sum of v * g over the leaves below
    coef_hot = np.empty((most, points), np.float64)  # this tree's, weight folded in
    coef_cold = np.empty((most, points), np.float64)
    hot = np.zeros((most, lanes), np.float64)  # 1.0 where the row's edge state is hot
    cold = np.zeros((most, lanes), np.float64)  # 1.0 where it is cold
    goes_left = np.empty((most, lanes), np.bool_)
    acc = np.empty(lanes, np.float64)
    xb = np.empty((x.shape[1], lanes), np.float64)
    for start in range(0, n, lanes):
        rows = min(lanes, n - start)
        for r in range(lanes):  # a short last block repeats its last row in the spare lanes
            for j in range(x.shape[1]):
                xb[j, r] = x[start + min(r, rows - 1), j]
        for t in range(trees):
            vb = vertex_offset[t]
            nv = vertex_offset[t + 1] - vb
            nq = quad_points[t]
            for r in range(lanes):
                hot[0, r] = 1.0
                cold[0, r] = 0.0
            for q in range(nq):
                for r in range(lanes):
                    g[0, q, r] = 1.0
            for v in range(nv):  # preorder: a parent before its children
                k = vb + v
                if v > 0:
                    p = parent[k]
                    a = ancestor[k]
                    side = is_left[k]
                    for r in range(lanes):
                        open_path = a < 0 or hot[a, r] != 0.0
                        follows = goes_left[p, r] == side
                        hot[v, r] = 1.0 if open_path and follows else 0.0
                        cold[v, r] = 1.0 if open_path and not follows else 0.0
                    z = edge_cover[k]
                    ze = big_z[k]
                    za = big_z_above[k]
                    for q in range(nq):
                        # f(Z) = Z + t (1 - Z), the merged feature's factor while x follows
                        # it; cold, Z (1 - t). The ancestor's factor is divided out.
                        tq = quad_nodes[nq, q]
                        fe = ze + tq * (1.0 - ze)
                        inv_fa = 1.0 / (za + tq * (1.0 - za))
                        above = (1.0 - za) * inv_fa
                        coef_hot[v, q] = quad_weights[nq, q] * ((1.0 - ze) / fe - above)
                        coef_cold[v, q] = quad_weights[nq, q] * (-1.0 / (1.0 - tq) - above)
                        mh = fe * inv_fa - z
                        mc = ze * (1.0 - tq) * inv_fa - z
                        for r in range(lanes):
                            g[v, q, r] = g[p, q, r] * (z + hot[v, r] * mh + cold[v, r] * mc)
                if child_left[k] >= 0:
                    f = feature[k]
                    for r in range(lanes):
                        xv = xb[f, r]
                        missing = np.isnan(xv) or (missing_zero[k] and abs(xv) <= ZERO_THRESHOLD)
                        goes_left[v, r] = default_left[k] if missing else xv <= threshold[k]
            for v in range(nv - 1, 0, -1):  # children before their parent
                k = vb + v
                lc = child_left[k]
                if lc < 0:
                    leaf = value[k]
                    for q in range(nq):
                        for r in range(lanes):
                            s[v, q, r] = leaf * g[v, q, r]
                else:
                    rc = child_right[k]
                    for q in range(nq):
                        for r in range(lanes):
                            s[v, q, r] = s[lc, q, r] + s[rc, q, r]
                live = 0.0
                for r in range(lanes):
                    live += hot[v, r] + cold[v, r]
                if live == 0.0:  # cold-cold everywhere: coefficient 0
                    continue
                for r in range(lanes):
                    acc[r] = 0.0
                for q in range(nq):
                    ch = coef_hot[v, q]
                    cc = coef_cold[v, q]
                    for r in range(lanes):
                        acc[r] += s[v, q, r] * (hot[v, r] * ch + cold[v, r] * cc)
                f = edge_feature[k]
                for r in range(rows):
                    out[start + r, f] += acc[r]
