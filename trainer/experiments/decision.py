"""Promote, roll back or keep going: the always-valid test after a minimum of impressions."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.experiments.analysis import ExperimentAnalysis

Action = Literal["promote", "rollback", "continue"]


class DecisionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_impressions: int = Field(1000, ge=1)
    alpha: float = Field(0.05, gt=0, lt=1)
    ab_metric: Literal["clicks", "dcg"] = "clicks"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    impressions: int
    effect: float  # interleaving preference, or the A/B metric difference
    p_always_valid: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def decide(analysis: ExperimentAnalysis, policy: DecisionPolicy) -> Decision:
    n = analysis.impressions
    if analysis.interleaving is not None:
        il = analysis.interleaving
        effect, p, what = il.preference, il.p_always_valid, "preference"
        # The direction is the tested statistic's: the click difference, when known.
        direction = il.direction
        if not math.isnan(il.click_difference):
            cd = il.click_difference
            what = f"click difference {cd:+.4f} per clicked impression, preference"
    else:
        assert analysis.ab is not None
        effect = analysis.ab[policy.ab_metric].difference
        p = analysis.ab[policy.ab_metric].p_always_valid
        what = f"{policy.ab_metric} per impression difference"
        direction = effect
    if n < policy.min_impressions:
        reason = f"{n} impressions, fewer than the minimum {policy.min_impressions}"
        return Decision("continue", reason, n, effect, p)
    if p >= policy.alpha:
        # An arm without impressions has no mean, so no difference ("+nan").
        shown = "n/a" if math.isnan(effect) else f"{effect:+.4f}"
        reason = f"not significant yet ({what} {shown}, always-valid p = {p:.3g})"
        return Decision("continue", reason, n, effect, p)
    action: Action = "promote" if direction > 0 else "rollback"
    verdict = "wins" if direction > 0 else "loses"
    reason = (
        f"candidate {verdict}: {what} {effect:+.4f}, always-valid p = {p:.3g} "
        f"< {policy.alpha} after {n} impressions"
    )
    return Decision(action, reason, n, effect, p)
