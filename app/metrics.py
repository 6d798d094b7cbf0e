"""The service's Prometheus metrics, in prometheus-client's default registry.

With several uvicorn workers each is its own process. `ltr serve --workers N` then runs
prometheus-client's multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`, set before the workers start):
every worker writes its values to files there and any worker's `/metrics` answers for all of
them, counters and histograms summed, gauges one series per live worker (label `pid`), and the
`process_*` series of every live worker (label `pid`), read from /proc when scraped.
With one worker, or a `PROMETHEUS_MULTIPROC_DIR` left unset, `/metrics` is the process's own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The directory the workers share their values through, or None (single process)."""
    return os.environ.get(MULTIPROC_ENV) or None


def prepare_multiprocess_dir(path: Path) -> None:
    """Make `path` the workers' shared directory, emptied of a previous run's files; call it in
    the parent before any worker imports prometheus-client (the value store is chosen then)."""
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROC_ENV] = str(path)


@contextmanager
def shared_across_workers(workers: int) -> Iterator[None]:
    """Around `uvicorn.run(..., workers=N)`: with N > 1, one `/metrics` for all workers, through
    `PROMETHEUS_MULTIPROC_DIR` if set, else a temporary directory removed at exit."""
    if workers <= 1:
        yield
        return
    given = multiprocess_dir()
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="ltr-metrics-"))
    prepare_multiprocess_dir(path)
    try:
        yield
    finally:
        if not given:
            shutil.rmtree(path, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)


def exposition() -> tuple[bytes, str]:
    """The `/metrics` body and content type: every worker's values in multiprocess mode."""
    path = multiprocess_dir()
    if path is None:
        return generate_latest(), CONTENT_TYPE_LATEST
    workers = forget_dead_workers(Path(path))
    registry = CollectorRegistry()
    registry.register(_LiveSeries(multiprocess.MultiProcessCollector(None)))
    registry.register(WorkerProcesses(workers))
    registry.register(PLATFORM_COLLECTOR)  # python_info: the same interpreter in every worker
    return generate_latest(registry), CONTENT_TYPE_LATEST


_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


# A worker's new file is empty between its open and its allocation (app.metrics_files): only
# one still empty after this long was left by a failed allocation, unreadable to the collector.
EMPTY_FILE_GRACE_S = 10.0


def drop_empty_files(path: Path) -> None:
    """Remove the empty value files a worker left when its disk was full (or it died between
    making one and sizing it): every scrape failed on them (500) until the service restarted."""
    stale = time.time() - EMPTY_FILE_GRACE_S
    for empty in path.glob("*.db"):
        with contextlib.suppress(OSError):
            info = empty.stat()
            if info.st_size == 0 and info.st_mtime < stale:
                empty.unlink()


def forget_dead_workers(path: Path) -> set[int]:
    """Drop the gauge series of workers that died without their shutdown (killed, crashed):
    uvicorn replaces them, and their last values would otherwise be served for good. Returns
    the pids of the live workers, those whose gauge series are served."""
    drop_empty_files(path)
    pids = {int(m[1]) for f in os.listdir(path) if (m := _LIVE_GAUGE_FILE.fullmatch(f))}
    dead: set[int] = set()
    for pid in pids - {os.getpid()}:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, str(path))
            dead.add(pid)
        except PermissionError:
            pass  # alive, another user's
    return pids - dead


class WorkerProcesses:
    """The `process_*` series (CPU, memory, fds, start time) of each given worker, labelled
    `pid`. The multiprocess collector has none (the default registry's ProcessCollector reads
    only its own process), so the scraping worker reads every live worker's /proc entries
    itself: values as of the scrape, at no cost between scrapes. A worker gone from /proc in
    the meantime is left out."""

    def __init__(self, pids: Iterable[int]) -> None:
        self._pids = sorted(pids)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for pid in self._pids:
            for family in _process_of(pid).collect():
                samples = [s._replace(labels={**s.labels, "pid": str(pid)}) for s in family.samples]
                if family.name in families:
                    families[family.name].samples += samples
                else:
                    family.samples = samples
                    families[family.name] = family
        yield from families.values()


def _process_of(pid: int) -> ProcessCollector:
    return ProcessCollector(pid=lambda: pid, registry=None)


class _LiveSeries:
    """The multiprocess collector without the info series a worker zeroed on a swap: their
    files keep every label set ever written, one more per model version published."""

    def __init__(self, collector: multiprocess.MultiProcessCollector) -> None:
        self._collector = collector

    def collect(self) -> Iterator[Metric]:
        for family in self._collector.collect():
            if family.name.endswith("_info"):
                family.samples = [s for s in family.samples if s.value != 0]
            yield family


