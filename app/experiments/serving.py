"""The /rerank hook of an experiment: which ranking a request in it gets, and what is logged.

Outside an experiment /rerank pays one dict lookup (`ModelRegistry.experiment`). Inside, in
`interleave` mode both versions score the request, at once on two threads when that pays (the
candidate on its own copy of the user embedding columns, if its embeddings differ) and the
rankings are merged by team draft; in
`ab` mode the assigned arm's version alone scores it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from app.experiments import draft_kernel
from app.experiments.assignment import assign
from app.experiments.score_both import NativeBeside, score_both
from app.experiments.spec import ARM_NAMES, CANDIDATE, CONTROL, TEAM_NAMES, ExperimentSpec
from app.experiments.team_draft import coin_bytes, coin_flips, team_draft_arrays
from app.registry.experiments import ActiveExperiment

if TYPE_CHECKING:
    from app.features.user_features import UserFeatures

# (model) -> (features, user vector) that model takes for this request, and its own user
# features (None when it takes the control's).
Inputs = tuple[np.ndarray, np.ndarray | None, "UserFeatures | None"]
InputsFn = Callable[[Any], Awaitable[Inputs]]


class Scoring(Protocol):
    """How the service scores a request (app.api.routes): float64 [n] scores of a model for
    features [n, n_features] and an optional user vector."""

    def inline(self, rows: int) -> bool:
        """Whether a request of `rows` is scored on the event loop's thread."""
        ...

    def now(
        self, model: Any, features: np.ndarray, user: np.ndarray | None, learn: bool = False
    ) -> np.ndarray:
        """On the calling thread (the native scorers release the GIL). `learn`: its time goes
        into the model's cost per row (app.scoring.cost), which `beside_pays` reads: only an
        interleaved request's candidate needs it, so other requests skip the bookkeeping."""
        ...

    def prepare_beside(
        self, model: Any, features: np.ndarray, user: np.ndarray | None
    ) -> NativeBeside | None:
        """`model`'s scoring as a call for the native beside worker, or None where it cannot
        be one (not compiled trees, or no worker in this process)."""
        ...

    def beside_pays(self, model: Any, rows: int) -> bool:
        """Whether scoring `rows` with `model` on a second thread, while this one scores the
        other version, is expected to save more than the hand-off costs."""
        ...

    def __call__(
        self, model: Any, features: np.ndarray, user: np.ndarray | None
    ) -> Awaitable[np.ndarray]:
        """Inline or in a worker thread, by the request's size."""
        ...


@dataclass(frozen=True)
class Scored:
    """A version and the inputs it scored a request with: what explains its scores."""

    model: Any  # LoadedModel
    features: np.ndarray  # float32 [n, n_features]
    user: np.ndarray | None


@dataclass(frozen=True)
class ExperimentRanking:
    model: Any  # the LoadedModel the response names (the arm served; control when interleaved)
    scores: np.ndarray  # float64 [n], the score shown for each input row
    order: list[int]  # input indices in served order, cut to top_k
    log: dict[str, Any]  # the impression's `experiment` field
    teams: list[int] | None  # team of each served result (interleave), else None
    served: Scored  # the arm served (ab) or the control (interleave)
    candidate: Scored | None = None  # interleave: the candidate, whose scores its teams show
    # The candidate's own user features, when it scored the request with them.
    candidate_user: UserFeatures | None = None

    def answer_user(self, control: UserFeatures | None) -> UserFeatures | None:
        """The user features whose faults the answer reports (`degraded`, `reasons`), given the
        control's: the served arm's (ab), both versions' (interleave). The candidate reads its
        own embeddings key in Redis, and a fault there was only logged: the answer said
        degraded false with reasons [] while the candidate scored from its own copy."""
        own = self.candidate_user
        if own is None:
            return control
        if self.teams is None or control is None:
            return own
        reasons = control.reasons + [r for r in own.reasons if r not in control.reasons]
        return replace(control, degraded=control.degraded or own.degraded, reasons=reasons)

    def scored_by(self, position: int) -> Scored:
        """The version whose score the `position`-th served result shows."""
        if self.teams is None or self.candidate is None or self.teams[position] == CONTROL:
            return self.served
        return self.candidate


def ranking_order(scores: np.ndarray) -> np.ndarray:
    """Input indices best first: NaN last, ties in input order (as /rerank sorts)."""
    key = np.where(np.isnan(scores), -np.inf, scores)
    return np.argsort(-key, kind="stable")


def _experiment_log(
    spec: ExperimentSpec, arm: int | None, teams: list[int] | None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "name": spec.name,
        "mode": spec.mode,
        "control": spec.control,
        "candidate": spec.candidate,
    }
    if teams is not None:
        record["teams"] = teams
    else:
        record["arm"] = ARM_NAMES[arm if arm is not None else 0]
    return record


