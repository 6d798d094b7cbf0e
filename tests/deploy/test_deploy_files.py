"""No Docker engine or cluster runs here, so the container and Kubernetes files are checked for
what they promise: the commands they run exist, settings they pass are real, ports, probes,
volumes and selectors agree. The same entrypoints run as processes in the integration tests."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from app.settings import Settings
from trainer.cli import app as cli_app
from trainer.nightly.config import NightlyConfig

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"


def _cli() -> Any:
    """The `ltr` command group (typer's own click-compatible group)."""
    group = typer.main.get_command(cli_app)
    assert hasattr(group, "commands")
    return group


def assert_ltr_command_exists(argv: list[str]) -> None:
    """`argv` = ["ltr", sub, --opt, value, ...]: the subcommand and every option exist."""
    assert argv[0] == "ltr", argv
    command = _cli().commands.get(argv[1])
    assert command is not None, f"no such command: ltr {argv[1]}"
    known = {opt for param in command.params for opt in getattr(param, "opts", [])}
    for token in argv[2:]:
        if token.startswith("--"):
            assert token.split("=")[0] in known, f"ltr {argv[1]} has no option {token}"


def assert_settings_env(env: dict[str, Any]) -> None:
    fields = set(Settings.model_fields)
    for key in env:
        if key.startswith("LTR_"):
            assert key[4:].lower() in fields, f"{key} is not a setting"


def dockerfile_stages() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    parts = re.split(r"^FROM\s+\S+\s+AS\s+(\w+)\s*$", text, flags=re.M | re.I)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_dockerfile_serving_image_is_lean_and_safe() -> None:
    stages = dockerfile_stages()
    assert {"build", "serve", "trainer"} <= set(stages)
    serve = stages["serve"]
    assert "build-essential" not in serve and "gcc" not in serve
    assert '"ltr-rerank[serve]"' in serve and "train" not in serve.split("[serve]")[1][:20]
    assert re.search(r"^USER\s+(?!root)\w+", serve, re.M)
    assert "HEALTHCHECK" in serve and "/livez" in serve
    cmd = re.search(r"^CMD\s+(\[.*\])", serve, re.M)
    assert cmd is not None
    assert_ltr_command_exists(yaml.safe_load(cmd.group(1)))
    trainer_cmd = re.search(r"^CMD\s+(\[.*\])", stages["trainer"], re.M)
    assert trainer_cmd is not None
    assert_ltr_command_exists(yaml.safe_load(trainer_cmd.group(1)))
    env_keys = dict(re.findall(r"(LTR_\w+)=(\S+)", serve))
    assert_settings_env(env_keys)


def test_serving_extra_matches_what_app_imports() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serve = " ".join(extras["optional-dependencies"]["serve"] + extras["dependencies"])
    for needed in ("fastapi", "uvicorn", "onnxruntime", "redis", "prometheus-client", "llvmlite"):
        assert needed in serve


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_services_and_dependencies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"redis", "api", "trainer", "trainer-init"} <= set(services)
    api = services["api"]
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert api["depends_on"]["trainer-init"]["condition"] == "service_completed_successfully"
    assert "healthcheck" in services["redis"]
    assert api["build"]["target"] == "serve"
    assert services["trainer"]["build"]["target"] == "trainer"
    assert (
        "--workers" in api["command"]
        and api["command"][api["command"].index("--workers") + 1] == "2"
    )


def test_compose_commands_settings_ports_and_volumes_agree(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("api", "trainer", "trainer-init"):
        assert_ltr_command_exists(services[name]["command"])
        assert_settings_env(services[name]["environment"])
    api_cmd = services["api"]["command"]
    port = api_cmd[api_cmd.index("--port") + 1]
    assert services["api"]["ports"] == [f"{port}:{port}"]
    registry = services["api"]["environment"]["LTR_REGISTRY"]
    for name in ("api", "trainer", "trainer-init"):
        mounts = {v.split(":")[1] for v in services[name]["volumes"] if v.startswith("registry:")}
        assert mounts == {registry}, name
    redis_url = services["api"]["environment"]["LTR_REDIS_URL"]
    assert redis_url.startswith("redis://redis:")


def test_nightly_configs_are_valid() -> None:
    NightlyConfig.model_validate(tomllib.loads((ROOT / "deploy" / "nightly.toml").read_text()))
    configmap = yaml.safe_load((K8S / "configmap.yaml").read_text())
    NightlyConfig.model_validate(tomllib.loads(configmap["data"]["nightly.toml"]))
    assert_settings_env(configmap["data"])


def _k8s_docs() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in K8S.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "kind" in doc and doc["kind"] != "Kustomization":
                docs[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_kubernetes_api_deployment_probes_and_shutdown() -> None:
    docs = _k8s_docs()
    kinds = {key.split("/")[0] for key in docs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= kinds
    assert {"CronJob", "ConfigMap", "PersistentVolumeClaim"} <= kinds
    deployment = docs["Deployment/ltr-api"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    port_names = {p["name"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] in port_names
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["terminationGracePeriodSeconds"] > 5 and container["lifecycle"]["preStop"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert_ltr_command_exists(container["command"])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert docs["Service/ltr-api"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget/ltr-api"]["spec"]["selector"]["matchLabels"] == labels
    target = docs["HorizontalPodAutoscaler/ltr-api"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "ltr-api")


def test_kubernetes_nightly_cronjob() -> None:
    cron = _k8s_docs()["CronJob/ltr-nightly"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert_ltr_command_exists(container["command"])
    config = container["command"][container["command"].index("--config") + 1]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert str(Path(config).parent) in mounts
    assert "/registry" in mounts


def test_readme_quick_start_names_the_two_make_targets() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert shlex.split(ci.strip().splitlines()[-1]) == ["exec", "make", "test"]
