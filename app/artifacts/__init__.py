"""Model artifacts: the manifest, the tree dump format, and the versioned on-disk registry."""

from app.artifacts.manifest import (
    NAME_PATTERN,
    BucketedField,
    ClusterScheme,
    Manifest,
    MissingValueRule,
    UserClusters,
    new_version_id,
)
from app.artifacts.store import (
    Artifact,
    ArtifactError,
    list_models,
    list_versions,
    load_version,
    read_current,
    set_current,
    write_version,
    write_version_dir,
)
from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeDumpError, TreeEnsemble

__all__ = [
    "NAME_PATTERN",
    "ZERO_THRESHOLD",
    "Artifact",
    "ArtifactError",
    "BucketedField",
    "ClusterScheme",
    "Manifest",
    "MissingValueRule",
    "Tree",
    "TreeDumpError",
    "TreeEnsemble",
    "UserClusters",
    "list_models",
    "list_versions",
    "load_version",
    "new_version_id",
    "read_current",
    "set_current",
    "write_version",
    "write_version_dir",
]
