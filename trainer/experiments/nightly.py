"""The nightly job's experiment steps ([experiment] in the nightly config): decide the running
experiment first, then start one for the version that passed the gate."""

from __future__ import annotations

import logging
import os
from typing import Any

from app.registry.experiments import find_record
from trainer.clicks.logs import read_logs
from trainer.experiments.analysis import analyse
from trainer.experiments.credit import credit_from_logs
from trainer.experiments.decision import DecisionPolicy
from trainer.experiments.experiment_file import read_experiment
from trainer.experiments.lifecycle import pause_reason, start_experiment
from trainer.experiments.run_decision import apply_decision
from trainer.nightly.config import NightlyConfig
from trainer.publish import PublishResult

log = logging.getLogger(__name__)


def _redis(config: NightlyConfig) -> str | None:
    return config.publish.redis_url or os.environ.get("LTR_REDIS_URL")


def decide_running(config: NightlyConfig) -> dict[str, Any] | None:
    """Promote, roll back or keep the running experiment of the model (None without one);
    a paused one is left alone (action "paused")."""
    registry, name, exp = config.publish.registry, config.model.name, config.experiment
    spec = read_experiment(registry, name)
    if spec is None:
        return None
    paused = pause_reason(registry, spec)
    if paused is not None:
        log.warning("nightly: experiment %s is paused, not decided: %s", spec.name, paused)
        return {"experiment": spec.name, "action": "paused", "reason": paused}
    assert exp.logs is not None
    record = find_record(registry, spec.name)
    analysis = analyse(credit_from_logs(read_logs(exp.logs), record.spec))
    policy = DecisionPolicy(
        min_impressions=exp.min_impressions, alpha=exp.alpha, ab_metric=exp.ab_metric
    )
    decision = apply_decision(
        registry,
        spec,
        analysis,
        policy,
        redis_url=_redis(config),
        redis_prefix=config.publish.redis_prefix,
    )
    log.info("nightly: experiment %s: %s (%s)", spec.name, decision.action, decision.reason)
    return {"experiment": spec.name, **decision.to_json()}


def start_for_candidate(config: NightlyConfig, published: PublishResult) -> dict[str, Any] | None:
    """Start an experiment for the version just installed, unless one still runs (then the
    version waits in the registry; `ltr experiment start` can pick it up later)."""
    registry, exp = config.publish.registry, config.experiment
    running = read_experiment(registry, published.name)
    if running is not None:
        log.warning(
            "nightly: experiment %s still runs; %s is installed but not experimented on",
            running.name,
            published.version,
        )
        return None
    spec = start_experiment(
        registry,
        published.name,
        published.version,
        mode=exp.mode,
        traffic=exp.traffic,
        redis_url=_redis(config),
        redis_prefix=config.publish.redis_prefix,
    )
    return spec.model_dump(mode="json")
