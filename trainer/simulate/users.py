"""Latent user types and the users drawn from them, with observable profiles.

A type fixes the user's taste (category affinity, preferred price) and skews their profile
(home country, age, price level, device, trips per year). The profile is only a noisy view of
the type, which is what a model sees through profile → cluster id → embedding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer.simulate.config import SimulationConfig

# Fixed vocabularies, mirrored by cluster_scheme.toml.
COUNTRIES: tuple[str, ...] = ("US", "GB", "DE", "FR", "ES", "IT", "JP", "CN", "BR", "IN")
DEVICES: tuple[str, ...] = ("mobile", "desktop", "tablet")
AGE_RANGE = (18, 80)
PRICE_LEVELS = (1, 5)
HOME_COUNTRY_SHARE = 0.6  # probability that a user lives in their type's home country
# Price level follows the preferred price (-1.5..1.5 → about 1..5) with noise.
PRICE_LEVEL_SLOPE = 1.3
PRICE_LEVEL_NOISE = 0.6
PROFILE_FIELDS: tuple[str, ...] = ("country", "age", "price_level", "device", "trips_per_year")


@dataclass(frozen=True)
class UserTypes:
    """Parameters of the K latent types; arrays are indexed by type first."""

    weights: np.ndarray  # float64 [K], share of users of each type
    country_probs: np.ndarray  # float64 [K, n_countries]
    age_mean: np.ndarray  # float64 [K]
    age_sd: float
    price_preference: np.ndarray  # float64 [K], preferred standardised log price
    device_probs: np.ndarray  # float64 [K, n_devices]
    trips_rate: np.ndarray  # float64 [K], Poisson mean of trips per year
    category_affinity: np.ndarray  # float64 [K, n_categories]

    @property
    def count(self) -> int:
        return int(self.weights.size)

    def to_json(self) -> dict[str, Any]:
        return {
            "weights": self.weights.tolist(),
            "countries": list(COUNTRIES),
            "country_probs": self.country_probs.tolist(),
            "age_mean": self.age_mean.tolist(),
            "age_sd": self.age_sd,
            "price_preference": self.price_preference.tolist(),
            "devices": list(DEVICES),
            "device_probs": self.device_probs.tolist(),
            "trips_rate": self.trips_rate.tolist(),
            "category_affinity": self.category_affinity.tolist(),
            "profile": {
                "country": f"home country with p={HOME_COUNTRY_SHARE}, else Dirichlet spread",
                "age": f"clip(round(Normal(age_mean, age_sd)), {AGE_RANGE[0]}, {AGE_RANGE[1]})",
                "price_level": f"clip(round(3 + {PRICE_LEVEL_SLOPE} * price_preference"
                f" + Normal(0, {PRICE_LEVEL_NOISE})), 1, 5)",
                "device": "Categorical(device_probs)",
                "trips_per_year": "Poisson(trips_rate)",
                "query_activity": "LogNormal(0, 1) per user, normalised",
            },
        }


@dataclass(frozen=True)
class Users:
    """The user table; row i is user i."""

    user_id: np.ndarray  # str [n_users], e.g. `u0000042`
    true_type: np.ndarray  # int64 [n_users]
    country: np.ndarray  # str [n_users]
    age: np.ndarray  # int64 [n_users]
    price_level: np.ndarray  # int64 [n_users], 1..5
    device: np.ndarray  # str [n_users]
    trips_per_year: np.ndarray  # int64 [n_users]
    activity_cdf: np.ndarray  # float64 [n_users], cumulative share of queries issued

    @property
    def count(self) -> int:
        return int(self.user_id.size)

    def columns(self) -> dict[str, np.ndarray]:
        """The profile table as written: user_id, profile fields, then `true_type`."""
        return {
            "user_id": self.user_id,
            "country": self.country,
            "age": self.age,
            "price_level": self.price_level,
            "device": self.device,
            "trips_per_year": self.trips_per_year,
            "true_type": self.true_type,
        }

    def sample_queries(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Users issuing `n` queries, heavy users more often. Returns int64 [n] user indices."""
        picks = np.searchsorted(self.activity_cdf, rng.random(n), side="right")
        return np.minimum(picks, self.count - 1).astype(np.int64)


def _spread(k: int, lo: float, hi: float, rng: np.random.Generator) -> np.ndarray:
    """K values evenly spread over [lo, hi] in random order, so types stay distinguishable."""
    grid = np.linspace(lo, hi, k) if k > 1 else np.array([(lo + hi) / 2])
    return rng.permutation(grid)


def draw_user_types(config: SimulationConfig, rng: np.random.Generator) -> UserTypes:
    k, n_countries = config.user_types, len(COUNTRIES)
    weights = rng.dirichlet(np.full(k, 5.0))
    homes = rng.permutation(max(k, n_countries))[:k] % n_countries
    country_probs = rng.dirichlet(np.ones(n_countries), size=k) * (1 - HOME_COUNTRY_SHARE)
    country_probs[np.arange(k), homes] += HOME_COUNTRY_SHARE
    return UserTypes(
        weights=weights,
        country_probs=country_probs,
        age_mean=_spread(k, 24.0, 64.0, rng),
        age_sd=6.0,
        price_preference=_spread(k, -1.5, 1.5, rng),
        device_probs=rng.dirichlet(np.ones(len(DEVICES)), size=k),
        trips_rate=_spread(k, 1.0, 12.0, rng),
        category_affinity=rng.normal(0.0, 1.0, size=(k, config.categories)),
    )


def _draw_by_type(probs: np.ndarray, true_type: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One category per user from its type's row of `probs` (float [K, m]). Returns int64 [n].

    Inverse-CDF per type, so memory stays O(n) however many categories there are.
    """
    u = rng.random(true_type.size)
    out = np.empty(true_type.size, dtype=np.int64)
    cdf = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    for k in range(probs.shape[0]):
        mask = true_type == k
        out[mask] = np.searchsorted(cdf[k], u[mask], side="right")
    return np.minimum(out, probs.shape[1] - 1)


def draw_users(types: UserTypes, n_users: int, rng: np.random.Generator) -> Users:
    true_type = _draw_by_type(types.weights[None, :], np.zeros(n_users, dtype=np.int64), rng)
    country = np.asarray(COUNTRIES)[_draw_by_type(types.country_probs, true_type, rng)]
    age = np.clip(np.rint(rng.normal(types.age_mean[true_type], types.age_sd)), *AGE_RANGE)
    level = 3.0 + PRICE_LEVEL_SLOPE * types.price_preference[true_type]
    level = level + rng.normal(0.0, PRICE_LEVEL_NOISE, n_users)
    price_level = np.clip(np.rint(level), *PRICE_LEVELS)
    device = np.asarray(DEVICES)[_draw_by_type(types.device_probs, true_type, rng)]
    trips = rng.poisson(types.trips_rate[true_type])
    activity = rng.lognormal(0.0, 1.0, n_users)
    width = len(str(max(n_users - 1, 0)))
    return Users(
        user_id=np.asarray([f"u{i:0{max(width, 7)}d}" for i in range(n_users)]),
        true_type=true_type,
        country=country,
        age=age.astype(np.int64),
        price_level=price_level.astype(np.int64),
        device=device,
        trips_per_year=trips.astype(np.int64),
        activity_cdf=np.cumsum(activity) / activity.sum(),
    )
