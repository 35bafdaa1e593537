# `make test` must work on a fresh machine: it builds its own virtual environment.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test test-heavy test-avx2 test-gpu test-torch fuzz lint dist demo bench bundle-tta bundle-gpt bundle-unilm clean

# PyTorch's own index of CPU builds (a few hundred MB; on Linux the default index's torch is a CUDA build, GBs of
# CUDA packages): the venvs below take torch from it, or from the default index where it cannot be reached within
# 10 seconds (the CUDA build there on Linux). For a CUDA build from PyTorch, set TORCH_INDEX to another of its
# indexes (docs/guides/models.md).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

# a virtual environment $(1) with torch==$(2) and maskplay in it, torch first (TORCH_INDEX, else the default index),
# then pinned so that maskplay's requirements keep it: torch==$(2) is satisfied by the build installed (2.13.0+cpu
# is a 2.13.0), so pip installs no other
# $(3): the extras ('[test]': the test stack, which holds the serve extra's server; '': the core alone)
define make_venv
	$(PY) -m venv $(1)
	$(1)/bin/pip install -q --upgrade pip
	$(1)/bin/pip install -q --retries 0 --timeout 10 --index-url $(TORCH_INDEX) torch==$(2) \
		|| $(1)/bin/pip install -q torch==$(2)
	$(1)/bin/pip install -q -e '.$(3)' torch==$(2)
	touch $(1)/bin/maskplay
endef

$(BIN)/maskplay: pyproject.toml
	$(call make_venv,$(VENV),2.13.0,[test])

# `make demo`'s own environment: maskplay's core (score, embed, eval, train, export) and torch, no test tools
DEMO_VENV ?= .venv-demo
$(DEMO_VENV)/bin/maskplay: pyproject.toml
	$(call make_venv,$(DEMO_VENV),2.13.0,)

venv: $(BIN)/maskplay

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports  # the layer contract in pyproject.toml (ARCHITECTURE.md)

test: venv lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not heavy" tests
	$(MAKE) --no-print-directory test-avx2

# The tests marked `heavy` (pyproject.toml): inductor compiles, torchrun's several processes, the GPU scripts' dry runs.
# Together they took as long as the rest of the suite (CONTRIBUTING.md), so `make test` leaves them out to stay within
# its 10 minutes on 2 cores; CI (.ci/run) runs them after `make test`.
test-heavy: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m heavy tests

# The fast tests whose code paths depend on the CPU's instructions (marked `isa`: precision, int8, attention
# kernels, scoring numerics; tests/conftest.py says why) again as on a CPU without AVX-512 (no native bf16 matmuls,
# no VNNI int8), emulated on any x86 CPU: catches a test that needs bf16 to be fast or one CPU's rounding, and
# int8's saturating AVX2 kernel. Both test runs use the 2 cores (pytest-xdist; CONTRIBUTING.md).
test-avx2: venv
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/python -m pytest -q -n 2 --dist loadfile -m "isa and not slow" tests

# The tests marked `gpu` (tests/test_gpu.py; CUDA graphs in tests/test_gpu.py too): every family's forward pass, loss and
# a bf16 training step on the GPU against the CPU, the recipes' training step (loss, gradients), the CUDA-graph
# decode step, scores. Skipped where no CUDA GPU is visible (as in `make test`); run it on a machine with one.
test-gpu: venv
	$(BIN)/python -m pytest -q -m gpu tests

# The compile-sensitive tests under another torch, by default 2.11.0, the GPU benchmarks' (the CPU's is 2.13.0): graph
# counts are facts of torch's version as well as of the code: at commit 87ca7a9 (2026-12-03) the nested scope was one
# graph under 2.13 and 4-11 under 2.11 (CONTRIBUTING.md). Its own venv, .venv-torch$(OTHER_TORCH), torch from
# TORCH_INDEX as above; where only PyPI can be reached, its wheel is a CUDA build (about 3 GB with its libraries, a
# few minutes to install), which runs on a CPU.
OTHER_TORCH ?= 2.11.0
OTHER := .venv-torch$(OTHER_TORCH)
COMPILE_TESTS := tests/nn/test_regional.py tests/nn/test_flex_attention.py tests/nn/test_denseformer.py \
	tests/tasks/train/test_train_compile.py tests/test_step_syncs.py
