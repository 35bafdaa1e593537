from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from maskplay import preset
from maskplay.families import build_model

# precision "auto" (the default) picks bf16 on a CPU with fast bf16 and fp32 elsewhere; the suite's numbers are
# fp32's on every machine (tests/test_precision_auto.py unsets this to test auto itself)
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