def mark_worker_exited() -> None:
    """Drop this worker's gauge series (its counters and histograms stay in the sums)."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(os.getpid())


def worker_gauge(name: str, documentation: str, labelnames: tuple[str, ...] = ()) -> Gauge:
    """A gauge whose value belongs to one worker: in multiprocess mode one series per live
    worker, labelled `pid` (summing "rows in flight" over workers would hide which is busy)."""
    return Gauge(name, documentation, labelnames, multiprocess_mode="liveall")


# Latency buckets from 0.5 ms: a small rerank answers in a few milliseconds.
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.5,
    10.0,
)

REQUESTS = Counter(
    "ltr_http_requests_total",
    "HTTP requests answered, by route template, method and status code.",
    ["route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "ltr_http_request_duration_seconds",
    "Time from the first byte of the request to the last byte of the response.",
    ["route", "method", "status"],
    buckets=_LATENCY_BUCKETS,
)
PROBE_REQUESTS = Counter(
    "ltr_probe_requests_total",
    "Answers of the probe port (LTR_PROBE_PORT), by path and status code: a readiness probe "
    "answered 503 took the pod out of its Service. Not in ltr_http_requests_total.",
    ["route", "status"],
)
DECODE_SECONDS = Histogram(
    "ltr_request_decode_seconds",
    "Time to turn a /rerank body into the feature matrix (JSON decode + validation).",
    buckets=_LATENCY_BUCKETS,
)
SCORING_SECONDS = Histogram(
    "ltr_scoring_duration_seconds",
    "Time spent in the scorer for one request.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
CANDIDATES = Histogram(
    "ltr_candidates_per_request",
    "Candidates per /rerank request.",
    buckets=(1, 5, 10, 25, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000),
)
DEGRADED = Counter(
    "ltr_degraded_responses_total",
    "Degraded responses, by each reason that degraded them (informational reasons beside "
    "them, such as item_features_missing, are not counted).",
    ["reason"],
)
QUERY_FEATURES_MISSING = Counter(
    "ltr_query_features_missing_total",
    "/rerank requests scored with some of their model's query features absent or null, by "
    "model (a client that stopped sending them).",
    ["model"],
)

# Incremented by app.features (one per Redis lookup).
REDIS_CIRCUIT_OPEN = worker_gauge(
    "ltr_redis_circuit_open",
    "1 while this worker's Redis circuit breaker is open (Redis failing: user and item "
    "features come from the in-process copies, or are missing), else 0; a PING each reset "
    "period closes it once Redis answers, requests or not; no series without Redis.",
)
REDIS_HITS = Counter("ltr_redis_hits_total", "Redis lookups that found their key.")
REDIS_MISSES = Counter("ltr_redis_misses_total", "Redis lookups whose key was absent.")
REDIS_ERRORS = Counter(
    "ltr_redis_errors_total", "Redis lookups that failed, timed out or were short-circuited."
)

MODEL_INFO = worker_gauge(
    "ltr_model_loaded_info",
    "1 for the version of each model currently serving.",
    ("model", "version", "kind"),
)
EXPERIMENT_INFO = worker_gauge(
    "ltr_experiment_serving_info",
    "1 for each experiment this worker serves: its model, name, mode, control and candidate "
    "versions (the candidate is loaded and scores requests beside the control).",
    ("model", "experiment", "mode", "control", "candidate"),
)
MODEL_LOADED_TIMESTAMP = worker_gauge(
    "ltr_model_loaded_timestamp_seconds",
    "Unix time the serving version of each model was swapped in.",
    ("model",),
)
MODEL_RELOADS = Counter(
    "ltr_model_reloads_total", "Versions loaded, verified, warmed and swapped in.", ["model"]
)
RELOAD_FAILURES = Counter(
    "ltr_model_reload_failures_total",
    "Versions refused: unreadable, failing verification, or failing to load or warm up.",
    ["model"],
)

# Admission control and the latency budget (app.api.admission).
ADMISSION_LIMIT_ROWS = worker_gauge(
    "ltr_admission_limit_rows", "Candidate rows this worker admits at once (adaptive limit)."
)
ADMISSION_IN_FLIGHT_ROWS = worker_gauge(
    "ltr_admission_in_flight_rows", "Candidate rows being parsed or scored now."
)
ADMISSION_QUEUED_ROWS = worker_gauge(
    "ltr_admission_queued_rows", "Candidate rows of requests waiting for admission."
)
RECEPTION_WAITING = worker_gauge(
    "ltr_reception_waiting_requests",
    "Requests whose large bodies wait in their sockets for a reception lane "
    "(app.api.reception_lanes): more arrive at once than the worker reads and answers in time.",
)
RECEPTION_SLICES_OVER = Counter(
    "ltr_reception_slices_over_total",
    "Bodies still arriving when their reception lane's slice ended (slow clients); they read on "
    "outside the lanes.",
)
RECEPTION_OVERDUE = Counter(
    "ltr_reception_overdue_total",
    "Bodies let in without a reception lane because they had waited for one for too long.",
)
SHED = Counter(
    "ltr_shed_requests_total",
    "/rerank requests answered without scoring (200 degraded, or 503): `shed` by admission "
    "control or `over_budget`; one answered 422 or 404 instead is not counted.",
    ["reason"],
)
FALLBACK_SECONDS = Histogram(
    "ltr_fallback_duration_seconds",
    "Time to build the retrieval-order answer of a request that was not scored.",
    buckets=_LATENCY_BUCKETS,
)
SHED_WAIT_SECONDS = Histogram(
    "ltr_shed_answer_wait_seconds",
    "How long a shed request's retrieval-order answer waited for its turn on the event loop "
    "(app.api.shed_turns gives one per turn): near the budget, the worker sheds more than its "
    "loop turns over.",
    buckets=_LATENCY_BUCKETS,
)
SLOW_CLIENTS = Counter(
    "ltr_slow_client_rejections_total",
    "Requests refused for their client: `header_timeout`, `body_timeout` (408), "
    "`buffer_full` (503: too many body bytes buffered by this worker) or `pipelined` (a "
    "connection closed with more unanswered requests queued than LTR_MAX_PIPELINED).",
    ["reason"],
)


def start_series() -> None:
    """Every series of a label value known in advance, at 0: an alert on
    `increase(...[10m]) > 0` misses the first event of a series that appears at 1 (it has no
    earlier sample to increase from). Per-model series start when the model is first served."""
    for reason in ("shed", "over_budget"):
        SHED.labels(reason)
    for reason in ("header_timeout", "body_timeout", "buffer_full", "pipelined"):
        SLOW_CLIENTS.labels(reason)
    for route in ("/livez", "/readyz"):
        for status in ("200", "503"):
            PROBE_REQUESTS.labels(route, status)
