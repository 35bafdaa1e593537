"""Sentence embeddings, like sentence-transformers' encode().

Mean pooling follows the official T-TA STS protocol: the average of one layer's outputs over the real pieces,
[SOS] and [EOS] excluded. For T-TA, diagonal_mask=True (the default, what the official code does) embeds with
the language-model mask, where output i never sees token i; False lets each position see its own token, as the
paper does downstream.

A sentence longer than the model: overflow='error' (default), 'truncate' (its first max_position - 2 pieces) or
'window' (mean pooling only): windows of max_position - 2 pieces advancing by half a window, as scoring's, each
framed by [SOS]/[EOS]; every piece's output is taken from one window - the one where it sits furthest from both
edges (GPT: the earliest window holding it, the most left context) - and the embedding is the mean over all the
pieces, each counted once."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..modeling import MaskplayModel
from ..precision import Precision
from ..tokenizer import Tokenizer
from .scorer import (
    Overflow,
    Runner,
    _progress,
    check_compatible,
    chunks,
    load_model_dir,
    pad_rows,
    pass_length,
    resolve_precision,
    window_owners,
)
from .text import encode_ids


class Pooling(str, Enum):
    MEAN = "mean"  # mean over the pieces, [SOS]/[EOS] excluded (official T-TA protocol)
    FIRST = "first"  # the output at [SOS] (BERT's [CLS] position)
    LAST = "last"  # the output at [EOS] (the natural choice for a causal model: it has read everything)


class Embedder:
    def __init__(self, model: MaskplayModel, tokenizer: Tokenizer, device: str | torch.device | None = None,
                 precision: Precision | str = Precision.fp32) -> None:
        check_compatible(model, tokenizer)
        if device is not None:
            model = model.to(device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.precision = resolve_precision(model, precision)  # "auto" too

    @classmethod
    def from_pretrained(cls, directory: str | Path, **kwargs: Any) -> Embedder:
        model, tokenizer = load_model_dir(directory)
        return cls(model, tokenizer, **kwargs)

    def encode(self, sentences: Sequence[str], pooling: Pooling | str = Pooling.MEAN, layer: int = -1,
               diagonal_mask: bool = True, normalize: bool = False, batch_size: int = 32,
               overflow: Overflow | str = Overflow.ERROR, progress: bool = False,
               max_length: int | None = None) -> np.ndarray:
        """(len(sentences), hidden) float32. layer indexes the hidden states: 0 = the input of the first block
        (for T-TA the [MASK]+position query stream, which carries no information about the sentence), 1..N =
        the output of block 1..N, -1 = the last block. normalize=True scales every row to unit L2 norm.
        max_length: tokens per pass with [SOS]/[EOS] (default and most: the model's max_position)."""
        if isinstance(sentences, str):
            raise ValueError("encode() takes a list of sentences, got a single str")
        pooling, overflow = Pooling(pooling), Overflow(overflow)
        if overflow is Overflow.MEMORY:
            raise ValueError("overflow='memory' applies to XLNet's causal score; for embeddings use 'error', "
                             "'truncate' or 'window'")
        if overflow is Overflow.WINDOW and pooling is not Pooling.MEAN:
            raise ValueError(f"overflow='window' pools each piece from one window, which defines mean pooling only; "
                             f"pooling {pooling.value!r} reads one position of one window: use 'mean' or 'truncate'")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        cfg = self.model.config
        n_states = cfg.num_layers + 1
        if not -n_states <= layer < n_states:
            raise ValueError(f"layer {layer} is out of range for a {cfg.num_layers}-layer model "
                             f"(valid: {-n_states}..{n_states - 1})")
        if not diagonal_mask and cfg.family != "tta":
            raise ValueError(f"diagonal_mask=False applies to T-TA only; this model is {cfg.family!r}")
        sentences = list(sentences)
        if not sentences:
            return np.zeros((0, cfg.hidden_size), dtype=np.float32)
        encoded = encode_ids(self.tokenizer, sentences)
        limit = pass_length(cfg, max_length)
        limit_name = f"model's {limit} positions" if max_length is None else f"max_length of {limit} tokens"
        width = limit - 2
        if width < 1:
            raise ValueError(f"a model with {cfg.max_position} positions has no room for a piece between [SOS] "
                             "and [EOS]")
        # one row per window: (sentence, the window's first piece, the pieces it contributes to the mean)
        rows, owners = [], []
        for index, enc in enumerate(encoded):
            if len(enc) > width and overflow is Overflow.ERROR:
                raise ValueError(f"sentence {index} has {len(enc) + 2} tokens with [SOS]/[EOS], more than the "
                                 f"{limit_name}; shorten it or use overflow='truncate' or 'window'")
            if len(enc) > width and overflow is Overflow.WINDOW:
                starts, owner = window_owners(len(enc), width, causal=cfg.family == "gpt")
                for s in starts:
                    mine = [j - s + 1 for j in range(len(enc)) if owner[j] == s]
                    if mine:
                        rows.append([cfg.sos_token_id, *enc[s:s + width], cfg.eos_token_id])
                        owners.append((index, mine))
                continue
            rows.append([cfg.sos_token_id, *enc[:width], cfg.eos_token_id])
            owners.append((index, None))
        sums = np.zeros((len(encoded), cfg.hidden_size), dtype=np.float64)  # windows: the sum of the pieces' outputs
        counts = np.zeros(len(encoded), dtype=np.int64)
        out = np.zeros((len(encoded), cfg.hidden_size), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda k: -len(rows[k]))
        device = next(self.model.parameters()).device
        kwargs = {} if cfg.family != "tta" else {"diagonal_mask": diagonal_mask}
        with torch.inference_mode():
            runner = Runner(self.model, self.precision)
            for batch in _progress(list(chunks(order, batch_size)), progress, "embedding"):
                ids, attn = pad_rows([rows[k] for k in batch], cfg.pad_token_id, device)
                lengths = attn.sum(1)
                r = torch.arange(len(batch), device=device)
                # no labels: the LM head never runs (the model's logits are computed only when read)
                result = runner.forward(ids, attention_mask=attn, output_hidden_states=layer != -1, **kwargs)
                hidden = (result.last_hidden_state if layer == -1 else result.hidden_states[layer]).float()
                windowed = [(row, k) for row, k in enumerate(batch) if owners[k][1] is not None]
                for row, k in windowed:
                    sentence, positions = owners[k]
                    sums[sentence] += hidden[row, positions].double().sum(0).cpu().numpy()
                    counts[sentence] += len(positions)
                if windowed:  # the other rows are sentences that fit: pooled as usual
                    whole = [row for row, k in enumerate(batch) if owners[k][1] is None]
                    if not whole:
                        continue
                    hidden, attn, lengths, r = hidden[whole], attn[whole], lengths[whole], r[:len(whole)]
                    batch = [batch[row] for row in whole]
                if pooling is Pooling.MEAN:
                    inner = attn.clone()
                    inner[:, 0] = False
                    inner[r, lengths - 1] = False
                    pooled = (hidden * inner[..., None]).sum(1) / inner.sum(1, keepdim=True)
                elif pooling is Pooling.FIRST:
                    pooled = hidden[:, 0]
                else:
                    pooled = hidden[r, lengths - 1]
                out[[owners[k][0] for k in batch]] = pooled.cpu().numpy()
        windowed = np.flatnonzero(counts)
        out[windowed] = (sums[windowed] / counts[windowed, None]).astype(np.float32)
        if normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def encode(model: MaskplayModel, tokenizer: Tokenizer, sentences: Sequence[str], pooling: Pooling | str = Pooling.MEAN,
           layer: int = -1, diagonal_mask: bool = True, normalize: bool = False, batch_size: int = 32,
           overflow: Overflow | str = Overflow.ERROR) -> np.ndarray:
    """Embedder(model, tokenizer).encode(...) in one call."""
    return Embedder(model, tokenizer).encode(sentences, pooling=pooling, layer=layer, diagonal_mask=diagonal_mask,
                                             normalize=normalize, batch_size=batch_size, overflow=overflow)