$(OTHER)/bin/maskplay: pyproject.toml
	$(call make_venv,$(OTHER),$(OTHER_TORCH),[test])

test-torch: $(OTHER)/bin/maskplay
	$(OTHER)/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider $(COMPILE_TESTS)

# The property tests' long runs (tests/test_fuzz.py, 10,000 examples each; docs/reference/errors.md): longer than
# `make test`'s budget, so a target of their own. `make test` runs the quick runs (150 examples each).
fuzz: venv
	MASKPLAY_FUZZ_LONG=1 $(BIN)/python -m pytest -q -m slow tests/test_fuzz.py tests/families/hf/test_hf_config_fuzz.py

# The sdist and the wheel in dist/, built as pip builds them for a user (isolated: setuptools from the package
# index), then checked as the package index checks them (twine check --strict); CI (.ci/run) runs it after `make test`.
# tests/test_package.py installs the wheel into a clean venv and runs it.
dist: venv
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

demo: $(DEMO_VENV)/bin/maskplay
	$(DEMO_VENV)/bin/python -m maskplay.tasks.demo

# Every family against its HuggingFace twin, one table (benchmarks/all.py, three runs, each ratio their median;
# 10-15 minutes on 2 cores), written into docs/results/benchmarks.md; the sub-runs' JSON in results/bench-all/KIND/
# (the CPU kind, e.g. bf16-vnni).
bench: venv
	$(BIN)/python benchmarks/all.py --repeat 3 --docs docs/results/benchmarks.md

# Retrain a bundled model from the shared Wikipedia and export it: configs/bundle-NAME.toml trains runs/bundle/NAME
# (a started run resumes), scripts/bundle.py writes src/maskplay/assets/NAME. The shipped models' logs, metrics and
# resolved configs: results/bundle/*-train.*; docs/results/bundled-models.md.
SHARED ?= ../shared/data
DATA := runs/data-wiki16k
# $(1): the bundled model whose tokenizer prepares $(DATA) when it is missing (the same tokenizer for all three)
prepare_wiki = test -d $(DATA) || $(BIN)/maskplay prepare --corpus $(SHARED)/enwiki-wikiextractor \
	--tokenizer src/maskplay/assets/$(1)/tokenizer.json --out $(DATA)
# $(1): pretrain | seq2seq train; $(2): NAME
train_bundle = $(BIN)/maskplay $(1) --config configs/bundle-$(2).toml $(if $(wildcard runs/bundle/$(2)/ckpt-*),--resume)
export_bundle = $(BIN)/python scripts/bundle.py runs/bundle/$(1)/final src/maskplay/assets/$(1) --piece-counts $(DATA) \
	&& $(BIN)/python scripts/models_manifest.py  # the checksums `maskplay models fetch` checks

# the one-pass scorer (about 2 hours on one core)
bundle-tta: venv
	$(call prepare_wiki,tta-mini-wiki)
	$(call train_bundle,pretrain,tta-mini-wiki)
	$(call export_bundle,tta-mini-wiki)

# the whole-sentence scorer / generator (about 2 hours on one core)
bundle-gpt: venv
	$(call prepare_wiki,gpt-mini-wiki)
	$(call train_bundle,pretrain,gpt-mini-wiki)
	$(call export_bundle,gpt-mini-wiki)

# the titler: the 40-minute BERT-MLM, then UniLM's seq2seq mask on Wikipedia titles (about 1.2 hours)
bundle-unilm: venv
	$(call prepare_wiki,unilm-titles-mini)
	test -d runs/titles || $(BIN)/maskplay data titles --corpus $(SHARED)/enwiki-wikiextractor \
		--tokenizer $(DATA) --out runs/titles
	$(call train_bundle,pretrain,bert-mini-wiki)
	$(call train_bundle,seq2seq train,unilm-titles-mini)
	$(call export_bundle,unilm-titles-mini)

clean:
	rm -rf $(VENV) $(DEMO_VENV) build dist *.egg-info src/*.egg-info
