"""Which model version serves under each name, and the announcements that make it reload."""

from app.registry.model_registry import (
    NOTHING_LOADED,
    AmbiguousModel,
    LoadedModel,
    ModelNotAvailable,
    ModelRegistry,
    ReloadReport,
    UnknownModel,
)

__all__ = [
    "NOTHING_LOADED",
    "AmbiguousModel",
    "LoadedModel",
    "ModelNotAvailable",
    "ModelRegistry",
    "ReloadReport",
    "UnknownModel",
]
