"""Publishing or rolling back to a version whose user clusters differ warns the operator:
users of a cluster the new table lacks fall back to coarser ids without anyone being told."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from app.artifacts.manifest import ClusterScheme
from app.artifacts.store import write_version_dir
from app.artifacts.tree_dump import TreeEnsemble
from tests.app.features.conftest import CLUSTERS, make_files, make_manifest
from tests.support import stump
from tests.trainer.registry_versions import run_version
from trainer.cli import app
from trainer.publish import publish


def user_version(runs: Path, version: str, clusters: list[str], scheme_values: list[str]) -> Path:
    manifest = make_manifest(version)
    assert manifest.user_clusters is not None
    fields = [f.model_copy() for f in manifest.user_clusters.scheme.fields]
    fields[0] = fields[0].model_copy(update={"values": scheme_values})
    users = manifest.user_clusters.model_copy(update={"scheme": ClusterScheme(fields=fields)})
    manifest = manifest.model_copy(update={"user_clusters": users})
    files = {**make_files(clusters), "model.json": TreeEnsemble(4, [stump()]).to_json_bytes()}
    return write_version_dir(runs / version, manifest, files)


def test_publish_warns_of_lost_clusters_a_new_scheme_and_lost_user_features(
    tmp_path: Path,
) -> None:
    registry, runs = tmp_path / "registry", tmp_path / "runs"
    publish(user_version(runs, "v1", CLUSTERS, ["US", "FR"]), registry)
    same = publish(user_version(runs, "v2", [*CLUSTERS, "US_pn1"], ["US", "FR"]), registry)
    assert same.warnings == []  # a cluster added takes nobody's away
    fewer = publish(user_version(runs, "v3", ["unknown", "US", "FR"], ["US", "FR"]), registry)
    assert len(fewer.warnings) == 1
    assert "m v3 lacks 3 cluster id(s) v2 had (US_pn0, FR_pn2, US_pn1)" in fewer.warnings[0]
    other = publish(user_version(runs, "v4", ["unknown", "US", "FR"], ["US", "DE"]), registry)
    assert other.warnings == [
        "warning: m v4 buckets user profiles by another scheme than v3: users map to other "
        "cluster ids (overrides in Redis may name ids it lacks)"
    ]
    plain = run_version(runs, "v5", ("bm25", "emb0", "emb1", "emb2"))
    gone = publish(plain, registry).warnings
    assert gone == ["warning: m v5 has no user features (v4 had): requests' users are ignored"]


def test_rollback_warns_when_it_loses_clusters(tmp_path: Path) -> None:
    registry, runs = tmp_path / "registry", tmp_path / "runs"
    publish(user_version(runs, "v1", ["unknown", "US"], ["US", "FR"]), registry)
    publish(user_version(runs, "v2", CLUSTERS, ["US", "FR"]), registry)
    back = CliRunner().invoke(
        app, ["publish", "--rollback", "--name", "m", "--registry", str(registry)]
    )
    assert back.exit_code == 0, back.output
    assert "warning: m v1 lacks 3 cluster id(s) v2 had (US_pn0, FR, FR_pn2)" in back.stderr
