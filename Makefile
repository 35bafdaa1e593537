# `make test` must work on a fresh machine: it builds its own virtual environment.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test test-avx2 lint demo bundle-tta bundle-gpt bundle-unilm clean

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
	$(MAKE) --no-print-directory test-avx2

# The fast tests again as on a CPU without AVX-512 (no native bf16 matmuls, no VNNI int8), emulated on any x86
# CPU: catches a test that needs bf16 to be fast or one CPU's rounding, and int8's saturating AVX2 kernel.
test-avx2: venv
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/python -m pytest -q -m "not slow" tests

demo: venv
	$(BIN)/python -m maskplay.demo

# Retrain the bundled scorer from the shared Wikipedia and export it (about 2 hours on 2 CPU cores; the command,
# config and training log of the shipped model: configs/bundle-tta-mini-wiki.toml, results/bundle/tta-mini-wiki-train.*)
SHARED ?= ../shared/data
bundle-tta: venv
	test -d runs/data-wiki16k || $(BIN)/maskplay prepare --corpus $(SHARED)/enwiki-wikiextractor \
		--tokenizer src/maskplay/assets/tta-mini-wiki/tokenizer.json --out runs/data-wiki16k
	$(BIN)/maskplay pretrain --config configs/bundle-tta-mini-wiki.toml $(if $(wildcard runs/bundle/tta-mini-wiki/ckpt-*),--resume)
	$(BIN)/python scripts/bundle.py runs/bundle/tta-mini-wiki/final src/maskplay/assets/tta-mini-wiki \
		--piece-counts runs/data-wiki16k

# Retrain the bundled sentence scorer / generator (about 2 hours on one core; configs/bundle-gpt-mini-wiki.toml)
bundle-gpt: venv
	test -d runs/data-wiki16k || $(BIN)/maskplay prepare --corpus $(SHARED)/enwiki-wikiextractor \
		--tokenizer src/maskplay/assets/gpt-mini-wiki/tokenizer.json --out runs/data-wiki16k
	$(BIN)/maskplay pretrain --config configs/bundle-gpt-mini-wiki.toml $(if $(wildcard runs/bundle/gpt-mini-wiki/ckpt-*),--resume)
	$(BIN)/python scripts/bundle.py runs/bundle/gpt-mini-wiki/final src/maskplay/assets/gpt-mini-wiki \
		--piece-counts runs/data-wiki16k

# Retrain the bundled titler: the 40-minute BERT-MLM, then UniLM's seq2seq mask on Wikipedia titles (about 1.2 hours;
# configs/bundle-{bert-mini-wiki,unilm-titles-mini}.toml, logs in results/bundle/unilm-titles-mini-*)
bundle-unilm: venv
	test -d runs/data-wiki16k || $(BIN)/maskplay prepare --corpus $(SHARED)/enwiki-wikiextractor \
		--tokenizer src/maskplay/assets/unilm-titles-mini/tokenizer.json --out runs/data-wiki16k
	test -d runs/titles || $(BIN)/maskplay data titles --corpus $(SHARED)/enwiki-wikiextractor \
		--tokenizer runs/data-wiki16k --out runs/titles
	$(BIN)/maskplay pretrain --config configs/bundle-bert-mini-wiki.toml $(if $(wildcard runs/bundle/bert-mini-wiki/ckpt-*),--resume)
	$(BIN)/maskplay seq2seq train --config configs/bundle-unilm-titles-mini.toml $(if $(wildcard runs/bundle/unilm-titles-mini/ckpt-*),--resume)
	$(BIN)/python scripts/bundle.py runs/bundle/unilm-titles-mini/final src/maskplay/assets/unilm-titles-mini \
		--piece-counts runs/data-wiki16k

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
