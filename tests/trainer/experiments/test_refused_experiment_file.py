"""An EXPERIMENT file services refuse (corrupt, edited by hand): `status` says so and what
services do, `stop` removes it, and the other commands' errors say how to clear it. A trial:
after a hand edit status said "running 100 %" while services refused the file; after
`echo 'garbage{' > EXPERIMENT`, stop, start and decide exited 2 with "not a valid experiment
file", and deleting it by hand was the only way out, which no message said."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.artifacts.store import set_current
from app.registry.experiments import experiment_path, find_record, read_active
from tests.trainer.experiments.conftest import read_json, write_logs
from tests.trainer.experiments.test_experiment_cli import ltr, start
from trainer.cli import app
from trainer.retention import prune_versions

CLEAR = (
    "services refuse the file and serve CURRENT alone; `ltr experiment stop --name m` removes it"
)


def edit(registry: Path) -> None:
    """As the trial's `sed -i 's/"traffic": 1.0/"traffic": 0.5/'`."""
    path = experiment_path(registry, "m")
    text = path.read_text()
    assert '"traffic": 1.0' in text
    path.write_text(text.replace('"traffic": 1.0', '"traffic": 0.5'))


def garble(registry: Path) -> None:
    experiment_path(registry, "m").write_text("garbage{\n")


@pytest.mark.parametrize(
    ("spoil", "fault"),
    [(edit, "sha256 mismatch (corrupt or edited by hand)"), (garble, "not a valid experiment")],
)
def test_a_refused_file_is_reported_and_stop_clears_it(
    registry: Path, tmp_path: Path, spoil: Callable[[Path], None], fault: str
) -> None:
    assert start(registry, "--traffic", "1")[0] == 0
    spec = read_active(registry, "m")
    assert spec is not None
    logs = write_logs(tmp_path / "imp.jsonl", spec, 300, candidate_share=0.65)
    spoil(registry)
    path = experiment_path(registry, "m")

    code, out, err = ltr("status", "--registry", str(registry))
    assert code == 0, err
    (line,) = out.splitlines()
    head = "m-v2: m control v1 vs candidate v2 (interleave, 100 %) refused"
    assert line.startswith(f"{head} — {path}: {fault}")
    assert line.endswith(CLEAR)
    code, out, _ = ltr("status", "--registry", str(registry), "--json")
    status = read_json(out)
    (exp,) = status["experiments"]
    assert exp["status"] == "refused" and fault in exp["refused"]
    (refused,) = status["refused_files"]
    assert refused["model"] == "m" and refused["refused"].startswith(f"{path}: {fault}")

    for args in (
        ("start", "--registry", str(registry), "--name", "m", "--candidate", "v2"),
        ("decide", "--registry", str(registry), "--name", "m", "--logs", str(logs)),
        ("report", "--registry", str(registry), "--name", "m", "--logs", str(logs)),
    ):
        code, out, err = ltr(*args)
        assert code == 2 and out == "", args
        (line,) = err.strip().splitlines()
        assert line.startswith(f"error: {path}: {fault}") and line.endswith(CLEAR), (args, line)

    code, out, err = ltr("stop", "--registry", str(registry), "--name", "m")
    assert code == 0, err
    removed, stopped = out.splitlines()
    assert removed.startswith(f"removed {path}, which services refused: {path}: {fault}")
    assert stopped == "stopped m-v2"
    assert not path.exists()
    record = find_record(registry, "m-v2")
    assert record.status == "stopped"
    assert record.reason == "stopped by hand (its EXPERIMENT file was refused)"
    code, out, _ = ltr("status", "--registry", str(registry))
    assert out.strip() == (
        "m-v2: m control v1 vs candidate v2 (interleave, 100 %) stopped — stopped by hand "
        "(its EXPERIMENT file was refused)"
    )
    assert start(registry, "--experiment", "again")[0] == 0  # the model is free again


def test_a_refused_file_with_no_record_is_listed_and_removed(registry: Path) -> None:
    garble(registry)
    path = experiment_path(registry, "m")
    code, out, _ = ltr("status", "--registry", str(registry))
    assert out.strip().startswith(f"m: {path}: not a valid experiment file (")
    assert out.strip().endswith(CLEAR)
    code, out, err = ltr("stop", "--registry", str(registry), "--name", "m", "--json")
    assert code == 0, err
    stopped = read_json(out)
    assert stopped["removed"] == str(path) and stopped["stopped"] == []
    assert "not a valid experiment file" in stopped["refused"]
    assert not path.exists()
    code, out, _ = ltr("status", "--registry", str(registry))
    assert out.strip() == "no experiments"


def test_a_record_no_file_names_is_reported_and_stop_ends_it(registry: Path) -> None:
    """The trial's way out, deleting the file by hand, left the record running for good."""
    assert start(registry)[0] == 0
    experiment_path(registry, "m").unlink()
    code, out, _ = ltr("status", "--registry", str(registry), "--json")
    (exp,) = read_json(out)["experiments"]
    assert exp["status"] == "refused"
    assert exp["refused"] == (
        "no EXPERIMENT file names it, so no service serves it; "
        "`ltr experiment stop --name m` marks it stopped"
    )
    code, out, err = ltr("stop", "--registry", str(registry), "--name", "m")
    assert code == 0 and out.strip() == "stopped m-v2", err
    record = find_record(registry, "m-v2")
    assert record.status == "stopped"
    assert record.reason == "stopped by hand (no EXPERIMENT file named it: no service served it)"
    code, _, err = ltr("stop", "--registry", str(registry), "--name", "m")
    assert code == 2 and "runs no experiment" in err


def test_publish_and_pruning_say_how_to_clear_a_refused_file(
    registry: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """They read the file too: publish said nothing of it, pruning named no way out."""
    garble(registry)
    path = experiment_path(registry, "m")
    set_current(registry, "m", "v2")
    args = ["publish", "--registry", str(registry), "--rollback", "--name", "m"]
    rolled = CliRunner().invoke(app, args)
    assert rolled.exit_code == 0, rolled.stderr
    warning = f"warning: {path}: not a valid experiment file"
    lines = rolled.stderr.splitlines()
    assert any(line.startswith(warning) and line.endswith(CLEAR) for line in lines), lines
    with caplog.at_level(logging.WARNING):
        assert prune_versions(registry, "m", keep=1) == []
    assert caplog.records[-1].getMessage().endswith(CLEAR)
