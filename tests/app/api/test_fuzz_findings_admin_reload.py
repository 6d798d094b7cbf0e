"""Fuzz trial finding: `POST /admin/reload?model=NAME` for a name the registry has no
directory for answered 200 with nothing loaded, unchanged or failed, so a typo looked like a
reload of a model already up to date. It is a 404 naming the models there; a registry that is
gone or cannot be read stays a 503."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.app.api.conftest import NF, TOKEN
from tests.support import publish, random_ensemble

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_a_model_not_in_the_registry_is_404_naming_those_there(client: TestClient) -> None:
    resp = client.post("/admin/reload?model=no-such-model", headers=AUTH)
    assert resp.status_code == 404, resp.text
    assert resp.json() == {"detail": "no model 'no-such-model' in the registry; it holds: m"}
    # A model that is there is reloaded as before.
    resp = client.post("/admin/reload?model=m", headers=AUTH)
    assert resp.status_code == 200
    assert resp.json() == {
        "loaded": [],
        "unchanged": [{"name": "m", "version": "v1"}],
        "failed": [],
    }


def test_a_long_list_of_models_is_cut(client: TestClient, registry_dir: Path) -> None:
    for i in range(12):
        (registry_dir / f"other{i:02d}").mkdir()
    (registry_dir / ".hidden").mkdir()
    detail = client.post("/admin/reload?model=nope", headers=AUTH).json()["detail"]
    assert detail.startswith("no model 'nope' in the registry; it holds 13 models (m, other00, ")
    assert detail.endswith(", other08, ...)") and ".hidden" not in detail


def test_a_file_named_like_the_model_is_not_a_model(client: TestClient, registry_dir) -> None:
    (registry_dir / "plain-file").write_text("x")
    resp = client.post("/admin/reload?model=plain-file", headers=AUTH)
    assert resp.status_code == 404 and "'plain-file'" in resp.json()["detail"]


def test_a_served_model_whose_directory_went_says_it_still_serves(
    client: TestClient, registry_dir: Path
) -> None:
    publish(registry_dir, random_ensemble(NF, seed=3), name="gone", version="g1")
    assert client.post("/admin/reload", headers=AUTH).json()["loaded"] == [
        {"name": "gone", "version": "g1"}
    ]
    (registry_dir / "gone").rename(registry_dir / ".gone-away")
    resp = client.post("/admin/reload?model=gone", headers=AUTH)
    assert resp.status_code == 404
    assert (
        resp.json()["detail"]
        == "no model 'gone' in the registry; it holds: m; gone/g1 still serves"
    )


def test_a_registry_gone_or_unreadable_stays_503(
    client: TestClient, registry_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.artifacts.store as store

    def unreadable(root: Path) -> list[str]:
        raise PermissionError(13, "Permission denied", str(root))

    monkeypatch.setattr(store, "list_models", unreadable)
    resp = client.post("/admin/reload?model=no-such-model", headers=AUTH)
    assert resp.status_code == 503
    assert resp.json()["detail"].startswith("the registry cannot be read")
    monkeypatch.undo()
    registry_dir.rename(registry_dir.with_name("moved"))
    resp = client.post("/admin/reload?model=no-such-model", headers=AUTH)
    assert resp.status_code == 503
    assert resp.json() == {
        "detail": "the registry directory does not exist; the served versions stay"
    }
