"""Graded relevance 0..4: query match + quality + user-type x category/price affinity + noise.

score = w_match * match + w_quality * quality
        + personalization * (affinity[type, category] - price_weight * (price_z - pref[type])^2)
        + Normal(0, label_noise)
label = number of calibrated thresholds the score reaches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer.simulate.config import MAX_LABEL, MIN_FEATURES, SimulationConfig
from trainer.simulate.documents import Catalog, draw_documents
from trainer.simulate.users import Users, UserTypes

W_MATCH = 3.0
W_QUALITY = 1.5
PRICE_WEIGHT = 0.5
CALIBRATION_SAMPLE = 200_000


@dataclass(frozen=True)
class RelevanceModel:
    w_match: float
    w_quality: float
    personalization: float
    price_weight: float
    label_noise: float
    thresholds: np.ndarray  # float64 [MAX_LABEL], increasing score cut points of grades 1..4
    category_affinity: np.ndarray  # float64 [K, n_categories]
    price_preference: np.ndarray  # float64 [K]
    type_weights: np.ndarray  # float64 [K]

    def personal(self, category: np.ndarray, price_z: np.ndarray, user_type: np.ndarray) -> Any:
        """The user-type term per document (all int/float [n_docs]). Returns float64 [n_docs]."""
        gap = price_z - self.price_preference[user_type]
        return self.category_affinity[user_type, category] - self.price_weight * gap**2

    def expected_personal(self, category: np.ndarray, price_z: np.ndarray) -> Any:
        """The user-type term averaged over the type prior: the best guess without the user."""
        w, pref = self.type_weights, self.price_preference
        mean_pref = float(w @ pref)
        var_pref = float(w @ (pref - mean_pref) ** 2)
        taste = self.population_taste()
        return taste[category] - self.price_weight * ((price_z - mean_pref) ** 2 + var_pref)

    def population_taste(self) -> Any:
        """The population-average category affinity (float64 [n_categories])."""
        return self.type_weights @ self.category_affinity

    def expected_score(
        self,
        match: np.ndarray,
        quality: np.ndarray,
        category: np.ndarray,
        price_z: np.ndarray,
        user_type: np.ndarray | None,
    ) -> Any:
        """Noise-free score (float64 [n_docs]); `user_type` None marginalises over the types."""
        personal = (
            self.expected_personal(category, price_z)
            if user_type is None
            else self.personal(category, price_z, user_type)
        )
        return self.w_match * match + self.w_quality * quality + self.personalization * personal

    def grade(self, score: np.ndarray) -> np.ndarray:
        """Labels 0..4 (int64 [n_docs]) of scores (float [n_docs])."""
        return np.searchsorted(self.thresholds, score, side="right").astype(np.int64)

    def draw_labels(
        self,
        match: np.ndarray,
        quality: np.ndarray,
        category: np.ndarray,
        price_z: np.ndarray,
        user_type: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        score = self.expected_score(match, quality, category, price_z, user_type)
        return self.grade(score + rng.normal(0.0, self.label_noise, score.size))

    def to_json(self) -> dict[str, Any]:
        return {
            "formula": __doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
            "w_match": self.w_match,
            "w_quality": self.w_quality,
            "personalization": self.personalization,
            "price_weight": self.price_weight,
            "label_noise": self.label_noise,
            "thresholds": self.thresholds.tolist(),
        }


def calibrate(
    config: SimulationConfig,
    types: UserTypes,
    users: Users,
    catalog: Catalog,
    rng: np.random.Generator,
) -> RelevanceModel:
    """Label thresholds that give `config.label_shares`, fitted on a pilot sample of documents
    drawn like the real ones (so they are fixed before streaming starts)."""
    model = RelevanceModel(
        w_match=W_MATCH,
        w_quality=W_QUALITY,
        personalization=config.personalization,
        price_weight=PRICE_WEIGHT,
        label_noise=config.label_noise,
        thresholds=np.zeros(MAX_LABEL),
        category_affinity=types.category_affinity,
        price_preference=types.price_preference,
        type_weights=types.weights,
    )
    # The pilot documents come from the real generator, so their distribution is the real one.
    docs = draw_documents(
        np.full(CALIBRATION_SAMPLE // 20, 20),
        catalog,
        model.population_taste(),
        MIN_FEATURES,
        rng,
    )
    # Types weighted by how many queries their users issue, as in the stream.
    user_type = np.repeat(users.true_type[users.sample_queries(docs.offsets.size - 1, rng)], 20)
    score = model.expected_score(docs.match, docs.quality, docs.category, docs.price_z, user_type)
    score = score + rng.normal(0.0, config.label_noise, score.size)
    cuts = np.cumsum(config.label_shares)[:MAX_LABEL]
    thresholds = np.quantile(score, np.clip(cuts, 0.0, 1.0))
    return RelevanceModel(**{**model.__dict__, "thresholds": thresholds})
