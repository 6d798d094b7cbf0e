"""Impression logging and click feedback: what /rerank served, what users did with it."""

from app.impressions.feedback import (
    EVENT_TYPES,
    FeedbackError,
    FeedbackUnavailable,
    ImpressionLog,
    UnknownRequest,
    log_impression,
)
from app.impressions.sink import ImpressionSink, JsonlWriter, RedisStreamWriter

__all__ = [
    "EVENT_TYPES",
    "FeedbackError",
    "FeedbackUnavailable",
    "ImpressionLog",
    "ImpressionSink",
    "JsonlWriter",
    "RedisStreamWriter",
    "UnknownRequest",
    "log_impression",
]
