"""All service configuration, from `LTR_*` environment variables (or a `.env` file)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

REDIS_SCHEMES = ("redis", "rediss", "unix")
# Bodies of LARGE_BODY_BYTES or more may together fill only LARGE_SHARE of a worker's body
# buffer (app.api.middleware), so that stalled big uploads cannot lock out small requests.
LARGE_BODY_BYTES = 1024 * 1024
LARGE_SHARE = 0.75
MAX_READ_SIZE = 2**31 - 1  # what a socket read takes


def buffer_for_one_body(max_body_bytes: int) -> int:
    """The least body buffer that holds one body of `max_body_bytes`."""
    if max_body_bytes < LARGE_BODY_BYTES:
        return max_body_bytes
    return math.ceil(max_body_bytes / LARGE_SHARE)


def redis_url_problem(url: str) -> str | None:
    """What makes `url` unusable as redis-py reads it (an unknown scheme, a port out of range,
    or a database path that is not a number, which redis-py takes as db 0), else None; never
    the URL itself, which may hold a password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "not a URL (expected redis://, rediss:// or unix://)"
    if parts.scheme not in REDIS_SCHEMES:
        given = f"{parts.scheme}://" if parts.scheme else "no scheme"
        return (
            f"expected redis://, rediss:// or unix:// (e.g. redis://localhost:6379/0), got {given}"
        )
    try:
        _ = parts.port  # urllib checks it only when asked; redis-py asks at the first connect
    except ValueError:
        return "the port is not a number from 0 to 65535"
    database = parts.path.strip("/") if parts.scheme != "unix" else ""
    if database and not database.isdigit():
        return f"the database {database!r} is not a number"
    return _options_problem(url)


def _options_problem(url: str) -> str | None:
    """What redis-py refuses in the URL's query options (`?foo=1`: an unknown one; a timeout
    that is not a number), found by building a connection, which connects nothing: at the
    first command it was a traceback from inside redis-py."""
    import redis

    try:
        pool = redis.ConnectionPool.from_url(url)
        problem = _numbers_problem(pool.connection_kwargs)
        if problem is None:
            pool.make_connection()
    except TypeError as exc:  # "...__init__() got an unexpected keyword argument 'foo'"
        name = str(exc).rpartition(" ")[2]
        return f"the option {name} in its query is not one redis-py takes"
    except ValueError as exc:  # 'Invalid value for "socket_timeout" in connection URL.'
        return str(exc).rstrip(".")
    return problem


def _numbers_problem(options: dict[str, object]) -> str | None:
    """A number among `options` that redis-py takes as it comes and fails with at the first
    connect (a negative or NaN timeout: "Timeout value must be non-negative"; 0: a
    non-blocking socket), else None."""
    for name in ("socket_timeout", "socket_connect_timeout", "timeout", "socket_read_size"):
        value = options.get(name)
        if isinstance(value, int | float) and not (0 < value < math.inf):
            return f"the option {name}={value} in its query is not a positive finite number"
    read_size = options.get("socket_read_size")
    if isinstance(read_size, int) and read_size > MAX_READ_SIZE:  # OverflowError at connect
        return f"the option socket_read_size={read_size} in its query is above {MAX_READ_SIZE}"
    protocol = options.get("protocol")
    if protocol is not None and protocol not in (2, 3):  # refused at connect, as a traceback
        return f"the option protocol={protocol} in its query is not 2 or 3"
    interval = options.get("health_check_interval")
    if isinstance(interval, int) and interval < 0:
        return f"the option health_check_interval={interval} in its query is negative"
    return None


