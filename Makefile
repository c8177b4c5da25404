# Set-up and the two README commands. Works on a fresh machine with only Python 3.11:
# torch==2.13.0 goes in first so pip takes the local CPU build, not the CUDA wheels.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint format typecheck

$(BIN)/albert: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	@touch $(BIN)/albert

setup: $(BIN)/albert

demo: setup
	$(BIN)/albert demo

test: setup
	$(BIN)/ruff check albert_lm tests benchmarks
	$(BIN)/ruff format --check albert_lm tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff check albert_lm tests benchmarks

format: setup
	$(BIN)/ruff format albert_lm tests benchmarks

typecheck: setup
	$(BIN)/mypy
