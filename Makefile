# Set-up and the two README commands. Works on a fresh machine with only Python 3.11.
# torch goes in first, from PyTorch's CPU index, so that pip does not pull the CUDA wheels (GBs) that a
# CPU-only machine never uses. For a CUDA GPU: make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126
# (or TORCH_INDEX= for the default wheels of the package index).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup demo test lint format typecheck web

$(BIN)/albert: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e ".[test]"
	@touch $(BIN)/albert

setup: $(BIN)/albert

# A venv made by hand (the README's `pip install -e .`) lacks the test tools: added once, on first need.
$(BIN)/ruff: | $(BIN)/albert
	$(BIN)/pip install -q -e ".[test]"

# The JavaScript of `albert export --format web` (transformers.js and ONNX Runtime Web, pinned by the lock
# file) from the npm registry, into .web/node_modules; the web export and its browser test read it there.
WEB ?= .web
web: $(WEB)/node_modules/.package-lock.json

$(WEB)/node_modules/.package-lock.json: albert_lm/deploy/web/package.json albert_lm/deploy/web/package-lock.json
	mkdir -p $(WEB)
	cp albert_lm/deploy/web/package.json albert_lm/deploy/web/package-lock.json $(WEB)/
	cd $(WEB) && npm ci --ignore-scripts --no-audit --no-fund

demo: setup
	$(BIN)/albert demo

test: setup $(BIN)/ruff
	$(BIN)/ruff check albert_lm tests benchmarks
	$(BIN)/ruff format --check albert_lm tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -q

lint: setup $(BIN)/ruff
	$(BIN)/ruff check albert_lm tests benchmarks

format: setup $(BIN)/ruff
	$(BIN)/ruff format albert_lm tests benchmarks

typecheck: setup $(BIN)/ruff
	$(BIN)/mypy
