"""Shared helpers for the HuggingFace masked-LM parity tests (no tests here): a small WordPiece tokenizer.json in
a HuggingFace model's own special-token layout, a random HuggingFace model saved with save_pretrained and read
back, and the two oracles: its logits and a naive pseudo-log-likelihood loop (one masked copy per piece, the head
over the whole sequence)."""

from __future__ import annotations

import string
from pathlib import Path

import torch

from tests.tasks.score.test_score_support import WORDS

PIECES = [*WORDS, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase), *string.digits,
          *string.punctuation]


def write_tokenizer(directory: Path, specials: dict[int, str], size: int) -> int:
    """tokenizer.json of `size` pieces: `specials` (id -> token) where the model's layout puts them, the small
    test vocabulary in the other ids (then filler). Returns the mask token's id."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    pieces = iter(dict.fromkeys(PIECES))
    vocab = {}
    for i in range(size):
        vocab[specials[i] if i in specials else next(pieces, f"filler{i}")] = i
    unk = next(t for t in specials.values() if "unk" in t.lower())
    tok = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(list(specials.values()))
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return next(i for i, t in specials.items() if "mask" in t.lower())


def randomised(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Peaked attention (every token matters to the others) and random norms and biases, so that a skipped
    transform, bias or offset shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)
            elif "norm" in name.lower() or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def saved_and_reloaded(model: torch.nn.Module, directory: Path) -> torch.nn.Module:
    """`model` written with save_pretrained and read back by its class: the oracle is what users load."""
    model.save_pretrained(directory)
    return type(model).from_pretrained(directory).eval()


def random_ids(vocab: int, avoid: set[int], shape: tuple[int, int], seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, shape, generator=g)
    allowed = torch.tensor(sorted(set(range(vocab)) - avoid))
    return allowed[ids % len(allowed)]


def naive_pll(hf: torch.nn.Module, ids: list[int], mask_id: int) -> list[float]:
    """log p(piece i | the rest) with piece i masked, for every piece but the first and last (the frame)."""
    n = len(ids)
    copies = torch.tensor([ids] * (n - 2))
    rows, positions = torch.arange(n - 2), torch.arange(1, n - 1)
    copies[rows, positions] = mask_id
    with torch.no_grad():
        logits = hf(input_ids=copies).logits
    return logits[rows, positions].log_softmax(-1)[rows, torch.tensor(ids[1:-1])].tolist()
