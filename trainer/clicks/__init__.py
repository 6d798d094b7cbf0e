"""Learning from the service's own logs: read impressions and feedback, join them into
training data, estimate position bias."""

from trainer.clicks.join import LabelRules, dataset_from_logs, join_logs, split_by_time
from trainer.clicks.logs import read_logs
from trainer.clicks.propensity import estimate_propensities, load_propensities

__all__ = [
    "LabelRules",
    "dataset_from_logs",
    "estimate_propensities",
    "join_logs",
    "load_propensities",
    "read_logs",
    "split_by_time",
]
