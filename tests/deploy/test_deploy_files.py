"""The container and Kubernetes files checked for what they promise: the commands they run exist,
settings they pass are real, ports, probes, volumes and selectors agree. No cluster runs here;
test_compose_smoke.py builds and runs docker-compose.yml itself where a Docker daemon is."""

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
    parts = re.split(r"^FROM\s+\S+\s+AS\s+([\w-]+)\s*$", text, flags=re.M | re.I)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_dockerfile_serving_image_is_lean_and_safe() -> None:
    stages = dockerfile_stages()
    assert {"build", "serve", "build-trainer", "trainer"} <= set(stages)
    serve = stages["serve"]
    assert "build-essential" not in serve and "gcc" not in serve
    # The serving venv is built with the serve extra alone and copied whole.
    assert '".[serve]"' in stages["build"]
    assert "TRAINER_EXTRAS" not in stages["build"] and "torch" not in stages["build"].lower()
    assert "COPY --from=build /opt/ltr /opt/ltr" in serve
    assert re.search(r"^USER\s+(?!root|0\b)\w+", serve, re.M)
    assert "HEALTHCHECK" in serve and "/livez" in serve
    cmd = re.search(r"^CMD\s+(\[.*\])", serve, re.M)
    assert cmd is not None
    assert_ltr_command_exists(yaml.safe_load(cmd.group(1)))
    trainer_cmd = re.search(r"^CMD\s+(\[.*\])", stages["trainer"], re.M)
    assert trainer_cmd is not None
    assert_ltr_command_exists(yaml.safe_load(trainer_cmd.group(1)))
    assert re.search(r"^USER\s+(?!root|0\b)\w+", stages["trainer"], re.M)
    env_keys = dict(re.findall(r"(LTR_\w+)=(\S+)", serve))
    assert_settings_env(env_keys)


def test_dockerfile_builds_without_docker_hub_or_the_pytorch_index() -> None:
    text = (ROOT / "Dockerfile").read_text()
    # No BuildKit frontend image to pull (`# syntax=`); every base is the PYTHON_IMAGE argument.
    assert not re.search(r"^#\s*syntax=", text, re.M)
    assert re.match(r"(?s)(#[^\n]*\n|\s)*ARG PYTHON_IMAGE=python:3\.11-slim\n", text)
    stages = set(dockerfile_stages())
    for base in re.findall(r"^FROM\s+(\S+)", text, re.M):
        assert base == "${PYTHON_IMAGE}" or base in stages, base
    trainer = dockerfile_stages()["build-trainer"]
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in trainer
    # The index only with torch (the dnn extra): pip retries an unreachable index per package.
    assert '*,dnn,*) index="$TORCH_INDEX_URL"' in trainer
    assert '${index:+--extra-index-url "$index"}' in trainer
    assert "ARG TRAINER_EXTRAS=serve,train,dnn" in trainer
    # The serve target comes before the trainer's stages: the classic builder (docker-compose
    # 1.29) builds every stage up to its target, and must not need torch for the API image.
    order = list(dockerfile_stages())
    assert order.index("serve") < order.index("build-trainer")


def test_healthchecks_are_sized_for_a_loaded_container(compose: dict[str, Any]) -> None:
    text = (ROOT / "Dockerfile").read_text()
    flags = dict(re.findall(r"--([\w-]+)=(\d+)s?", text.split("HEALTHCHECK", 1)[1].split("CMD")[0]))
    assert int(flags["timeout"]) >= 5 and int(flags["retries"]) * int(flags["interval"]) >= 60
    check = compose["services"]["api"]["healthcheck"]
    assert "/livez" in " ".join(check["test"]) and "/readyz" not in " ".join(check["test"])
    seconds = int(check["interval"].rstrip("s")) * check["retries"]
    assert int(check["timeout"].rstrip("s")) >= 5 and seconds >= 60


