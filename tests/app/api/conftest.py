"""An app over a registry in tmp_path holding one small tree model `m` (5 features)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.artifacts.tree_dump import TreeEnsemble
from app.main import create_app
from app.settings import Settings
from tests.support import publish, random_ensemble

NF = 5
TOKEN = "s3cret-token"


@pytest.fixture(scope="session")
def ensemble() -> TreeEnsemble:
    return random_ensemble(NF, num_trees=10, depth=3, seed=7)


@pytest.fixture
def registry_dir(tmp_path: Path, ensemble: TreeEnsemble) -> Path:
    root = tmp_path / "registry"
    publish(root, ensemble, name="m", version="v1")
    return root


def app_settings(**overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "reload_poll_seconds": 0,
        "admin_token": TOKEN,
        "max_body_bytes": 64 * 1024,
        "max_candidates": 50,
        "inline_scoring_max_rows": 4,
        "parallel_min_rows": 64,  # a short warm-up
        # In-process apps share the pytest process, whose full garbage collections (or a
        # loaded CI machine) can stall a request past the 100 ms default and shed it: tests
        # of the budget set their own.
        "request_budget_ms": 10_000.0,
        "gc_freeze": False,  # the pytest process builds many apps: nothing may stay frozen
    }
    options.update(overrides)
    return Settings(**options)


def wait_ready(client: TestClient, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < end, client.get("/readyz").json()
        time.sleep(0.01)


ClientFactory = Callable[..., AbstractContextManager[TestClient]]


@pytest.fixture
def make_client(registry_dir: Path) -> ClientFactory:
    @contextmanager
    def factory(ready: bool = True, **overrides: Any) -> Iterator[TestClient]:
        app = create_app(app_settings(**{"registry": registry_dir, **overrides}))
        with TestClient(app) as client:
            if ready:
                wait_ready(client)
            yield client

    return factory


@pytest.fixture
def client(make_client: ClientFactory) -> Iterator[TestClient]:
    with make_client() as c:
        yield c


@pytest.fixture(scope="module")
def shared_client(
    tmp_path_factory: pytest.TempPathFactory, ensemble: TreeEnsemble
) -> Iterator[TestClient]:
    """One app for a module of tests that change nothing (bad-input tests)."""
    root = tmp_path_factory.mktemp("shared") / "registry"
    publish(root, ensemble, name="m", version="v1")
    with TestClient(create_app(app_settings(registry=root))) as client:
        wait_ready(client)
        yield client


@pytest.fixture(scope="session")
def shed_kernels() -> object:
    from app.api import body_marks

    return body_marks.KERNEL.compile_now()


@pytest.fixture(params=["kernel", "numpy"])
def shed_path(
    request: pytest.FixtureRequest, shed_kernels: object, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The shed path's compiled kernels (app.api.ids_kernel), or numpy's path that serves until
    they are compiled."""
    from app.api import body_marks

    kernel = shed_kernels if request.param == "kernel" else None
    monkeypatch.setattr(body_marks.KERNEL, "_kernel", kernel)
    return str(request.param)
