"""The service's Prometheus metrics, in prometheus-client's default registry.

Each uvicorn worker is its own process with its own copy of these: a scrape of `/metrics`
through a load balancer sees one worker. Scrape workers separately (or run one worker per pod,
the Kubernetes layout) rather than summing through a shared port.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
    "Responses answered with degraded user features, by reason.",
    ["reason"],
)

# Incremented by app.features (one per Redis lookup).
REDIS_HITS = Counter("ltr_redis_hits_total", "Redis lookups that found their key.")
REDIS_MISSES = Counter("ltr_redis_misses_total", "Redis lookups whose key was absent.")
REDIS_ERRORS = Counter(
    "ltr_redis_errors_total", "Redis lookups that failed, timed out or were short-circuited."
)

MODEL_INFO = Gauge(
    "ltr_model_loaded_info",
    "1 for the version of each model currently serving.",
    ["model", "version", "kind"],
)
MODEL_LOADED_TIMESTAMP = Gauge(
    "ltr_model_loaded_timestamp_seconds",
    "Unix time the serving version of each model was swapped in.",
    ["model"],
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
ADMISSION_LIMIT_ROWS = Gauge(
    "ltr_admission_limit_rows", "Candidate rows this worker admits at once (adaptive limit)."
)
ADMISSION_IN_FLIGHT_ROWS = Gauge(
    "ltr_admission_in_flight_rows", "Candidate rows being parsed or scored now."
)
ADMISSION_QUEUED_ROWS = Gauge(
    "ltr_admission_queued_rows", "Candidate rows of requests waiting for admission."
)
SHED = Counter(
    "ltr_shed_requests_total",
    "/rerank requests not scored: `shed` by admission control or `over_budget`.",
    ["reason"],
)
FALLBACK_SECONDS = Histogram(
    "ltr_fallback_duration_seconds",
    "Time to build the retrieval-order answer of a request that was not scored.",
    buckets=_LATENCY_BUCKETS,
)
SLOW_CLIENTS = Counter(
    "ltr_slow_client_rejections_total",
    "Requests refused for their client: `header_timeout`, `body_timeout` (408) or "
    "`buffer_full` (503: too many body bytes buffered by this worker).",
    ["reason"],
)