def test_ignore_files_keep_generated_paths_out() -> None:
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "registry", "runs", "**/__pycache__", "tests"):
        assert path in dockerignore, path
    gitignore = {line.rstrip("/") for line in (ROOT / ".gitignore").read_text().split()}
    for path in ("/registry", "/runs", ".venv", "__pycache__"):
        assert path in gitignore, path


def test_license_is_an_spdx_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"


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
    assert services["trainer-init"]["build"]["target"] == "trainer"
    # The nightly loop runs the image trainer-init built (built once, not twice).
    assert services["trainer"]["image"] == services["trainer-init"]["image"]
    assert services["api"]["image"] != services["trainer"]["image"]
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
    assert services["api"]["ports"] == [f"${{LTR_HTTP_PORT:-8000}}:{port}"]
    registry = services["api"]["environment"]["LTR_REGISTRY"]
    for name in ("api", "trainer", "trainer-init"):
        mounts = {v.split(":")[1] for v in services[name]["volumes"] if v.startswith("registry:")}
        assert mounts == {registry}, name
    redis_url = services["api"]["environment"]["LTR_REDIS_URL"]
    assert redis_url.startswith("redis://redis:")


def test_nightly_configs_are_valid() -> None:
    NightlyConfig.model_validate(tomllib.loads((ROOT / "deploy" / "nightly.toml").read_text()))
    docs = _k8s_docs()
    NightlyConfig.model_validate(tomllib.loads(_nightly_configmap(docs)))
    assert_settings_env(docs["ConfigMap/ltr-settings"]["data"])


def _nightly_configmap(docs: dict[str, dict[str, Any]]) -> str:
    text: str = docs["ConfigMap/ltr-nightly-config"]["data"]["nightly.toml"]
    return text


