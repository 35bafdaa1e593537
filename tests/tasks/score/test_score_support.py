"""Shared helpers for the scoring, embedding and evaluation tests (no tests here): a small WordPiece vocabulary
that needs no shared data (every word splits into pieces, so multi-piece words are everywhere), tiny models of
each family on it, and a saved model directory as the trainer exports it."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import torch

from maskplay import preset
from maskplay.data.tokenizer import SPECIAL_TOKENS, Tokenizer, load_tokenizer
from maskplay.families import MaskplayModel, build_model

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "is", "it", "un", "##bel", "##iev", "##ably",
         "good", "bad", "##s", "##ing", "##ed"]
SENTENCES = [
    "The cat sat on the mat.",
    "unbelievably good",
    "a dog ran",
    "It's a zebra, quickly jumping over lazy foxes!",
    "x",
    "the dogs sat",
]


def small_vocab_file(directory: Path) -> Path:
    pieces = [*SPECIAL_TOKENS, *WORDS, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
              *string.digits, *string.punctuation]
    seen, vocab = set(), []
    for p in pieces:
        if p not in seen:
            seen.add(p)
            vocab.append(p)
    path = directory / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    return path


def small_tokenizer(directory: Path) -> Tokenizer:
    return load_tokenizer(small_vocab_file(directory))


def tiny(family: str, tokenizer: Tokenizer, seed: int = 0, **overrides) -> MaskplayModel:
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, **{**tokenizer.model_config_ids(), **overrides}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:  # large weights: peaked attention, so every token visibly matters to the others
                p.normal_(0.0, 0.25)
            elif "norm" in name or name.endswith("bias"):  # so that a skipped transform or bias shows
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def save_model_dir(directory: Path, model: MaskplayModel, tokenizer: Tokenizer) -> Path:
    model.save_pretrained(directory)
    tokenizer.save(directory)
    return directory


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from threads, and on a busy machine two OpenMP threads can make a 0.5 ms
    forward take 200 ms; restore the setting for whatever runs next."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