class Settings(BaseSettings):
    # No setting has a use for inf or NaN: inf passed every lower bound (a budget of inf
    # never sheds, a breaker reset of inf never closes again).
    model_config = SettingsConfigDict(
        env_prefix="LTR_", env_file=".env", extra="ignore", allow_inf_nan=False
    )

    @field_validator(
        "default_model",
        "admin_token",
        "compiled_cache_dir",
        "numba_cache_seed",
        "redis_url",
        "impressions_jsonl",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # `LTR_REDIS_URL=` in a compose file or a shell means "no Redis", as the CLI reads it;
        # taken as a URL, the service logged an error and degraded every item-feature answer.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("redis_url")
    @classmethod
    def _usable_redis_url(cls, value: str | None) -> str | None:
        # A malformed URL used to be logged once and served with every Redis answer degraded;
        # it is a typo to fix before serving. A custom error: `ltr serve` prints its message
        # as it stands (no "Value error, "), and the message never repeats the URL's password.
        problem = None if value is None else redis_url_problem(value)
        if problem is not None:
            raise PydanticCustomError("redis_url", problem)
        return value

    # Models
    registry: Path = Path("registry")
    default_model: str | None = None  # which model /rerank uses when the request names none
    reload_poll_seconds: Annotated[float, Field(ge=0)] = 5.0  # filesystem poll; 0 = off
    admin_token: str | None = None  # POST /admin/reload is refused without it
    compiled_cache_dir: Path | None = None  # where compiled scorers are cached, if anywhere
    # A numba cache of the service's kernels made when the image was built, copied into
    # NUMBA_CACHE_DIR at start (app.numba_cache_seed); unset: compiled at start if not cached.
    numba_cache_seed: Path | None = None

    # Server
    # Not empty: uvicorn binds every interface for "" (a blank LTR_HOST in a templated config
    # exposed the service).
    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"

    @field_validator("host")
    @classmethod
    def _bindable(cls, host: str) -> str:
        # "0.0.0.0 " from a templated env file got past the check and failed at bind, uvicorn's
        # "Name or service not known" naming no setting; "   " too.
        stripped = host.strip()
        if not stripped or any(c.isspace() for c in stripped):
            raise ValueError(f"{host!r} is no host name or address (blank, or with spaces)")
        return stripped

    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    workers: Annotated[int, Field(ge=1)] = 1
    # With several workers, uvicorn's supervisor kills a worker that does not answer its ping
    # within this many seconds and starts another. Its own default, 5, killed workers still
    # importing on a loaded 2-core machine, again and again (a throttled pod never came up);
    # a worker whose loop stalls is caught by /livez (`livez_max_loop_stall_seconds`) anyway.
    worker_healthcheck_timeout_seconds: Annotated[int, Field(ge=1)] = 60
    # /livez, /readyz and /metrics also on this port, answered by a thread of each worker, so
    # probes never queue behind requests on the event loop (deploy/ points its probes here).
    # Every worker listens on it (SO_REUSEPORT); unset = the service's port only.
    probe_port: Annotated[int | None, Field(ge=1, le=65535)] = None
    # /livez fails only when the event loop has not run for this long (a hung worker), never
    # because of load.
    livez_max_loop_stall_seconds: Annotated[float, Field(gt=0)] = 30.0

    # Limits
    max_body_bytes: Annotated[int, Field(ge=1024)] = 32 * 1024 * 1024
    max_candidates: Annotated[int, Field(ge=1)] = 10_000
    min_candidates: Annotated[int, Field(ge=0)] = 1
    ignore_unknown_features: bool = False
    # Read the usual /rerank body's feature values straight into float32 with a compiled scan
    # (app.api.body_scan), and a shed request's ids with another (app.api.ids_kernel), both
    # compiled in the background at start; off: orjson decodes it all, numpy finds the ids.
    body_scan: bool = True

    # Latency budget and admission control (app.api.admission): every /rerank answer is due
    # `request_budget_ms` after arrival (a client may ask for less or more, up to
    # `max_request_budget_ms`, with `x-request-timeout-ms`); what cannot be scored in time is
    # answered in retrieval order, degraded (`fallback`), or refused (`503`, with Retry-After).
    admission_enabled: bool = True
    request_budget_ms: Annotated[float, Field(gt=0)] = 100.0
    max_request_budget_ms: Annotated[float, Field(gt=0)] = 10_000.0
    overload_response: Literal["fallback", "503"] = "fallback"
    # Candidate rows scored at once per worker: adaptive between the bounds (`gradient`: by how
    # much requests served together are slower than alone; `aimd`: additive increase until a
    # request takes half its budget), or fixed at `admission_initial_rows`. One request is
    # always let in when idle. The floor lets several large requests overlap: much of each one's
    # time is spent off the event loop (its body scan and scoring, in threads without the GIL),
    # and with one 1,000-row request at a time the worker idled between them (docs/OPERATIONS.md).
    admission_adaptive: bool = True
    admission_algorithm: Literal["gradient", "aimd"] = "gradient"
    admission_initial_rows: Annotated[int, Field(ge=1)] = 3000
    admission_min_rows: Annotated[int, Field(ge=1)] = 3000
    admission_max_rows: Annotated[int, Field(ge=1)] = 50_000
    # The longest a request waits in admission's queue, as a share of its budget, while the
    # worker sheds: under overload a longer queue only makes every request late, scored or
    # not; a burst on a calm worker may queue for its whole budget (docs/OPERATIONS.md).
    admission_max_queue_share: Annotated[float, Field(gt=0, le=1)] = 0.25
    parse_off_loop_min_bytes: Annotated[int, Field(ge=0)] = 256 * 1024
    # Up to this size a body is parsed on the loop all the same when its request is the only
    # one in flight: the loop has nothing else to do meanwhile, and the hand-over to a thread
    # and back cost more than it saved (side by side, 1,000 id-only candidates: 5 % less
    # with the item snapshot, 8 % with Redis, whose fetch then goes out before the parse).
    # Larger bodies stay off the loop: one that arrives meanwhile is then read and admitted
    # beside the parse instead of waiting in its socket. 0: by size alone.
    parse_alone_here_max_bytes: Annotated[int, Field(ge=0)] = 512 * 1024
    # Threads per worker that decode such bodies (without the GIL), in arrival order: the
    # service's own pool, whose hand-off costs the event loop fewer turns than anyio's
    # (docs/OPERATIONS.md). More decodes at once than cores only take them from the loop.
    parse_threads: Annotated[int, Field(ge=1)] = 2
    # Opt-in: large bodies that arrive together are read a few at a time, the newest first
    # while admission has room to score it and the `reception_oldest_lanes` oldest beside it,
    # the others left in their sockets; a lane is held for at most `reception_slice_ms`, a
    # request waits for one at most `reception_max_wait_ms` (app.api.reception_lanes). It
    # scores more for clients that send again as soon as answered, but reads fewer bodies a
    # second, and traffic that does not wait for answers can outrun it (docs/OPERATIONS.md).
    reception_lanes: bool = False
    reception_oldest_lanes: Annotated[int, Field(ge=1)] = 4
    reception_slice_ms: Annotated[float, Field(gt=0)] = 10.0
    reception_max_wait_ms: Annotated[float, Field(gt=0)] = 200.0
    # /readyz says 503 "shedding" while this worker has shed within the last window.
    readyz_reports_shedding: bool = True
    shedding_window_seconds: Annotated[float, Field(gt=0)] = 1.0

    # Slow and hostile clients: 408 when the headers or the body do not arrive in time; 503 at
    # once when the bodies buffered by this worker would pass `max_buffered_body_bytes`.
    header_read_timeout_seconds: Annotated[float, Field(gt=0)] = 5.0
    body_read_timeout_seconds: Annotated[float, Field(gt=0)] = 10.0
    keep_alive_timeout_seconds: Annotated[int, Field(ge=1)] = 5
    # Requests one connection may queue (HTTP pipelining) while one of its own is answered;
    # one more and the connection closes (app.api.http_protocol).
    max_pipelined: Annotated[int, Field(ge=1)] = 100
    # An access log (app.api.middleware: uvicorn's line plus the duration and the request id),
    # a line per request on stderr: off by default, since every request
    # is already counted and timed in /metrics, and at a few hundred requests a second per
    # worker the lines cost the event loop time and the cluster log volume (docs/OPERATIONS.md).
    access_log: bool = False
    # Accept every connection waiting in the listen queue on each turn of the event loop
    # (app.accept_loop); false: uvloop's own server, which takes one per turn.
    accept_greedily: bool = True
    max_buffered_body_bytes: Annotated[int, Field(ge=1024)] = 192 * 1024 * 1024
    # A body (of up to `body_read_ahead_bytes`) that would pass the cap waits for room until
    # this long after its request arrived, then 503; 0: refused at once.
    body_buffer_wait_ms: Annotated[float, Field(ge=0)] = 50.0
    # A body reserved against the cap is read from its socket without waiting for the
    # application up to this many bytes (app.api.http_protocol); uvicorn's own 64 KiB is the
    # least.
    body_read_ahead_bytes: Annotated[int, Field(ge=64 * 1024)] = 4 * 1024 * 1024

    # Scoring
    scoring_threads: Annotated[int, Field(ge=1)] = 2  # used for large requests only
    # From this many rows a request is split over `scoring_threads` (the compiled scorer's own
    # default, app.scoring.compiled.DEFAULT_PARALLEL_MIN_ROWS).
    parallel_min_rows: Annotated[int, Field(ge=1)] = 2000
    # ... and from this many while a core sat idle lately (app.scoring.cpu_headroom): a spare
    # core shortens a large request; a busy one would only add a hand-off.
    spare_core_min_rows: Annotated[int, Field(ge=1)] = 512
    onnx_intra_op_threads: Annotated[int, Field(ge=1)] = 1
    # Requests with more candidates than this are scored in a worker thread (at most
    # `scoring_concurrency` at once) so the event loop keeps serving; smaller ones inline.
    # Inline won clearly at 100 candidates, and 1,000 rows of a 500-tree model score in a few
    # milliseconds, a short enough stall for the loop (bench/results/service.md, scoring.md).
    inline_scoring_max_rows: Annotated[int, Field(ge=0)] = 1000
    scoring_concurrency: Annotated[int, Field(ge=1)] = 4
    # An interleaved request small enough to score inline scores its two versions at once (the
    # candidate on a second thread) when the candidate's scoring is expected to take at least
    # this long (its recent cost per row, app.scoring.cost) and a core sat idle lately; else
    # one after the other. A compiled tree candidate goes to the native beside worker
    # (app.scoring.beside), which measured no slower than one after the other from 16 rows up;
    # another candidate to a pooled Python thread, whose wake-up costs 0.1-0.3 ms.
    interleave_parallel_min_us: Annotated[float, Field(ge=0)] = 20.0
    # How long a thread may hold the GIL while another waits for it (sys.setswitchinterval;
    # Python's default is 5 ms). The event loop's thread gives the GIL up in every large numpy
    # operation and native call, and each time takes it back only once the thread that took it
    # yields: with the default, a shed request's body marks (5 numpy passes) took 32 ms beside
    # a busy thread instead of 0.34 ms (docs/OPERATIONS.md). 0: leave Python's default.
    gil_switch_interval_ms: Annotated[float, Field(ge=0)] = 0.5
    # `explain`: contributions are computed for at most this many returned results (the top
    # ones); TreeSHAP costs ~1 ms per result for 500 trees (bench/results/explain.md).
    explain_max_results: Annotated[int, Field(ge=1)] = 100
    # Build each served tree model's explainer and load the TreeSHAP kernel in a background
    # thread once the model serves (never delaying /readyz), so no request pays those one-off
    # costs (~0.3 s tables for 500 trees; numba's import and compile, ~3 s, or its disk cache,
    # ~0.5 s). Off: the first explanation of each model pays them.
    explain_warm: bool = True
    # Once the models (and their explainers) are loaded, move every object alive to a
    # generation the garbage collector never scans (gc.freeze): its full collections then
    # skip the models' hundreds of thousands of objects (30-80 ms pauses of served requests
    # with a 500-tree model otherwise). Off for processes that build many apps (tests).
    gc_freeze: bool = True
    # Give the C heap's free memory back to the system once a worker answers nothing for a
    # while after a burst (app.heap_trim): glibc kept 1-2.9 GB of freed request bodies
    # resident after floods.
    heap_trim: bool = True

    # Redis (a soft dependency)
    redis_url: str | None = None
    redis_prefix: str = "ltr:"
    redis_deadline_ms: Annotated[float, Field(gt=0)] = 10.0
    redis_cache_ttl_seconds: Annotated[float, Field(ge=0)] = 30.0
    # Absent keys are cached for less: re-pushed embeddings must be picked up quickly (the
    # `events` announcement also clears the model's entries).
    redis_missing_ttl_seconds: Annotated[float, Field(ge=0)] = 1.0
    redis_cache_max_entries: Annotated[int, Field(ge=0)] = 100_000
    # Connections each worker opens at most for its reads (one pool for the user and item
    # features, another for /feedback's lookups); a read beyond them waits for a free one
    # within its deadline rather than fail against a healthy Redis (app.redis_pool).
    redis_max_connections: Annotated[int, Field(ge=1)] = 64
    breaker_failure_threshold: Annotated[int, Field(ge=1)] = 5
    breaker_reset_seconds: Annotated[float, Field(gt=0)] = 2.0

    # Impression logging and click feedback (app.impressions): Redis stream when redis_url is
    # set, else the JSONL file; records are dropped (and counted) rather than slow a request.
    impressions_enabled: bool = False
    impressions_jsonl: Path | None = None
    impressions_stream_maxlen: Annotated[int, Field(ge=1)] = 1_000_000
    impressions_queue_size: Annotated[int, Field(ge=1)] = 10_000
    # Bytes as well as records: a queued impression holds its feature rows (544 KB at 1,000
    # candidates x 136 features), so 10,000 of them behind a stalled sink held 5 GB.
    impressions_queue_max_mb: Annotated[int, Field(ge=1)] = 256
    # The served ids each worker keeps for /feedback (app.impressions.feedback).
    impressions_index_max_mb: Annotated[int, Field(ge=1)] = 64
    impressions_ttl_seconds: Annotated[int, Field(ge=1)] = 86400
    # Exploration for the position-bias estimate (app.api.exploration): on this share of
    # answers outside experiments, the first result swaps with one drawn from 2..depth.
    exploration_share: Annotated[float, Field(ge=0, le=1)] = 0.0
    exploration_depth: Annotated[int, Field(ge=2, le=1000)] = 10

    # Item feature store (app.features.item_store): `auto` reads Redis when redis_url is set,
    # else the snapshot the model version carries; `redis` insists on Redis (no redis_url is
    # refused at start: an operator forcing Redis must not be served from the snapshot
    # unawares); `snapshot` never asks Redis for items. With Redis, the snapshot still stands
    # in for it when it fails (degraded).
    item_store: Literal["auto", "redis", "snapshot"] = "auto"
    # Rows of the live item set version each worker keeps after reading them from Redis
    # (app.features.item_row_cache; ~0.5 KB a row at 100 features); 0, the default: read every
    # row. Pays when nearly every candidate's row repeats, or when Redis's CPU is the limit.
    item_row_cache_rows: Annotated[int, Field(ge=0)] = 0
    # Snapshot files (items.npy, item_ids.npy) at least this large are memory-mapped: page
    # cache, shared by the workers of a host. Smaller ones are read into each worker's memory,
    # where a write into the registry's copy cannot reach them: truncated in place, a mapped
    # file kills the worker reading the pages it lost (SIGBUS).
    item_snapshot_map_min_bytes: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        """Pairs that contradict each other: the service ran with one of them ignored."""
        if self.admission_min_rows > self.admission_max_rows:
            raise ValueError(
                f"LTR_ADMISSION_MIN_ROWS ({self.admission_min_rows}) is above "
                f"LTR_ADMISSION_MAX_ROWS ({self.admission_max_rows})"
            )
        if self.request_budget_ms > self.max_request_budget_ms:
            raise ValueError(
                f"LTR_REQUEST_BUDGET_MS ({self.request_budget_ms:g}) is above "
                f"LTR_MAX_REQUEST_BUDGET_MS ({self.max_request_budget_ms:g}), the most a "
                "request may ask for"
            )
        if self.probe_port is not None and self.probe_port == self.port:
            raise ValueError(
                f"LTR_PROBE_PORT ({self.probe_port}) is the service's own port (LTR_PORT or "
                "--port): give the probes another port, or leave it unset"
            )
        least = buffer_for_one_body(self.max_body_bytes)
        if self.max_buffered_body_bytes < least:
            # It was raised to LTR_MAX_BODY_BYTES silently, and bodies of that size were still
            # refused (bodies of 1 MiB or more may fill three quarters of the buffer).
            raise ValueError(
                f"LTR_MAX_BUFFERED_BODY_BYTES ({self.max_buffered_body_bytes}) cannot hold one "
                f"body of LTR_MAX_BODY_BYTES ({self.max_body_bytes}): it must be at least "
                f"{least} (bodies of 1 MiB or more may fill three quarters of it)"
            )
        if self.item_store == "redis" and self.redis_url is None:
            raise ValueError(
                "LTR_ITEM_STORE=redis needs LTR_REDIS_URL, which is not set (or blank): set it, "
                "or use LTR_ITEM_STORE=auto (Redis when LTR_REDIS_URL is set, else the snapshot)"
            )
        return self


def settings_problem(exc: ValidationError) -> str:
    """The first thing wrong in the settings, in one line naming the variable the operator set
    (LTR_REDIS_DEADLINE_MS, not redis_deadline_ms; a check of several settings has no loc and
    names them itself), without the value: pydantic's own text shows it, and LTR_REDIS_URL's
    may hold a password."""
    first = exc.errors()[0]
    where = "_".join(map(str, first["loc"])).upper()
    return f"LTR_{where}: {first['msg']}" if where else first["msg"].removeprefix("Value error, ")
