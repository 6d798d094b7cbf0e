"""`ltr experiment`: start/stop/status, bad input refused with nothing written, report and
decide (promote / roll back) from logs."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from app.artifacts.store import load_version, read_current
from app.registry.experiments import (
    compatibility_errors,
    experiment_path,
    find_record,
    read_active,
)
from tests.support import publish, random_ensemble
from tests.trainer.experiments.conftest import NF, read_json, write_logs
from trainer.cli import app

runner = CliRunner()


def ltr(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["experiment", *args])
    return result.exit_code, result.stdout, result.stderr


def start(registry: Path, *extra: str) -> tuple[int, str, str]:
    return ltr("start", "--registry", str(registry), "--name", "m", "--candidate", "v2", *extra)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_start_status_stop(registry: Path) -> None:
    code, out, err = start(registry, "--mode", "ab", "--traffic", "0.25", "--json")
    assert code == 0, err
    spec = read_json(out)
    assert spec["control"] == "v1" and spec["candidate"] == "v2" and spec["traffic"] == 0.25
    active = read_active(registry, "m")
    assert active is not None and active.mode == "ab"
    code, out, _ = ltr("status", "--registry", str(registry))
    assert "m-v2" in out and "running" in out
    code, out, err = ltr("stop", "--registry", str(registry), "--name", "m")
    assert code == 0, err
    assert not experiment_path(registry, "m").exists()
    assert find_record(registry, "m-v2").status == "stopped"
    assert read_current(registry, "m") == "v1"


def test_status_of_a_registry_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    """A held-out review's mistyped --registry printed no experiments and exited 0."""
    code, out, err = ltr("status", "--registry", str(tmp_path / "nonexist"), "--json")
    assert code == 2 and "no such registry directory" in err
    assert read_json(out)["status"] == "error"


def test_bad_input_is_refused_and_nothing_is_written(registry: Path) -> None:
    before = snapshot(registry)
    cases = [
        (("--candidate", "v9"), "unknown version 'v9'"),
        (("--traffic", "0"), "traffic"),
        (("--traffic", "1.5"), "traffic"),
        (("--mode", "split"), ""),
    ]
    for extra, message in cases:
        code, _, err = ltr(
            "start", "--registry", str(registry), "--name", "m", "--candidate", "v2", *extra
        )
        assert code == 2 and message in err, (extra, err)
    code, _, err = ltr("start", "--registry", str(registry), "--name", "nope", "--candidate", "v2")
    assert code == 2 and "no CURRENT" in err
    code, _, err = ltr("start", "--registry", str(registry), "--name", "m", "--candidate", "v1")
    assert code == 2
    assert err.strip() == "error: candidate 'v1' is the control version itself"  # one line
    publish(registry, random_ensemble(NF, seed=5), version="v3", current=False, names=list("abcd"))
    before = snapshot(registry)
    code, _, err = ltr("start", "--registry", str(registry), "--name", "m", "--candidate", "v3")
    assert code == 2 and "feature names differ" in err
    assert snapshot(registry) == before
    code, _, err = ltr("stop", "--registry", str(registry), "--name", "m")
    assert code == 2 and "runs no experiment" in err


def test_overlapping_experiments_are_refused(registry: Path) -> None:
    assert start(registry)[0] == 0
    publish(registry, random_ensemble(NF, seed=6), version="v3", current=False)
    before = snapshot(registry)
    code, _, err = ltr("start", "--registry", str(registry), "--name", "m", "--candidate", "v3")
    assert code == 2 and "already runs experiment 'm-v2'" in err
    assert snapshot(registry) == before


def test_user_clusters_must_match(registry: Path) -> None:
    from app.artifacts.manifest import ClusterScheme, UserClusters

    control = load_version(registry / "m" / "v1").manifest
    scheme = ClusterScheme.model_validate(
        {"fields": [{"name": "country", "kind": "categorical", "values": ["US"]}]}
    )
    clustered = control.model_copy(
        update={"user_clusters": UserClusters(scheme=scheme, embedding_dim=2, input="onnx_input")}
    )
    assert compatibility_errors(control, clustered) == [
        "candidate's user clusters differ from the control's"
    ]
    assert compatibility_errors(control, control) == []