def test_kubernetes_env_configmaps_hold_only_settings() -> None:
    """`envFrom` makes every key of the ConfigMap a variable: nightly.toml sat beside the
    settings and came into every pod as a multi-line variable (or an event per pod)."""
    docs = _k8s_docs()
    for key, pod in _pod_specs().items():
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                data = docs[f"ConfigMap/{source['configMapRef']['name']}"]["data"]
                assert all(name.startswith("LTR_") for name in data), key


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
    readiness, liveness = container["readinessProbe"], container["livenessProbe"]
    assert readiness["httpGet"]["path"] == "/readyz"
    assert liveness["httpGet"]["path"] == "/livez"
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    # Load must not restart a pod: a generous timeout, a minute of misses before liveness fails.
    assert liveness["timeoutSeconds"] >= 5
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60
    assert readiness["timeoutSeconds"] >= 2 and readiness["failureThreshold"] >= 2
    port_names = {p["name"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] in port_names
    # Probes go to the probe listener (a thread: never queued behind requests).
    env = {e["name"]: e.get("value") for e in container["env"]}
    probe_port = next(p for p in container["ports"] if p["name"] == "probes")
    assert env["LTR_PROBE_PORT"] == str(probe_port["containerPort"])
    for probe in (readiness, liveness, container["startupProbe"]):
        assert probe["httpGet"]["port"] == "probes"
    # Scraped on the probe listener too: /metrics never queues behind requests there.
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(probe_port["containerPort"])
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["terminationGracePeriodSeconds"] > 5 and container["lifecycle"]["preStop"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert_ltr_command_exists(container["command"])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert docs["Service/ltr-api"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget/ltr-api"]["spec"]["selector"]["matchLabels"] == labels
    target = docs["HorizontalPodAutoscaler/ltr-api"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "ltr-api")


def _pod_specs() -> dict[str, dict[str, Any]]:
    specs = {}
    for key, doc in _k8s_docs().items():
        spec = doc.get("spec", {})
        if "jobTemplate" in spec:
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            specs[key] = spec["template"]["spec"]
    return specs


def test_kubernetes_pods_share_the_registry_as_group_10001() -> None:
    for key, pod in _pod_specs().items():
        claims = {
            v.get("persistentVolumeClaim", {}).get("claimName") for v in pod.get("volumes", [])
        }
        if "ltr-registry" in claims:
            context = pod["securityContext"]
            assert context["fsGroup"] == 10001 and context["runAsUser"] == 10001, key


def test_kubernetes_images_are_the_ones_make_builds() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    mapped = {image["name"] for image in kustomization["images"]}
    used = set()
    for pod in _pod_specs().values():
        used |= {c["image"].split(":")[0] for c in pod["containers"]}
    # Every image is mapped (Redis too: a mirror where Docker Hub is unreachable).
    assert used == mapped == {"ltr-rerank-serve", "ltr-rerank-trainer", "redis"}
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^push-images:", makefile, re.M)
    assert "$(IMAGE_PREFIX)-serve" in makefile and "IMAGE_PREFIX ?= ltr-rerank" in makefile


def test_kubernetes_bootstrap_job_publishes_before_the_first_nightly_run() -> None:
    job = _k8s_docs()["Job/ltr-nightly-bootstrap"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert_ltr_command_exists(container["command"])
    assert "--bootstrap-demo" in container["command"]
    assert container["image"] == "ltr-rerank-trainer"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


def test_kubernetes_nightly_config_is_the_compose_one() -> None:
    """The ConfigMap carries deploy/nightly.toml as it is: it had drifted (no learning rate,
    so Kubernetes trained with 0.1 where compose used 0.05)."""
    configmap = _nightly_configmap(_k8s_docs())
    assert configmap == (ROOT / "deploy" / "nightly.toml").read_text()


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
    # Refused candidates' reports outlive the pod (a failed Job's reason to read).
    work_dir = tomllib.loads(_nightly_configmap(_k8s_docs()))["work_dir"]
    assert mounts[work_dir] in _claims(pod)
    assert cron["spec"]["timeZone"]


def _claims(pod: dict[str, Any]) -> set[str]:
    """The pod's volumes backed by a PersistentVolumeClaim."""
    return {v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}


def test_kubernetes_deployments_under_an_autoscaler_leave_the_count_to_it() -> None:
    docs = _k8s_docs()
    for key, doc in docs.items():
        if key.startswith("HorizontalPodAutoscaler/"):
            target = doc["spec"]["scaleTargetRef"]
            assert "replicas" not in docs[f"{target['kind']}/{target['name']}"]["spec"], key


def test_kubernetes_redis_keeps_its_data_and_evicts_only_what_expires() -> None:
    """Redis restarted without persistence lost the live item sets and every impression;
    an allkeys-* eviction policy deletes item rows and pointers under a push; noeviction let a
    day of impression ids fill it and refuse every write, pushes included."""
    deployment = _k8s_docs()["Deployment/ltr-redis"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    option = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
    assert option["--appendonly"] == "yes"
    assert option["--maxmemory-policy"] == "volatile-lru"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[option["--dir"]] in _claims(pod)
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    # The stand-in image runs as redis from the start: the new volume is made its own first.
    (owner,) = pod["initContainers"]
    assert owner["image"] == container["image"] and "chown -R redis:redis" in owner["command"][-1]
    assert {m["name"] for m in owner["volumeMounts"]} == {mounts[option["--dir"]]}


def test_compose_redis_keeps_its_data_and_evicts_only_what_expires(
    compose: dict[str, Any],
) -> None:
    """`docker compose up`'s Redis ran with `--appendonly no` and no volume: a restart of its
    container lost the live item sets, user embeddings and impression streams."""
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[0] == "redis-server"
    args = command[1:]
    option = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
    assert len(args) == 2 * len(option), "every option with its value"
    assert option["--appendonly"] == "yes" and option["--appendfsync"] == "everysec"
    assert option["--save"] == ""  # no RDB snapshots beside the append-only file
    assert option["--maxmemory-policy"] == "volatile-lru"
    assert option["--protected-mode"] == "no"
    # --dir is a named volume of the file's own (a bind mount or an anonymous volume would not
    # carry the data to the next `docker compose up`).
    mounts = {v.split(":")[1]: v.split(":")[0] for v in redis["volumes"]}
    volume = mounts[option["--dir"]]
    assert volume in compose["volumes"] and not volume.startswith((".", "/"))
    # Both images start on a new volume: redis:7-alpine's entrypoint chowns /data as root, and
    # the stand-in, which runs as redis from the start, has /data (the volume's copied
    # mount point) owned by redis.
    dockerfile = (ROOT / "deploy" / "docker" / "redis.Dockerfile").read_text()
    assert re.search(r"^USER redis$", dockerfile, re.M)
    assert re.search(rf"chown redis:redis {re.escape(option['--dir'])}$", dockerfile, re.M)
    assert re.search(rf"^VOLUME {re.escape(option['--dir'])}$", dockerfile, re.M)
    # docker-compose 1.29 refuses a top-level `name:`.
    assert "name" not in compose


def test_kubernetes_nightly_jobs_do_not_retry_a_refusal_or_bad_input() -> None:
    from trainer.commands.nightly import EXIT_REFUSED

    docs = _k8s_docs()
    cron = docs["CronJob/ltr-nightly"]["spec"]["jobTemplate"]["spec"]
    bootstrap = docs["Job/ltr-nightly-bootstrap"]["spec"]
    for job in (cron, bootstrap):
        pod = job["template"]["spec"]
        assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
        (fail,) = [r for r in job["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
        codes = fail["onExitCodes"]
        assert codes["operator"] == "In" and set(codes["values"]) == {2, EXIT_REFUSED}
        assert codes["containerName"] == pod["containers"][0]["name"]
        # Kubernetes' schema up to 1.34 requires a condition's status (kubernetes-validate,
        # kubeconform refused the files without it; an API server fills it in).
        for rule in job["podFailurePolicy"]["rules"]:
            for condition in rule.get("onPodConditions", []):
                assert condition["status"] == "True", condition


def test_readme_quick_start_names_the_two_make_targets() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert shlex.split(ci.strip().splitlines()[-1]) == ["exec", "make", "test"]


def test_the_serve_image_bakes_numbas_cache_and_seeds_it_at_start() -> None:
    stages = dockerfile_stages()
    bake = re.search(
        r"^RUN cd / && NUMBA_CACHE_DIR=(\S+) /opt/ltr/bin/python -m app\.kernel_warmup$",
        stages["build"],
        re.M,
    )
    assert bake is not None, "the build stage compiles the kernels into the image"
    # Baked inside the virtualenv that the serve stage copies whole, named by the setting.
    assert bake.group(1).startswith("/opt/ltr/")
    env_keys = dict(re.findall(r"(\w+)=(\S+)", stages["serve"]))
    assert env_keys["LTR_NUMBA_CACHE_SEED"] == bake.group(1)
    assert env_keys["NUMBA_CACHE_DIR"].startswith("/tmp/")  # writable under the k8s emptyDir


def test_the_api_pods_scratch_space_is_bounded_and_its_metrics_apart() -> None:
    """A review filled the metrics directory (then in /tmp, beside the compiled-model cache
    that nothing pruned): every worker died of SIGBUS. It is a volume of its own now, and the
    rest of the pod's scratch space has a limit the kubelet enforces."""
    pod = _k8s_docs()["Deployment/ltr-api"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    metrics = volumes[mounts[env["PROMETHEUS_MULTIPROC_DIR"]]]["emptyDir"]
    assert metrics["medium"] == "Memory" and metrics["sizeLimit"]
    assert volumes[mounts["/tmp"]]["emptyDir"]["sizeLimit"]
    settings = _k8s_docs()["ConfigMap/ltr-settings"]["data"]
    assert settings["LTR_COMPILED_CACHE_DIR"].startswith("/tmp/")
    # Not in the ConfigMap the nightly jobs read too: their pods have no such volume.
    assert "PROMETHEUS_MULTIPROC_DIR" not in settings
