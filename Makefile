# `make test` must work on a fresh machine: it builds its own virtual environment.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test lint demo clean

$(BIN)/maskplay: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build first: a plain `torch` requirement would pull GBs of CUDA packages
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(BIN)/maskplay

venv: $(BIN)/maskplay

lint: venv
	$(BIN)/ruff check src tests benchmarks

test: venv lint
	$(BIN)/python -m pytest -q tests

demo: venv
	$(BIN)/python -m maskplay.demo

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
