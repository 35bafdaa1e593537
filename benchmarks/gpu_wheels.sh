#!/usr/bin/env bash
# The wheels a GPU machine lacks for benchmarks/gpu_train_speed.py's litgpt baseline, fetched
# here, where PyPI can be reached, into WHEELS (default .whl, which .gitignore ignores); send that folder with the
# tree to a GPU machine without internet access, and benchmarks/gpu_babylm.sh installs what it finds there into
# $WORK/site (no index, no dependencies: torch, lightning, huggingface-hub, psutil and the rest are on the machine
# already; docs/results/training-speed.md lists its packages). About 1.3 MB.
#   benchmarks/gpu_wheels.sh          (benchmarks/gpu_stage.sh in runs it when .whl is missing)
set -euo pipefail
WHEELS=${WHEELS:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$WHEELS"
# litgpt and what it imports that the machine lacks (jsonargparse pinned to litgpt's <= 4.41)
$PY -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WHEELS" litgpt==0.5.13 jsonargparse==4.41.0 docstring-parser==0.18.0 typeshed-client==2.15.0
ls -l "$WHEELS"
