from __future__ import annotations

import threading
from hashlib import sha256
from pathlib import Path

import pytest

from app.artifacts.manifest import Manifest, new_version_id
from app.artifacts.store import (
    ArtifactError,
    list_versions,
    load_version,
    read_current,
    set_current,
    write_version,
)
from app.artifacts.tree_dump import TreeEnsemble


def test_write_then_load_verifies(tmp_path: Path, manifest: Manifest, ensemble) -> None:
    path = write_version(tmp_path, manifest, {"model.json": ensemble.to_json_bytes()})
    art = load_version(path)
    assert art.manifest.files["model.json"] == sha256(ensemble.to_json_bytes()).hexdigest()
    assert TreeEnsemble.from_json_bytes(art.files["model.json"]).num_features == 2
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_corrupt_artifacts_are_refused(tmp_path: Path, manifest, ensemble, damage: str) -> None:
    path = write_version(tmp_path, manifest, {"model.json": ensemble.to_json_bytes()})
    model = path / "model.json"
    data = model.read_bytes()
    if damage == "truncate":
        model.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        model.write_bytes(data.replace(b"0.25", b"0.26", 1))
    else:
        model.unlink()
    with pytest.raises(ArtifactError, match=r"model\.json"):
        load_version(path)


def test_bad_manifest_is_refused(tmp_path: Path, manifest, ensemble) -> None:
    path = write_version(tmp_path, manifest, {"model.json": ensemble.to_json_bytes()})
    (path / "manifest.json").write_text('{"kind": "pickle"}')
    with pytest.raises(ArtifactError, match=r"manifest\.json"):
        load_version(path)
    (path / "manifest.json").write_text("garbage")
    with pytest.raises(ArtifactError) as caught:
        load_version(path)
    # No empty location: it read "manifest.json: : Invalid JSON".
    assert str(caught.value).startswith(f"{path / 'manifest.json'}: Invalid JSON: ")


def test_unknown_files_are_refused(tmp_path: Path, manifest) -> None:
    with pytest.raises(ArtifactError, match="not allowed"):
        write_version(tmp_path, manifest, {"model.pkl": b"x", "model.json": b"{}"})


def test_current_is_replaced_atomically(tmp_path: Path, manifest, ensemble) -> None:
    versions = []
    for _ in range(3):
        m = manifest.model_copy(update={"version": new_version_id()})
        write_version(tmp_path, m, {"model.json": ensemble.to_json_bytes()})
        versions.append(m.version)
    assert list_versions(tmp_path, "demo") == sorted(versions)
    seen: set[str | None] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(read_current(tmp_path, "demo"))

    thread = threading.Thread(target=reader)
    thread.start()
    for _ in range(50):
        for v in versions:
            set_current(tmp_path, "demo", v)
    stop.set()
    thread.join()
    assert seen <= {None, *versions}  # never a partial or empty value
    with pytest.raises(ArtifactError, match="no such version"):
        set_current(tmp_path, "demo", "missing")
