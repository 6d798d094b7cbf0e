"""Act on a decision: promote (CURRENT → candidate) or roll back (stop serving it), announce
on Redis and log; `continue` changes nothing. A paused experiment is refused, and a candidate
that does not load is not promoted, by a dry run as by the real one."""

from __future__ import annotations

import logging
from pathlib import Path

from app.experiments.spec import ExperimentSpec
from app.registry.experiments import Status
from trainer.experiments.analysis import ExperimentAnalysis
from trainer.experiments.decision import Decision, DecisionPolicy, decide
from trainer.experiments.lifecycle import check_promotable, end_experiment, refuse_if_paused

log = logging.getLogger(__name__)


def apply_decision(
    registry: Path,
    spec: ExperimentSpec,
    analysis: ExperimentAnalysis,
    policy: DecisionPolicy,
    *,
    dry_run: bool = False,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
) -> Decision:
    # Even a dry run: its verdict would be about a version no longer compared with.
    refuse_if_paused(registry, spec)
    decision = decide(analysis, policy)
    if dry_run and decision.action == "promote":
        check_promotable(registry, spec)  # the real run checks it under the model's lock
    log.info("experiment %s: %s (%s)", spec.name, decision.action, decision.reason)
    if dry_run or decision.action == "continue":
        return decision
    status: Status = "promoted" if decision.action == "promote" else "rolled_back"
    end_experiment(
        registry,
        spec,
        status,
        decision.reason,
        decision=decision.to_json(),
        redis_url=redis_url,
        redis_prefix=redis_prefix,
    )
    return decision
