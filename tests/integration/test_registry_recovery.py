"""The served registry going wrong and being put right, seen over HTTP (a black-box trial):
a refused version retried once re-published, errors that go once they no longer hold, and a
registry or CURRENT that disappears reported instead of passing in silence."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from app.artifacts.store import set_current
from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NF = 4
WAIT_S = 15.0


def failures(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    found = re.search(r'^ltr_model_reload_failures_total\{model="m"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def until(client: httpx.Client, check: Callable[[dict], bool], what: str) -> dict:
    """The first /models body `check` accepts (the service polls every 0.2 s)."""
    end = time.monotonic() + WAIT_S
    while True:
        body = client.get("/models").json()
        if check(body):
            return body
        if time.monotonic() > end:
            raise AssertionError(f"{what}: /models still {body}")
        time.sleep(0.1)


def serving(body: dict) -> list[str]:
    return [m["version"] for m in body["models"]]


def test_the_service_recovers_from_a_refused_version_and_reports_a_lost_registry(
    tmp_path: Path,
) -> None:
    root = tmp_path / "reg"
    publish(root, random_ensemble(NF, seed=1), version="v1")
    repaired = random_ensemble(NF, seed=2)
    publish(root, repaired, version="v2")
    model_file = root / "m" / "v2" / "model.json"
    model_file.write_bytes(model_file.read_bytes()[:1000])  # truncated on disk
    env = {"LTR_REGISTRY": str(root), "LTR_RELOAD_POLL_SECONDS": "0.2"}
    with uvicorn_server(env) as srv, httpx.Client(base_url=srv.url) as client:
        body = client.get("/models").json()
        assert serving(body) == ["v1"] and "serving the older version v1" in body["errors"]["m"]
        assert "serving nothing" not in srv.log()  # the start-up's one line names v1

        # Removed and published again: the poll retries it, and the error goes.
        shutil.rmtree(root / "m" / "v2")
        publish(root, repaired, version="v2")
        until(client, lambda b: serving(b) == ["v2"] and b["errors"] == {}, "v2 re-published")

        # CURRENT at a version that is not there, then back at the one serving.
        (root / "m" / "CURRENT").write_text("nosuch\n")
        until(client, lambda b: "version nosuch refused" in b["errors"].get("m", ""), "nosuch")
        set_current(root, "m", "v2")
        until(client, lambda b: b["errors"] == {}, "CURRENT back on v2")

        # CURRENT removed, then the whole registry moved away: reported, counted, still served.
        for lose, restore, error in (
            (
                lambda: (root / "m" / "CURRENT").unlink(),
                lambda: set_current(root, "m", "v2"),
                "m/CURRENT is missing",
            ),
            (
                lambda: root.rename(tmp_path / "moved"),
                lambda: (tmp_path / "moved").rename(root),
                "the registry directory does not exist",
            ),
        ):
            before = failures(client)
            lose()
            until(client, lambda b, e=error: b["errors"].get("m") == e, error)
            time.sleep(0.5)
            assert failures(client) >= before + 2  # one per poll
            assert client.get("/readyz").status_code == 200
            assert serving(client.get("/models").json()) == ["v2"]
            restore()
            until(client, lambda b: b["errors"] == {}, f"{error}: restored")
    log = srv.log()
    assert log.count("m/CURRENT is missing") == 1  # once when it started, not every poll
    assert f"the registry {root} does not exist" in log
