"""Online experiments offline: click credit, statistics, reports and the promote/rollback
decision (the service side is app/experiments and app/registry/experiments.py)."""