async def rank_in_experiment(
    active: ActiveExperiment | None,
    control: Any,
    user_id: str | None,
    request_id: str,
    control_inputs: tuple[np.ndarray, np.ndarray | None],
    candidate_inputs: InputsFn,
    score: Scoring,
    top_k: int | None,
) -> ExperimentRanking | None:
    """None when the request is outside the experiment (the caller ranks as usual)."""
    if active is None:
        return None
    spec = active.spec
    arm = assign(spec, user_id, request_id)
    if arm is None:
        return None
    candidate = active.candidate
    if spec.mode == "ab":
        model = candidate if arm == CANDIDATE else control
        own = None
        if arm == CANDIDATE:
            features, user, own = await candidate_inputs(candidate)
        else:
            features, user = control_inputs
        scores = await score(model, features, user)
        order = ranking_order(scores)[:top_k].tolist()
        log = _experiment_log(spec, arm, None)
        served = Scored(model, features, user)
        return ExperimentRanking(model, scores, order, log, None, served, candidate_user=own)
    # A request small enough to score on the loop scores both versions there: at once, the
    # candidate on a second thread, when its scoring is expected to take well over the
    # hand-off (~0.1 ms to wake a thread) and a core sat idle lately; else one after the other
    # (each splits its rows over the cores when that pays, as a single model does). At 300
    # rows x 300 trees that is 0.09 ms on an AVX-512 machine, where the second thread measured
    # slower end to end (1.24-1.27x a single-model request against 1.20-1.24x), and 0.8 ms on
    # a Zen 1 machine, where it is faster. A large request scores both in worker threads,
    # which overlap with the loop's other work.
    own_features, own_user, own = await candidate_inputs(candidate)
    rows = own_features.shape[0]
    if score.inline(rows):
        pays = score.beside_pays(candidate, rows)
        native = score.prepare_beside(candidate, own_features, own_user) if pays else None
        if native is not None:
            control_scores, candidate_scores = native.run(
                lambda: score.now(control, *control_inputs)
            )
        elif pays:
            control_scores, candidate_scores = score_both(
                lambda: score.now(control, *control_inputs),
                lambda: score.now(candidate, own_features, own_user, learn=True),
            )
        else:
            control_scores = score.now(control, *control_inputs)
            candidate_scores = score.now(candidate, own_features, own_user, learn=True)
    else:
        candidate_task = asyncio.ensure_future(score(candidate, own_features, own_user))
        try:
            control_scores = await score(control, *control_inputs)
        finally:
            candidate_scores = await candidate_task
    merged, teams, shown = merge_rankings(
        control_scores, candidate_scores, f"{spec.salt}\x1f{request_id}".encode(), top_k
    )
    team_list = teams.tolist()
    return ExperimentRanking(
        control,
        shown,
        merged,
        _experiment_log(spec, None, team_list),
        team_list,
        Scored(control, *control_inputs),
        Scored(candidate, own_features, own_user),
        own,
    )


def merge_rankings(
    control_scores: np.ndarray, candidate_scores: np.ndarray, seed: bytes, top_k: int | None
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Team draft of the two versions' rankings: (merged input indices, cut to top_k; team of
    each, int8; the score shown for each input row, float64 [n]). Each result shows the score
    of the version whose team placed it; a result of team BOTH (credited to neither: the
    common prefix, and rounds either coin serves alike) shows the candidate's."""
    n = control_scores.shape[0]
    length = n if top_k is None else min(top_k, n)
    rounds = (length + 1) // 2 + 1
    kernel = draft_kernel.ready()
    if kernel is not None:
        coins = coin_bytes(seed, rounds)
        return draft_kernel.merge(kernel, control_scores, candidate_scores, coins, length)
    coins = coin_flips(seed, rounds)
    control_order = ranking_order(control_scores)
    candidate_order = ranking_order(candidate_scores)
    merged, teams = team_draft_arrays(control_order, candidate_order, coins, length)
    shown = control_scores.copy()
    from_candidate = np.asarray(merged, dtype=np.int64)[teams != CONTROL]
    shown[from_candidate] = candidate_scores[from_candidate]
    return merged, teams, shown


async def candidate_inputs(
    resolver: Any,
    candidate: Any,
    user_doc: Any,
    features: np.ndarray,
    user_vector: np.ndarray | None,
    extra: int,
) -> Inputs:
    """The candidate's inputs: the control's, with the candidate's own user embedding (its
    clusters have the same scheme, but its embedding table, and its key in Redis, are its
    own), and the user features it was resolved with."""
    if candidate.manifest.user_clusters is None:
        return features, user_vector, None
    found = await resolver.resolve(candidate.manifest, user_doc)
    if found.vector is None:
        return features, user_vector, found
    if extra:
        own = features.copy()
        own[:, -extra:] = found.vector
        return own, None, found
    return features, found.vector, found


def explain_experiment(body: dict[str, Any], record: dict[str, Any]) -> None:
    """With `explain`: the experiment, and each result's team (interleave) or the arm (ab)."""
    shown = {k: record[k] for k in ("name", "mode", "control", "candidate")}
    teams = record.get("teams")
    if teams is None:
        shown["arm"] = record["arm"]
    else:
        for item, team in zip(body["results"], teams, strict=True):
            item["team"] = TEAM_NAMES[team]
    body["experiment"] = shown


def served_experiment(registry: Any, model: str) -> dict[str, Any] | None:
    """What GET /models says about `model`'s experiment in this process."""
    active = registry.experiment(model)
    if active is not None:
        spec = active.spec
        return {
            "name": spec.name,
            "mode": spec.mode,
            "traffic": spec.traffic,
            "control": spec.control,
            "candidate": spec.candidate,
            "serving": True,
        }
    error = registry.experiments.errors.get(model)
    return None if error is None else {"serving": False, "error": error}
