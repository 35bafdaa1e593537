"""Examples as model inputs: `[SOS] text [EOS]` or `[SOS] text [SEP] pair [EOS]` (BERT's `[CLS] a [SEP] b [SEP]`
with a BERT vocabulary), cut to the model's positions, padded into batches; segment 1 after the first separator
where the backbone has segment embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ...config import ModelConfig
from ...data.tokenizer import Tokenizer
from ...families import family_class
from .data import Example


def encode_examples(examples: Sequence[Example], tokenizer: Tokenizer, config: ModelConfig,
                    pair: bool) -> list[list[int]]:
    """[SOS] text [EOS], or [SOS] text [SEP] pair [EOS]; over-long inputs are cut (the longer text first)."""
    sp = tokenizer.special
    limit = config.max_position
    texts = tokenizer.backend.encode_batch([ex.text for ex in examples], add_special_tokens=False)
    pairs = tokenizer.backend.encode_batch([ex.pair or "" for ex in examples], add_special_tokens=False) if pair else None
    rows = []
    for k in range(len(examples)):
        a = texts[k].ids
        if pairs is None:
            rows.append([sp.sos, *a[:limit - 2], sp.eos])
            continue
        b = pairs[k].ids
        while len(a) + len(b) > limit - 3:
            if len(a) >= len(b):
                a = a[:-1]
            else:
                b = b[:-1]
        rows.append([sp.sos, *a, sp.sep, *b, sp.eos])
    return rows


def make_batch(rows: list[list[int]], config: ModelConfig, pair: bool,
               device: torch.device | str = "cpu") -> dict[str, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), config.pad_token_id, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, :len(r)] = torch.tensor(r)
    lengths = torch.tensor([len(r) for r in rows])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    batch = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
    if pair and family_class(config.family).pair_segments and config.type_vocab_size >= 2:
        sep = (ids == config.separator_id).long()
        batch["token_type_ids"] = (((sep.cumsum(1) - sep) > 0) & mask).long().to(device)
    return batch
