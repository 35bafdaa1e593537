"""Sentence embeddings, like sentence-transformers' encode().

Mean pooling follows the official T-TA STS protocol: the average of one layer's outputs over the real pieces,
[SOS] and [EOS] excluded. For T-TA, diagonal_mask=True (the default, what the official code does) embeds with
the language-model mask, where output i never sees token i; False lets each position see its own token, as the
paper does downstream.

A sentence longer than the model: overflow='error' (default), 'truncate' (its first max_position - 2 pieces) or
'window' (mean pooling only): windows of max_position - 2 pieces advancing by half a window, as scoring's, each
framed by [SOS]/[EOS]; every piece's output is taken from one window - the one where it sits furthest from both
edges (GPT: the earliest window holding it, the most left context) - and the embedding is the mean over all the
pieces, each counted once.

SIF pooling (Arora et al. 2017, "A simple but tough-to-beat baseline for sentence embeddings"): the mean weighted
by a / (a + p(piece)), p the piece's frequency in a training corpus (`piece_counts`: read_piece_counts, or
piece_counts.npy in the model directory), so that frequent pieces count less; SIF's second step is
`remove_components=1`: the projection on the first principal component of the embedded set is removed (computed
from the sentences being embedded, no labels). `static=True` pools the word-piece embedding table's vectors
instead of a layer's outputs (no position, no context). At the mini size these are every model's best unsupervised
STS embeddings, and an untrained model's random table does better still (docs/results/families-on-tasks.md)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...data.tokenizer import Tokenizer
from ...families import MaskplayModel
from ...runtime.files import model_file
from ...runtime.precision import Precision
from .passes import (
    Overflow,
    Runner,
    _progress,
    check_compatible,
    chunks,
    pad_rows,
    pass_length,
    resolve_precision,
    window_owners,
)
from .scorer import load_model_dir
from .text import encode_ids

PIECE_COUNTS = "piece_counts.npy"  # in a model directory: training-corpus piece counts, (vocab_size,) int64


class Pooling(str, Enum):
    MEAN = "mean"  # mean over the pieces, [SOS]/[EOS] excluded (official T-TA protocol)
    SIF = "sif"  # the mean weighted by a / (a + p(piece)) (Arora et al. 2017); needs piece counts
    FIRST = "first"  # the output at [SOS] (BERT's [CLS] position)
    LAST = "last"  # the output at [EOS] (the natural choice for a causal model: it has read everything)
    MEAN_TOKENS = "mean-tokens"  # the mean over every token, [SOS]/[EOS] included (sentence-transformers' mean)


def read_piece_counts(path: str | Path, vocab_size: int, tokenizer: Tokenizer | None = None) -> np.ndarray:
    """Piece counts (vocab_size,) float64 from a `maskplay prepare` directory (its train split counted), a model
    directory holding piece_counts.npy, or such a .npy file itself. With `tokenizer` (the model's), a prepared
    directory must have been tokenized by the same vocabulary: counts by another one's ids weigh the wrong pieces."""
    path = Path(path)
    if (path / "train").is_dir():
        from ...data.dataset import TokenDataset
        from ...data.tokenizer import load_tokenizer

        if tokenizer is not None and (path / "tokenizer.json").is_file():
            if load_tokenizer(path).backend.get_vocab() != tokenizer.backend.get_vocab():
                raise ValueError(f"{path} was prepared with another vocabulary than the model's: its counts would "
                                 "weigh the wrong pieces; prepare the corpus with the model's tokenizer "
                                 "(maskplay prepare --tokenizer MODEL_DIR)")

        counts = np.bincount(np.asarray(TokenDataset(path / "train").tokens), minlength=vocab_size)
    elif path.is_dir() and model_file(path, PIECE_COUNTS).is_file():  # a model directory's: not a link out of it
        counts = np.load(path / PIECE_COUNTS, allow_pickle=False)
    elif path.is_file() and path.suffix == ".npy":
        counts = np.load(path, allow_pickle=False)
    else:
        raise ValueError(f"{path}: piece counts come from a `maskplay prepare` directory (with train/), a model "
                         f"directory with {PIECE_COUNTS}, or a .npy file")
    if counts.shape != (vocab_size,) or not np.isfinite(counts).all() or (counts < 0).any() or counts.sum() <= 0:
        raise ValueError(f"{path}: piece counts must be {vocab_size} non-negative numbers (the model's vocabulary), "
                         f"not all zero; got shape {counts.shape}")
    return counts.astype(np.float64)


class Embedder:
    def __init__(self, model: MaskplayModel, tokenizer: Tokenizer, device: str | torch.device | None = None,
                 precision: Precision | str = Precision.fp32, piece_counts: np.ndarray | None = None) -> None:
        """piece_counts (vocab_size,): a training corpus's piece counts, for pooling 'sif' (read_piece_counts)."""
        check_compatible(model, tokenizer)
        if piece_counts is not None and np.shape(piece_counts) != (model.config.vocab_size,):
            raise ValueError(f"piece_counts must have one count per vocabulary entry ({model.config.vocab_size}), "
                             f"got shape {np.shape(piece_counts)}")
        self.piece_counts = piece_counts
        if device is not None:
            model = model.to(device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.precision = resolve_precision(model, precision)  # "auto" too
        # a sentence-transformers directory's own pooling (families/hf/directory.py), else maskplay's mean
        self.default_pooling = Pooling(model.hf_pooling or Pooling.MEAN)

    @classmethod
    def from_pretrained(cls, directory: str | Path, frequencies: str | Path | None = None,
                        **kwargs: Any) -> Embedder:
        """piece_counts, unless given: from `frequencies` (read_piece_counts, checked against the model's own
        vocabulary), else the model directory's piece_counts.npy when it has one."""
        from ...runtime.model_dir import resolve_model_dir

        model, tokenizer = load_model_dir(directory)
        if kwargs.get("piece_counts") is None:
            local = model_file(resolve_model_dir(directory), PIECE_COUNTS)
            if frequencies is not None or local.is_file():
                source = local if frequencies is None else frequencies
                kwargs["piece_counts"] = read_piece_counts(source, model.config.vocab_size, tokenizer)
        return cls(model, tokenizer, **kwargs)

    def encode(self, sentences: Sequence[str], pooling: Pooling | str | None = None, layer: int = -1,
               diagonal_mask: bool = True, normalize: bool | None = None, batch_size: int = 32,
               overflow: Overflow | str = Overflow.ERROR, progress: bool = False,
               max_length: int | None = None, static: bool = False, sif_a: float = 1e-3,
               remove_components: int = 0) -> np.ndarray:
        """(len(sentences), hidden) float32. layer indexes the hidden states: 0 = the input of the first block
        (for T-TA the [MASK]+position query stream, which carries no information about the sentence), 1..N =
        the output of block 1..N, -1 = the last block. normalize=True scales every row to unit L2 norm.
        max_length: tokens per pass with [SOS]/[EOS] (default and most: the model's max_position).
        static=True: the word-piece embedding table's vectors instead of a layer (no model pass; (n, embedding
        width)). pooling 'sif': weights sif_a / (sif_a + p(piece)) from the Embedder's piece_counts.
        remove_components=k: the projection on the first k principal components (uncentred, as SIF) of the
        returned set is removed, before normalize. pooling None: the Embedder's default_pooling (a
        sentence-transformers directory's own, else mean); normalize None: whether that directory's modules end
        with a Normalize (else False)."""
        if isinstance(sentences, str):
            raise ValueError("encode() takes a list of sentences, got a single str")
        pooling, overflow = Pooling(pooling or self.default_pooling), Overflow(overflow)
        self._check_options(len(sentences), pooling, layer, batch_size, overflow, static, sif_a, remove_components)
        cfg = self.model.config
        kwargs = self.model.embedding_kwargs(diagonal_mask)  # T-TA's diagonal switch; an error for the others
        sentences = list(sentences)
        if not sentences:
            return np.zeros((0, cfg.hidden_size), dtype=np.float32)
        rows, owners = self._rows(encode_ids(self.tokenizer, sentences), overflow, max_length)
        dim = cfg.embedding_width if static else cfg.hidden_size
        sums = np.zeros((len(sentences), dim), dtype=np.float64)  # windows: the sum of the pieces' outputs
        counts = np.zeros(len(sentences), dtype=np.int64)
        out = np.zeros((len(sentences), dim), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda k: -len(rows[k]))
        device = next(self.model.parameters()).device
        probs = None if self.piece_counts is None else torch.tensor(self.piece_counts / self.piece_counts.sum(),
                                                                     dtype=torch.float32, device=device)
        with torch.inference_mode():
            runner = Runner(self.model, self.precision)
            for batch in _progress(list(chunks(order, batch_size)), progress, "embedding"):
                ids, attn = pad_rows([rows[k] for k in batch], cfg.pad_token_id, device)
                if static:
                    hidden = self.model.embeddings.word(ids).float()
                else:  # no labels: the LM head never runs (the model's logits are computed only when read)
                    result = runner.forward(ids, attention_mask=attn, output_hidden_states=layer != -1, **kwargs)
                    hidden = (result.last_hidden_state if layer == -1 else result.hidden_states[layer]).float()
                whole = []  # the rows of sentences that fit: pooled as usual; windows add to their sentence's sum
                for row, k in enumerate(batch):
                    sentence, positions = owners[k]
                    if positions is None:
                        whole.append(row)
                        continue
                    sums[sentence] += hidden[row, positions].double().sum(0).cpu().numpy()
                    counts[sentence] += len(positions)
                if len(whole) == len(batch):
                    pooled = _pool(hidden, ids, attn, pooling, probs, sif_a)
                elif whole:
                    keep = torch.tensor(whole, device=device)
                    pooled = _pool(hidden[keep], ids[keep], attn[keep], pooling, probs, sif_a)
                if whole:
                    out[[owners[batch[row]][0] for row in whole]] = pooled.cpu().numpy()
        windowed = np.flatnonzero(counts)
        out[windowed] = (sums[windowed] / counts[windowed, None]).astype(np.float32)
        return _finish(out, remove_components, self.model.hf_normalize if normalize is None else normalize)

    def _check_options(self, n: int, pooling: Pooling, layer: int, batch_size: int, overflow: Overflow, static: bool,
                       sif_a: float, remove_components: int) -> None:
        """encode()'s one-line errors, before any work."""
        if overflow is Overflow.MEMORY:
            raise ValueError("overflow='memory' applies to XLNet's causal score; for embeddings use 'error', "
                             "'truncate' or 'window'")
        if pooling is Pooling.SIF and self.piece_counts is None:
            raise ValueError("pooling 'sif' weighs pieces by their corpus frequency: give piece counts (--frequencies "
                             f"DIR, a `maskplay prepare` directory; or {PIECE_COUNTS} in the model directory)")
        if sif_a <= 0:
            raise ValueError(f"sif_a must be positive, got {sif_a}")
        if remove_components < 0:
            raise ValueError(f"remove_components must be >= 0, got {remove_components}")
        if remove_components and remove_components >= n:
            raise ValueError(f"remove_components={remove_components} needs more sentences than components, got {n}")
        if static and layer != -1:
            raise ValueError("static=True pools the word-piece embedding table: leave layer at -1")
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

    def _rows(self, encoded: list[list[int]], overflow: Overflow,
              max_length: int | None) -> tuple[list[list[int]], list[tuple[int, list[int] | None]]]:
        """One row per pass ([SOS] pieces [EOS]) and its owner: (sentence, None) for a sentence that fits (or is
        truncated), (sentence, the row positions it contributes to the mean) for each window of a long one."""
        cfg = self.model.config
        limit = pass_length(cfg, max_length)
        limit_name = f"model's {limit} positions" if max_length is None else f"max_length of {limit} tokens"
        width = limit - 2
        if width < 1:
            raise ValueError(f"a model with {cfg.max_position} positions has no room for a piece between [SOS] "
                             "and [EOS]")
        rows, owners = [], []
        for index, enc in enumerate(encoded):
            if len(enc) > width and overflow is Overflow.ERROR:
                raise ValueError(f"sentence {index} has {len(enc) + 2} tokens with [SOS]/[EOS], more than the "
                                 f"{limit_name}; shorten it or use overflow='truncate' or 'window'")
            if len(enc) > width and overflow is Overflow.WINDOW:
                starts, owner = window_owners(len(enc), width, causal=self.model.causal)
                for s in starts:
                    mine = [j - s + 1 for j in range(len(enc)) if owner[j] == s]
                    if mine:
                        rows.append([cfg.sos_token_id, *enc[s:s + width], cfg.eos_token_id])
                        owners.append((index, mine))
                continue
            rows.append([cfg.sos_token_id, *enc[:width], cfg.eos_token_id])
            owners.append((index, None))
        return rows, owners


def _pool(hidden: Tensor, ids: Tensor, attn: Tensor, pooling: Pooling, probs: Tensor | None, sif_a: float) -> Tensor:
    """(B, H) from (B, L, H): the mean (or SIF-weighted mean) of the pieces, [SOS]/[EOS] excluded; or one position."""
    lengths = attn.sum(1)
    r = torch.arange(hidden.shape[0], device=hidden.device)
    if pooling in (Pooling.MEAN, Pooling.SIF):
        inner = attn.clone().float()
        inner[:, 0] = 0
        inner[r, lengths - 1] = 0
        if pooling is Pooling.SIF:
            inner = inner * (sif_a / (sif_a + probs[ids]))
        return (hidden * inner[..., None]).sum(1) / inner.sum(1, keepdim=True)
    if pooling is Pooling.FIRST:
        return hidden[:, 0]
    if pooling is Pooling.MEAN_TOKENS:
        weights = attn.to(hidden.dtype)[..., None]
        return (hidden * weights).sum(1) / weights.sum(1)
    return hidden[r, lengths - 1]


def _finish(out: np.ndarray, remove_components: int, normalize: bool) -> np.ndarray:
    """SIF's common-component removal (uncentred, the first k principal components), then unit rows."""
    if remove_components:
        _, _, vt = np.linalg.svd(out.astype(np.float64), full_matrices=False)
        top = vt[:remove_components]
        out = (out - (out @ top.T) @ top).astype(np.float32)
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


def encode(model: MaskplayModel, tokenizer: Tokenizer, sentences: Sequence[str], pooling: Pooling | str | None = None,
           layer: int = -1, diagonal_mask: bool = True, normalize: bool = False, batch_size: int = 32,
           overflow: Overflow | str = Overflow.ERROR) -> np.ndarray:
    """Embedder(model, tokenizer).encode(...) in one call."""
    return Embedder(model, tokenizer).encode(sentences, pooling=pooling, layer=layer, diagonal_mask=diagonal_mask,
                                             normalize=normalize, batch_size=batch_size, overflow=overflow)
