"""Online experiments on the simulator (known truth), without HTTP: the simulator's users,
documents, graded relevance and position-based click model, ranked by two rankers of known
true NDCG@10, credited and tested by the same team-draft, credit and statistics code that the
service and `ltr experiment` use.

A ranker here is the user-blind expected relevance plus Gaussian noise of a given sd, drawn
afresh for every impression: its quality is set by the noise and its true NDCG@10 is measured
on a large sample, so "better by 0.02 NDCG@10" is exact up to sampling error.
"""

from __future__ import annotations

import datetime as dt
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


@dataclass(frozen=True)
class QueryBatch:
    user_index: np.ndarray  # int64 [m]
    labels: np.ndarray  # int64 [m, L]
    base: np.ndarray  # float64 [m, L], user-blind expected relevance score


class OnlineWorld:
    """The simulator's world, serving lists of `list_length` candidates.

    Drawing documents is the slow part of the simulator (~35 us a query), so a world draws a
    pool of `pool_queries` queries (user, candidates, graded labels) once, and experiments
    replay queries sampled from it, as a query log repeats its queries; rankings and clicks are
    drawn afresh for every impression. True NDCG is measured on the same pool."""

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
        return QueryBatch(users, labels.reshape(m, length), base.reshape(m, length))

    def queries(self, m: int, rng: np.random.Generator) -> QueryBatch:
        """`m` queries sampled from the pool."""
        rows = rng.integers(0, self.pool.user_index.size, m)
        p = self.pool
        return QueryBatch(p.user_index[rows], p.labels[rows], p.base[rows])

    def rank(self, batch: QueryBatch, noise: float, rng: np.random.Generator) -> np.ndarray:
        """Item indices best first (int64 [m, L]) of a ranker with the given noise sd."""
        scores = batch.base + noise * rng.standard_normal(batch.base.shape)
        return np.argsort(-scores, axis=1, kind="stable")

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

    def true_ndcg(self, noise: float, rng: np.random.Generator, repeats: int = 1) -> float:
        """Expected NDCG@L over the pool (gain 2^l - 1, log2 discount; a list without
        relevant documents scores 1)."""
        discount = 1.0 / np.log2(np.arange(2, self.length + 2))
        labels = self.pool.labels
        ideal = (2.0 ** np.sort(labels, axis=1)[:, ::-1] - 1.0) @ discount
        total = 0.0
        for _ in range(repeats):
            served = np.take_along_axis(labels, self.rank(self.pool, noise, rng), axis=1)
            dcg = (2.0**served - 1.0) @ discount
            total += float(np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 1.0).mean())
        return total / repeats

    def noise_for(self, target: float, seed: int, lo: float = 0.0, hi: float = 20.0) -> float:
        """The ranker noise whose true NDCG is `target` (bisection; NDCG falls with noise)."""
        for _ in range(25):
            mid = (lo + hi) / 2
            value = self.true_ndcg(mid, np.random.default_rng(seed))
            lo, hi = (mid, hi) if value > target else (lo, mid)
        return (lo + hi) / 2


@dataclass
class Trace:
    """When each method first reached significance (impressions; None = not within budget)."""

    interleave_valid: int | None = None  # always-valid p < alpha (what `decide` uses)
    interleave_fixed: int | None = None  # fixed-horizon sign test p < alpha at a look
    ab_valid: int | None = None
    ab_fixed: int | None = None
    interleave_sign: int = 0  # sign of the preference when it was decided
    ab_sign: int = 0
    final_fixed_interleave: float = 1.0  # the fixed-horizon p at the last look
    final_fixed_ab: float = 1.0
    impressions: int = 0
    looks: list[int] = field(default_factory=list)


def simulate_experiment(
    world: OnlineWorld,
    control_noise: float,
    candidate_noise: float,
    seed: int,
    *,
    max_impressions: int,
    min_impressions: int = 500,
    alpha: float = 0.05,
    methods: tuple[str, ...] = ("interleave", "ab"),
) -> Trace:
    """One simulated experiment: the same stream of queries is served by team-draft
    interleaving and by an A/B split (users hashed into arms as the service does), looked at
    after every chunk (chunks grow by 10 %), until each method is significant or the budget
    is spent."""
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
    arm_of_user = np.fromiter(
        (assign(spec, uid, "") for uid in world.user_ids), dtype=np.int8, count=n_users
    )
    user_imps = np.zeros(n_users)
    user_clicks = np.zeros(n_users)
    outcomes: list[np.ndarray] = []
    trace = Trace()
    want_il, want_ab = "interleave" in methods, "ab" in methods
    done = 0
    while done < max_impressions and (want_il or want_ab):
        m = int(min(max(500, done // 10), max_impressions - done))
        batch = world.queries(m, rng)
        order_c = world.rank(batch, control_noise, rng)
        order_t = world.rank(batch, candidate_noise, rng)
        done += m
        trace.looks.append(done)
        if want_il:
            coins = rng.random(order_c.shape) < 0.5
            merged, teams = team_draft_batch(order_c, order_t, coins)
            clicks = world.click(
                np.take_along_axis(batch.labels, merged, axis=1), batch.user_index, rng
            )
            outcomes.append(interleaving_outcomes(*team_clicks(clicks, teams)))
            s = np.concatenate(outcomes)
            r = interleaving_result(s[s != 0], impressions=done)
            trace.final_fixed_interleave = r.p_value
            if done >= min_impressions:
                if trace.interleave_fixed is None and r.p_value < alpha:
                    trace.interleave_fixed = done
                if r.p_always_valid < alpha:
                    trace.interleave_valid = done
                    trace.interleave_sign = int(np.sign(r.preference))
                    want_il = False
        if want_ab:
            arm = arm_of_user[batch.user_index]
            served = np.where((arm == CANDIDATE)[:, None], order_t, order_c)
            clicks = world.click(
                np.take_along_axis(batch.labels, served, axis=1), batch.user_index, rng
            )
            user_imps += np.bincount(batch.user_index, minlength=n_users)
            user_clicks += np.bincount(batch.user_index, clicks.sum(axis=1), minlength=n_users)
            seen = user_imps > 0
            control = ArmTotals(
                user_imps[seen & (arm_of_user == 0)], user_clicks[seen & (arm_of_user == 0)]
            )
            cand = ArmTotals(
                user_imps[seen & (arm_of_user == 1)], user_clicks[seen & (arm_of_user == 1)]
            )
            r_ab = ab_result("clicks", control, cand)
            trace.final_fixed_ab = r_ab.p_value
            if done >= min_impressions:
                if trace.ab_fixed is None and r_ab.p_value < alpha:
                    trace.ab_fixed = done
                if r_ab.p_always_valid < alpha:
                    trace.ab_valid = done
                    trace.ab_sign = int(np.sign(r_ab.difference))
                    want_ab = False
    trace.impressions = done
    return trace
