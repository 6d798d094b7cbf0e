"""The reranking service (`ltr serve`)."""

import os

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Before any module of the service makes a metric value: its files get their disk space
    # when made, so a full disk cannot kill the worker (app.metrics_files).
    from app.metrics_files import install

    install()
