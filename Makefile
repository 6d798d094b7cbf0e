# The two quick-start commands: `make run` (serve a model, training a demo one on first run)
# and `make test` (everything the CI runs). Both install into one virtualenv, each only what
# it needs: `run` the service and the native trainer (serve,demo), `test` every extra.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
REGISTRY ?= ./registry
RUN_EXTRAS := serve,demo
ALL_EXTRAS := serve,train,dask,xgboost,dnn,dev
EXTRAS ?= $(ALL_EXTRAS)
comma := ,
stamp = $(VENV)/.installed-$(subst $(comma),-,$(1))

# Images (docker-compose.yml builds the same ones): `make images`, `make push-images
# IMAGE_REGISTRY=registry.example.com/team`. PYTHON_IMAGE, TRAINER_EXTRAS and TORCH_INDEX_URL
# from the environment or the command line become build arguments (see the Dockerfile).
IMAGE_PREFIX ?= ltr-rerank
IMAGE_TAG ?= latest
IMAGE_REGISTRY ?=
BUILD_ARGS := $(foreach v,PYTHON_IMAGE TRAINER_EXTRAS TORCH_INDEX_URL,\
  $(if $(filter-out undefined,$(origin $(v))),--build-arg $(v)=$($(v))))

.PHONY: run test lint install redis bench clean images push-images base-images compose-smoke

$(BIN)/python:
	@echo "== creating the virtualenv $(VENV) ($(PYTHON))"
	$(PYTHON) -m venv $(VENV)

# --no-compile: Python compiles what it imports on first use; byte-compiling every installed
# module up front cost a first run about 6 s more (bench/results/first_run.md).
$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	@echo "== installing ltr-rerank[$(subst -,$(comma),$*)] and its dependencies into $(VENV)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on --no-compile \
	  -e ".[$(subst -,$(comma),$*)]"
	@touch $@

install: $(call stamp,$(EXTRAS))

# redis-server for the tests that start their own; Debian's package when missing.
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server from Debian's packages"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

run: $(call stamp,$(RUN_EXTRAS))
	@echo "== serving $(REGISTRY) on http://$(HOST):$(PORT) (API docs: /docs); PORT=... to change"
	$(BIN)/ltr serve --registry $(REGISTRY) --host $(HOST) --port $(PORT) --demo

# What CI runs: lint and types first (cheap, and they fail fast), then the whole suite. The
# service's compiled kernels go into numba's cache meanwhile, on the other core: in a fresh
# clone the suite's first tests compiled them (~50 s on a 2-vCPU VM). The suite runs on
# TEST_WORKERS pytest-xdist workers, a test directory each at a time (tests/support/
# parallel_runs.py): 2 took ~6 min where one process took ~10.5 on a 2-vCPU VM; 0 runs it
# serially in one process.
TEST_WORKERS ?= 2
test: $(call stamp,$(ALL_EXTRAS)) redis
	@$(BIN)/python -m app.kernel_warmup >/dev/null 2>&1 & warm=$$!; \
	  $(MAKE) --no-print-directory lint; status=$$?; wait $$warm; exit $$status
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

lint: $(call stamp,$(ALL_EXTRAS))
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy app trainer

bench: $(call stamp,$(ALL_EXTRAS))
	$(BIN)/python -m bench.run_all

images:
	docker build --target serve -t $(IMAGE_PREFIX)-serve:$(IMAGE_TAG) $(BUILD_ARGS) .
	docker build --target trainer -t $(IMAGE_PREFIX)-trainer:$(IMAGE_TAG) $(BUILD_ARGS) .
	@docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E '^$(IMAGE_PREFIX)-(serve|trainer):$(IMAGE_TAG) '

push-images: images
	@test -n "$(IMAGE_REGISTRY)" || { echo "set IMAGE_REGISTRY, e.g. make push-images IMAGE_REGISTRY=ghcr.io/you" >&2; exit 2; }
	for image in serve trainer; do \
	  docker tag $(IMAGE_PREFIX)-$$image:$(IMAGE_TAG) $(IMAGE_REGISTRY)/$(IMAGE_PREFIX)-$$image:$(IMAGE_TAG) && \
	  docker push $(IMAGE_REGISTRY)/$(IMAGE_PREFIX)-$$image:$(IMAGE_TAG) || exit 1; \
	done
	@echo "== pushed; point deploy/k8s at them:"
	@echo "   cd deploy/k8s && kustomize edit set image \\"
	@echo "     $(IMAGE_PREFIX)-serve=$(IMAGE_REGISTRY)/$(IMAGE_PREFIX)-serve:$(IMAGE_TAG) \\"
	@echo "     $(IMAGE_PREFIX)-trainer=$(IMAGE_REGISTRY)/$(IMAGE_PREFIX)-trainer:$(IMAGE_TAG)"
	@echo "   kubectl -n ltr delete job ltr-nightly-bootstrap --ignore-not-found  # its image cannot change"
	@echo "   kubectl apply -k deploy/k8s"

# Local stand-ins for python:3.11-slim and redis:7-alpine where Docker Hub is unreachable.
base-images:
	deploy/docker/build-base-images.sh

# docker-compose.yml for real: build, start, rerank, publish through the trainer, swap, tear down.
compose-smoke:
	deploy/docker/compose-smoke.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
