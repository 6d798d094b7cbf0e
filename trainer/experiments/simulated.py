"""Online experiments on the simulator (known truth), without HTTP: the simulator's users,
documents, graded relevance and position-based click model, ranked by two model versions of
known true NDCG@10, credited and tested by the same team-draft, credit and statistics code that
the service and `ltr experiment` use.

A model version here is a deterministic function, as a real one is: the user-blind expected
relevance plus an error that is fixed per (version, query, candidate), so a query that comes
back is ranked the same way every time. Versions of one model share part of their errors (the
same features and much the same training data make them wrong about the same documents): a
version's error is `noise * (sqrt(rho) * common + sqrt(1 - rho) * own)`, with `common` drawn
once per world and `own` from the version's seed, so two versions' errors have correlation
`rho` whatever their noise. Quality is set by the noise, and each version's true NDCG@10 is
measured exactly on the query pool the experiment draws from.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

import numpy as np

from app.experiments.assignment import assign
from app.experiments.spec import CANDIDATE, ExperimentSpec
from app.experiments.team_draft import team_draft_batch
from trainer.experiments.credit import interleaving_outcomes, team_clicks
from trainer.experiments.statistics import ArmTotals, ab_result, interleaving_result
from trainer.simulate.clicks import ClickModel
from trainer.simulate.config import SimulationConfig
from trainer.simulate.documents import draw_documents
from trainer.simulate.generator import World

# The interleaving tests the simulator follows side by side (first time each is significant):
# `click_difference`, what `ltr experiment decide` uses, tests the candidate's team clicks minus
# the control's per clicked impression; `sign` tests the sign of that difference (+1 win, -1
# loss, 0 tie), what decisions used before; `wins_losses` the sign on non-tied impressions.
DECIDE_TEST = "click_difference"
INTERLEAVING_TESTS = ("sign", "wins_losses", "click_difference")


@dataclass(frozen=True)
class QueryBatch:
    rows: np.ndarray  # int64 [m], the queries' rows in the pool
    user_index: np.ndarray  # int64 [m]
    labels: np.ndarray  # int64 [m, L]
    base: np.ndarray  # float64 [m, L], user-blind expected relevance score


@dataclass(frozen=True)
class Ranker:
    """A model version: its error sd, the seed of its own errors, and how much of its error
    it shares with every other version of the world (the correlation of two versions')."""

    noise: float
    seed: int
    correlation: float = 0.0


class OnlineWorld:
    """The simulator's world, serving lists of `list_length` candidates.

    Drawing documents is the slow part of the simulator (~35 us a query), so a world draws a
    pool of `pool_queries` queries (user, candidates, graded labels) once, and experiments
    replay queries sampled from it, as a query log repeats its queries: a query served twice
    gets the same ranking from a version, and fresh clicks. True NDCG is measured on the same
    pool."""

    def __init__(
        self,
        config: SimulationConfig,
        list_length: int = 10,
        pool_queries: int = 200_000,
        seed: int = 0,
        click_propensity_sd: float = 0.0,
    ) -> None:
        self.world = World.build(config)
        self.clicks = ClickModel(config.eta, config.click_noise, config.logging_noise)
        self.length = list_length
        self.user_ids = self.world.users.user_id.astype(str)
        self.pool = self._draw(pool_queries, np.random.default_rng(seed))
        # Optional per-user click propensity (a multiplier with mean 1, lognormal): real users
        # differ in how much they click, which A/B pays for in variance and interleaving, a
        # within-list comparison, does not. 0 = the simulator's homogeneous click model.
        sd = click_propensity_sd
        rng = np.random.default_rng(seed + 1)
        self.propensity = np.exp(rng.normal(-(sd**2) / 2, sd, self.user_ids.size)) if sd else None
        # The part of the error every version of the model shares.
        self.common = np.random.default_rng(seed + 2).standard_normal(self.pool.base.shape)
        discount = 1.0 / np.log2(np.arange(2, list_length + 2))
        self._discount = discount
        self._ideal = (2.0 ** np.sort(self.pool.labels, axis=1)[:, ::-1] - 1.0) @ discount

    def _draw(self, m: int, rng: np.random.Generator) -> QueryBatch:
        w, length = self.world, self.length
        docs = draw_documents(
            np.full(m, length),
            w.catalog,
            w.relevance.population_taste(),
            w.config.num_features,
            rng,
        )
        users = w.users.sample_queries(m, rng)
        types = w.users.true_type[users][docs.query_index]
        rel = w.relevance
        labels = rel.draw_labels(docs.match, docs.quality, docs.category, docs.price_z, types, rng)
        base = rel.expected_score(docs.match, docs.quality, docs.category, docs.price_z, None)
        return QueryBatch(
            np.arange(m, dtype=np.int64), users, labels.reshape(m, length), base.reshape(m, length)
        )

    def queries(self, m: int, rng: np.random.Generator) -> QueryBatch:
        """`m` queries sampled from the pool (uniformly, with repeats)."""
        rows = rng.integers(0, self.pool.user_index.size, m)
        p = self.pool
        return QueryBatch(rows, p.user_index[rows], p.labels[rows], p.base[rows])

    def scores(self, ranker: Ranker) -> np.ndarray:
        """The version's score of every pool query's candidates (float64 [Q, L]): fixed per
        (version, query, candidate), as a deployed model's are."""
        rho = ranker.correlation
        own = np.random.default_rng([ranker.seed, 7919]).standard_normal(self.pool.base.shape)
        error = math.sqrt(rho) * self.common + math.sqrt(1.0 - rho) * own
        return self.pool.base + ranker.noise * error

    def order(self, ranker: Ranker) -> np.ndarray:
        """The version's ranking of every pool query: item indices best first (int64 [Q, L])."""
        return np.argsort(-self.scores(ranker), axis=1, kind="stable")

    def click(
        self, labels_served: np.ndarray, users: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Clicks (int8 [m, L]) on lists whose grades by served position are given, for the
        users (int [m]) who issued them."""
        m, length = labels_served.shape
        if self.propensity is None:
            positions = np.tile(np.arange(1, length + 1), m)
            return self.clicks.click(positions, labels_served.ravel(), rng).reshape(m, length)
        p = self.clicks.examination(np.arange(1, length + 1))[None, :] * (
            self.clicks.attractiveness(labels_served)
        )
        p = np.minimum(p * self.propensity[users][:, None], 1.0)
        return (rng.random(p.shape) < p).astype(np.int8)

    def true_ndcg(self, order: np.ndarray) -> float:
        """NDCG@L of a ranking of the pool (gain 2^l - 1, log2 discount; a list without
        relevant documents scores 1), averaged over the pool's queries."""
        served = np.take_along_axis(self.pool.labels, order, axis=1)
        dcg = (2.0**served - 1.0) @ self._discount
        ideal = self._ideal
        return float(np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 1.0).mean())

    def noise_for(
        self, target: float, seed: int, correlation: float, lo: float = 0.0, hi: float = 20.0
    ) -> float:
        """The noise whose version (seed, correlation) has true NDCG `target` (bisection on
        the same errors throughout, so NDCG falls steadily with the noise)."""
        for _ in range(25):
            mid = (lo + hi) / 2
            value = self.true_ndcg(self.order(Ranker(mid, seed, correlation)))
            lo, hi = (mid, hi) if value > target else (lo, mid)
        return (lo + hi) / 2


@dataclass
class Trace:
    """When each method first reached significance (impressions; None = not within budget)."""

    interleave_valid: int | None = None  # always-valid p < alpha, DECIDE_TEST
    interleave_fixed: int | None = None  # fixed-horizon sign test p < alpha at a look
    ab_valid: int | None = None
    ab_fixed: int | None = None
    interleave_sign: int = 0  # sign of the preference when it was decided
    ab_sign: int = 0
    final_fixed_interleave: float = 1.0  # the fixed-horizon p at the last look
    final_fixed_ab: float = 1.0
    impressions: int = 0
    # Every interleaving test in INTERLEAVING_TESTS: first always-valid p < alpha, its sign.
    tests_valid: dict[str, int | None] = field(default_factory=dict)
    tests_sign: dict[str, int] = field(default_factory=dict)
    control_ndcg: float = 0.0  # the two versions' true NDCG@10 on the pool
    candidate_ndcg: float = 0.0
    top_agreement: float = 0.0  # share of served queries whose two top results are the same
    looks: list[int] = field(default_factory=list)


def _interleaving_tests(
    outcomes: np.ndarray, difference: np.ndarray, clicked: np.ndarray, impressions: int
) -> dict[str, tuple[float, float]]:
    """(always-valid p, effect) of each interleaving test."""
    sign = interleaving_result(outcomes[clicked], impressions=impressions)
    wl = interleaving_result(outcomes[outcomes != 0], impressions=impressions)
    # As trainer.experiments.analysis calls it for `decide`.
    diff = interleaving_result(
        outcomes[clicked], impressions=impressions, differences=difference[clicked]
    )
    return {
        "sign": (sign.p_always_valid, sign.preference),
        "wins_losses": (wl.p_always_valid, wl.preference),
        "click_difference": (diff.p_always_valid, diff.direction),
    }


def simulate_experiment(
    world: OnlineWorld,
    control: Ranker,
    candidate: Ranker,
    seed: int,
    *,
    max_impressions: int,
    min_impressions: int = 500,
    alpha: float = 0.05,
    methods: tuple[str, ...] = ("interleave", "ab"),
) -> Trace:
    """One simulated experiment: the same stream of queries is served by team-draft
    interleaving and by an A/B split (users hashed into arms as the service does), looked at
    after every chunk (chunks grow by 10 %), until each method is significant (interleaving:
    every test in INTERLEAVING_TESTS) or the budget is spent."""
    rng = np.random.default_rng(seed)
    spec = ExperimentSpec(
        name="sim",
        model="sim",
        control="control",
        candidate="candidate",
        mode="ab",
        traffic=1.0,
        salt=f"sim{seed}",
        started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    n_users = world.user_ids.size
    order_c_pool, order_t_pool = world.order(control), world.order(candidate)
    trace = Trace(
        control_ndcg=world.true_ndcg(order_c_pool), candidate_ndcg=world.true_ndcg(order_t_pool)
    )
    arm_of_user = np.fromiter(
        (assign(spec, uid, "") for uid in world.user_ids), dtype=np.int8, count=n_users
    )
    user_imps = np.zeros(n_users)
    user_clicks = np.zeros(n_users)
    outcomes: list[np.ndarray] = []
    differences: list[np.ndarray] = []
    clicked_any: list[np.ndarray] = []
    want_il, want_ab = "interleave" in methods, "ab" in methods
    pending = set(INTERLEAVING_TESTS) if want_il else set()
    agree = 0
    done = 0
    while done < max_impressions and (pending or want_ab):
        m = int(min(max(500, done // 10), max_impressions - done))
        batch = world.queries(m, rng)
        order_c = order_c_pool[batch.rows]
        order_t = order_t_pool[batch.rows]
        agree += int((order_c[:, 0] == order_t[:, 0]).sum())
        done += m
        trace.looks.append(done)
        if pending:
            coins = rng.random(order_c.shape) < 0.5
            merged, teams = team_draft_batch(order_c, order_t, coins)
            clicks = world.click(
                np.take_along_axis(batch.labels, merged, axis=1), batch.user_index, rng
            )
            ctrl, cand = team_clicks(clicks, teams)
            outcomes.append(interleaving_outcomes(ctrl, cand))
            differences.append(cand - ctrl)
            clicked_any.append(np.asarray(clicks.sum(axis=1) > 0))
            s, d, c = (np.concatenate(x) for x in (outcomes, differences, clicked_any))
            r = interleaving_result(s[c], impressions=done)
            trace.final_fixed_interleave = r.p_value
            if done >= min_impressions:
                if trace.interleave_fixed is None and r.p_value < alpha:
                    trace.interleave_fixed = done
                for name, (p, effect) in _interleaving_tests(s, d, c, done).items():
                    if name in pending and p < alpha:
                        pending.discard(name)
                        trace.tests_valid[name] = done
                        trace.tests_sign[name] = int(np.sign(effect))
            if DECIDE_TEST in trace.tests_valid and trace.interleave_valid is None:
                trace.interleave_valid = trace.tests_valid[DECIDE_TEST]
                trace.interleave_sign = trace.tests_sign[DECIDE_TEST]
        if want_ab:
            arm = arm_of_user[batch.user_index]
            served = np.where((arm == CANDIDATE)[:, None], order_t, order_c)
            clicks = world.click(
                np.take_along_axis(batch.labels, served, axis=1), batch.user_index, rng
            )
            user_imps += np.bincount(batch.user_index, minlength=n_users)
            user_clicks += np.bincount(batch.user_index, clicks.sum(axis=1), minlength=n_users)
            seen = user_imps > 0
            control_totals = ArmTotals(
                user_imps[seen & (arm_of_user == 0)], user_clicks[seen & (arm_of_user == 0)]
            )
            cand_totals = ArmTotals(
                user_imps[seen & (arm_of_user == 1)], user_clicks[seen & (arm_of_user == 1)]
            )
            r_ab = ab_result("clicks", control_totals, cand_totals)
            trace.final_fixed_ab = r_ab.p_value
            if done >= min_impressions:
                if trace.ab_fixed is None and r_ab.p_value < alpha:
                    trace.ab_fixed = done
                if r_ab.p_always_valid < alpha:
                    trace.ab_valid = done
                    trace.ab_sign = int(np.sign(r_ab.difference))
                    want_ab = False
    for name in INTERLEAVING_TESTS:
        trace.tests_valid.setdefault(name, None)
        trace.tests_sign.setdefault(name, 0)
    trace.impressions = done
    trace.top_agreement = agree / max(done, 1)
    return trace
