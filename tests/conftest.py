from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import pytest
import torch

from maskplay import preset
from maskplay.families import build_model

# precision "auto" (the default) picks bf16 on a CPU with fast bf16 and fp32 elsewhere; the suite's numbers are
# fp32's on every machine (tests/runtime/test_precision_auto.py unsets this to test auto itself)
os.environ.setdefault("MASKPLAY_AUTO_PRECISION", "fp32")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data, skipping the test with a reason when it is absent (a user's clone)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: this test needs the shared data next to the repository (as in CI)")
    return path


@pytest.fixture
def tiny_model():
    def make(family: str, **overrides):
        torch.manual_seed(0)
        return build_model(preset("tiny", family=family, **overrides)).eval()

    return make


def padded_batch(lengths: list[int], vocab: int = 100, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random real tokens (ids 7..vocab-1, so no specials) right-padded with 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(7, vocab, (n,), generator=g)
        mask[row, :n] = True
    return ids, mask


# pytest-xdist (`make test` runs `-n 2`): each worker gets its share of the cores; torch would otherwise start one
# thread per core in every worker (2 workers x 2 threads on CI's 2 cores). Subprocesses get OMP_NUM_THREADS=1.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // _WORKERS))

# Inductor's FX-graph cache keys a compiled graph without the vector ISA it was built for, so a run under
# ATEN_CPU_CAPABILITY (below) reused the AVX-512 run's kernels from the shared cache and failed inside them
# ("returned a result with an exception set", or a segfault). Each capability gets a cache of its own.
_CAPABILITY = os.environ.get("ATEN_CPU_CAPABILITY")
if _CAPABILITY and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_{_CAPABILITY}")

# `make test-avx2` runs the tests marked `isa` again as on a CPU without AVX-512 (ONEDNN_MAX_CPU_ISA=AVX2
# ATEN_CPU_CAPABILITY=avx2). That setting changes oneDNN's bf16 and int8 kernels (no native bf16 matmul, no VNNI:
# the saturating AVX2 int8 path) and ATen's vectorised kernels (softmax, norms, GELU, SDPA's CPU kernel,
# reductions); fp32 matmuls are MKL's and do not change. So the pass covers: precision (bf16, autocast, the auto
# probe and its cache), int8, the attention kernels (dense SDPA against the naive loops, banded / long / LSRA /
# Reformer / sparse), and the scoring and embedding numerics built on them. Tokenizers, data preparation, configs,
# CLI argument handling, checkpoints and the training story run the same code on every CPU and are not repeated.
ISA_FILES = frozenset({
    "test_precision_auto.py", "test_quant.py", "test_model.py", "test_masks.py", "test_leak.py",
    "test_long_attention.py", "test_sparse_attention.py", "test_lite_attention.py", "test_reformer.py",
    "test_adaptive_span.py", "test_score.py", "test_score_support.py", "test_embed.py", "test_hf_parity.py",
    "test_bundled.py",
})
ISA_WORDS = ("bf16", "int8", "precision", "quant", "autocast")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in ISA_FILES or any(word in item.name.lower() for word in ISA_WORDS):
            item.add_marker(pytest.mark.isa)
