"""All service configuration, from `LTR_*` environment variables (or a `.env` file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LTR_", env_file=".env", extra="ignore")

    # Models
    registry: Path = Path("registry")
    default_model: str | None = None  # which model /rerank uses when the request names none
    reload_poll_seconds: Annotated[float, Field(ge=0)] = 5.0  # filesystem poll; 0 = off
    admin_token: str | None = None  # POST /admin/reload is refused without it
    compiled_cache_dir: Path | None = None  # where compiled scorers are cached, if anywhere

    # Server
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    workers: Annotated[int, Field(ge=1)] = 1

    # Limits
    max_body_bytes: Annotated[int, Field(ge=1024)] = 32 * 1024 * 1024
    max_candidates: Annotated[int, Field(ge=1)] = 10_000
    min_candidates: Annotated[int, Field(ge=0)] = 1
    ignore_unknown_features: bool = False
    request_deadline_ms: Annotated[float, Field(gt=0)] = 1000.0

    # Scoring
    scoring_threads: Annotated[int, Field(ge=1)] = 2  # used for large requests only
    parallel_min_rows: Annotated[int, Field(ge=1)] = 2000
    onnx_intra_op_threads: Annotated[int, Field(ge=1)] = 1
    onnx_inter_op_threads: Annotated[int, Field(ge=1)] = 1
    # Requests with more candidates than this are scored in a worker thread (at most
    # `scoring_concurrency` at once) so the event loop keeps serving; smaller ones inline.
    # Inline won clearly at 100 candidates (661 vs 291 req/s, bench/results/service.md) and
    # 1,000 rows score in ~1.5 ms, a short enough stall for the loop.
    inline_scoring_max_rows: Annotated[int, Field(ge=0)] = 1000
    scoring_concurrency: Annotated[int, Field(ge=1)] = 4

    # Redis (a soft dependency)
    redis_url: str | None = None
    redis_prefix: str = "ltr:"
    redis_deadline_ms: Annotated[float, Field(gt=0)] = 10.0
    redis_cache_ttl_seconds: Annotated[float, Field(ge=0)] = 30.0
    redis_cache_max_entries: Annotated[int, Field(ge=0)] = 100_000
    breaker_failure_threshold: Annotated[int, Field(ge=1)] = 5
    breaker_reset_seconds: Annotated[float, Field(gt=0)] = 2.0

    # Impression logging and click feedback (app.impressions): Redis stream when redis_url is
    # set, else the JSONL file; records are dropped (and counted) rather than slow a request.
    impressions_enabled: bool = False
    impressions_jsonl: Path | None = None
    impressions_stream_maxlen: Annotated[int, Field(ge=1)] = 1_000_000
    impressions_queue_size: Annotated[int, Field(ge=1)] = 10_000
    impressions_ttl_seconds: Annotated[int, Field(ge=1)] = 86400
