"""Which model version serves under each name, and the announcements that make it reload."""

from app.registry.model_registry import (
    AmbiguousModel,
    LoadedModel,
    ModelNotAvailable,
    ModelRegistry,
    ReloadReport,
    UnknownModel,
)

__all__ = [
    "AmbiguousModel",
    "LoadedModel",
    "ModelNotAvailable",
    "ModelRegistry",
    "ReloadReport",
    "UnknownModel",
]