def test_interleaving_report_and_promotion(registry: Path, tmp_path: Path) -> None:
    assert start(registry)[0] == 0
    spec = read_active(registry, "m")
    assert spec is not None
    logs = write_logs(tmp_path / "imp.jsonl", spec, 1500, candidate_share=0.65)
    html = tmp_path / "report.html"
    code, out, err = ltr(
        "report",
        "--registry",
        str(registry),
        "--name",
        "m",
        "--logs",
        str(logs),
        "--html",
        str(html),
    )
    assert code == 0, err
    assert "impressions: 1500" in out and "wins:" in out and "always-valid p" in out
    page = html.read_text()
    assert "<polyline" in page and "cumulative preference" in page
    code, out, err = ltr(
        "report", "--registry", str(registry), "--name", "m", "--logs", str(logs), "--json"
    )
    il = read_json(out)["analysis"]["interleaving"]
    assert il["wins"] + il["losses"] == 1500 and il["preference"] > 0.1
    # A torn last line (a write in progress) is skipped with a warning, as `ltr dataset` does
    # (a trial found report and decide skipping it silently).
    whole = logs.read_bytes()
    logs.write_bytes(whole + whole.splitlines(keepends=True)[0][:50])
    code, out, err = ltr(
        "report", "--registry", str(registry), "--name", "m", "--logs", str(logs), "--json"
    )
    lines = len(whole.splitlines())
    assert code == 0 and read_json(out)["analysis"]["interleaving"] == il
    assert f"warning: {logs}:{lines + 1}: skipped an unreadable last line" in err
    logs.write_bytes(whole)
    # Too few impressions: keep going, nothing changes.
    code, out, _ = ltr(
        "decide",
        "--registry",
        str(registry),
        "--name",
        "m",
        "--logs",
        str(logs),
        "--min-impressions",
        "5000",
    )
    assert code == 0 and "continue" in out and read_active(registry, "m") is not None
    code, out, err = ltr("decide", "--registry", str(registry), "--name", "m", "--logs", str(logs))
    assert code == 0 and "promote" in out, err
    assert read_current(registry, "m") == "v2" and read_active(registry, "m") is None
    record = find_record(registry, "m-v2")
    assert record.status == "promoted" and record.decision is not None


def test_a_losing_candidate_is_rolled_back(registry: Path, tmp_path: Path) -> None:
    assert start(registry)[0] == 0
    spec = read_active(registry, "m")
    assert spec is not None
    logs = write_logs(tmp_path / "imp.jsonl", spec, 1500, candidate_share=0.35)
    code, out, err = ltr(
        "decide", "--registry", str(registry), "--name", "m", "--logs", str(logs), "--json"
    )
    assert code == 0, err
    assert read_json(out)["action"] == "rollback"
    assert read_current(registry, "m") == "v1" and read_active(registry, "m") is None
    assert find_record(registry, "m-v2").status == "rolled_back"


def test_ab_report(registry: Path, tmp_path: Path) -> None:
    assert start(registry, "--mode", "ab")[0] == 0
    spec = read_active(registry, "m")
    assert spec is not None
    logs = write_logs(tmp_path / "imp.jsonl", spec, 2000, candidate_share=0.9)
    code, out, err = ltr(
        "report", "--registry", str(registry), "--name", "m", "--logs", str(logs), "--json"
    )
    assert code == 0, err
    analysis = read_json(out)["analysis"]
    arms = analysis["arm_impressions"]
    assert arms["control"] + arms["candidate"] == 2000
    clicks = analysis["ab"]["clicks"]
    assert clicks["candidate"] > clicks["control"] and clicks["p_value"] < 0.05
    code, _, err = ltr("report", "--registry", str(registry), "--name", "m")
    assert code == 2 and "--logs" in err


def test_a_traffic_that_is_no_number_and_an_empty_name_are_refused(registry: Path) -> None:
    """A trial: `--traffic nan` was refused as "less than or equal to 1", and `--experiment ''`
    started an experiment under the default name."""
    start(registry, "--traffic", "2")  # the lock file, made by any start
    before = snapshot(registry)
    for traffic in ("nan", "inf"):
        code, _, err = start(registry, "--traffic", traffic)
        assert code == 2
        assert err.strip() == "error: traffic: Input should be a finite number", err
    code, _, err = start(registry, "--experiment", "")
    assert code == 2
    assert err.strip() == "error: the experiment name is empty: give one, or leave it out for m-v2"
    assert snapshot(registry) == before
