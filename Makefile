# The two quick-start commands: `make run` (serve a model, training a demo one on first run)
# and `make test` (everything the CI runs). Both build their own virtualenv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= serve,train,dnn,dev
REGISTRY ?= ./registry
comma := ,

.PHONY: run test lint install redis bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-$(subst $(comma),-,$(EXTRAS)): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

# redis-server for the tests that start their own; Debian's package when missing.
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server from Debian's packages"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

run: install
	$(BIN)/ltr serve --registry $(REGISTRY) --demo

# What CI runs: lint and types first (cheap, and they fail fast), then the whole suite.
test: lint redis
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy app trainer

bench: install
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
