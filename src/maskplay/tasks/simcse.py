"""Unsupervised SimCSE (Gao, Yao & Chen, EMNLP 2021) as a training stage for any encoder family.

Each sentence of a batch goes through the encoder twice, in training mode, so that the two views differ only by
dropout (the only noise; no augmentation, no labels). With z_i and z'_i the pooled embeddings of sentence i's
two views, the loss is the cross-entropy of picking z'_i among every z'_j of the batch (in-batch negatives):

    loss = mean_i  -log( exp(cos(z_i, z'_i) / t) / sum_j exp(cos(z_i, z'_j) / t) ),   t = 0.05.

The two views are one forward pass over the batch stacked on itself (as the paper's code does), so every row
draws its own dropout masks.

What is trained is what `maskplay embed` and `maskplay eval sts` read (maskplay.tasks.score.embed.Embedder): the model
called as Embedder calls it (T-TA with its diagonal mask unless diagonal_mask=False), the last hidden state in
fp32, pooled the same way (`pool` below mirrors Embedder.encode; tests/tasks/test_simcse.py checks that they agree).
The paper's unsupervised recipe adds an MLP over [CLS] during training only; here the pooled state is used
directly (the paper reports this as comparable). The LM head (and an ELECTRA's generator) takes no part and is
saved unchanged, so the output is a normal model directory of the same family.

Training sentences: the shared Wikipedia (WikiExtractor output) split with maskplay.data.sentences, or any corpus
maskplay.data.readers reads; sentences of at least `min_words` words, shuffled with the seed, cut to `max_length`
pieces with [SOS]/[EOS] (32 in the paper).

Each step is train.update.apply_update, the core fine-tuning shares (why the pretraining loop keeps its own is
written there); the rate is train.schedule.learning_rate's, with a wall-clock budget as a second clock."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.tokenizer import Tokenizer
from ..families import MaskplayModel
from ..runtime.files import atomic_path
from ..runtime.precision import Precision, forward_in
from ..runtime.progress import Progress

POOLINGS = ("mean", "first", "last")  # maskplay.tasks.score.embed.Pooling's values; "cls" is taken for "first"
SIMCSE_NAME = "simcse.json"


def pool(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(B, H) from (B, L, H) as Embedder.encode pools: mean over the real pieces without [SOS]/[EOS], the first
    position, or the last real one. Differentiable."""
    attention_mask = attention_mask.bool()
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    lengths = attention_mask.sum(1)
    if pooling == "first":
        return hidden[:, 0]
    if pooling == "last":
        return hidden[rows, lengths - 1]
    if pooling != "mean":
        raise ValueError(f"pooling must be one of {list(POOLINGS)}, got {pooling!r}")
    inner = attention_mask.clone()
    inner[:, 0] = False
    inner[rows, lengths - 1] = False
    return (hidden * inner[..., None]).sum(1) / inner.sum(1, keepdim=True)


def forward_kwargs(model: MaskplayModel, diagonal_mask: bool = True) -> dict[str, Any]:
    """The keyword arguments Embedder gives the model: T-TA's diagonal_mask, nothing for other families."""
    return model.embedding_kwargs(diagonal_mask)


def sentence_embeddings(model: MaskplayModel, input_ids: Tensor, attention_mask: Tensor, pooling: str = "mean",
                        diagonal_mask: bool = True, precision: Precision | str = Precision.fp32) -> Tensor:
    """The pooled last hidden state (B, H) in fp32, with gradients, in the model's current mode."""
    out = forward_in(model, precision, input_ids, attention_mask=attention_mask,
                     **forward_kwargs(model, diagonal_mask))
    return pool(out.last_hidden_state.float(), attention_mask, pooling)


def simcse_loss(z1: Tensor, z2: Tensor, temperature: float = 0.05) -> Tensor:
    """Cross-entropy over the cosine similarities / temperature of every z1[i] with every z2[j]; the target of
    row i is column i (its other view)."""
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"two (batch, hidden) tensors of one shape are needed, got {tuple(z1.shape)} and "
                         f"{tuple(z2.shape)}")
    sims = F.cosine_similarity(z1.float()[:, None, :], z2.float()[None, :, :], dim=-1) / temperature
    return F.cross_entropy(sims, torch.arange(len(z1), device=z1.device))


def simcse_batch_loss(model: MaskplayModel, input_ids: Tensor, attention_mask: Tensor, temperature: float = 0.05,
                      pooling: str = "mean", diagonal_mask: bool = True,
                      precision: Precision | str = Precision.fp32) -> Tensor:
    """The batch twice in one forward pass (each copy with its own dropout), then simcse_loss."""
    z = sentence_embeddings(model, input_ids.repeat(2, 1), attention_mask.repeat(2, 1), pooling, diagonal_mask,
                            precision)
    z1, z2 = z.chunk(2)
    return simcse_loss(z1, z2, temperature)


def set_dropout(model: MaskplayModel, p: float) -> None:
    """Every dropout of the model at p (the hidden, attention and, for T-TA, query dropouts), for this process
    only: the saved config keeps its own values."""
    from ..nn.dropout import Dropout

    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    for module in model.modules():
        if isinstance(module, Dropout | torch.nn.Dropout):
            module.p = p
        if hasattr(module, "dropout_p"):
            module.dropout_p = p


# ---- training sentences -------------------------------------------------------------------------------------

def corpus_sentences(paths: Sequence[str | Path], min_words: int = 5, limit: int | None = None, seed: int = 0,
                     fmt: str = "auto") -> list[str]:
    """The sentences of a corpus (every paragraph split by maskplay.data.sentences) with at least min_words
    whitespace words, shuffled with seed; at most limit of them (drawn from all, not the first)."""
    from ..data.readers import iter_paragraphs
    from ..data.sentences import split_sentences

    if min_words < 1:
        raise ValueError(f"min_words must be at least 1, got {min_words}")
    sentences = [s for paragraph in iter_paragraphs(paths, fmt) for s in split_sentences(paragraph)
                 if len(s.split()) >= min_words]
    if len(sentences) < 2:
        raise ValueError(f"{', '.join(map(str, paths))}: {len(sentences)} sentence(s) of at least {min_words} words; "
                         "SimCSE needs at least 2 (in-batch negatives)")
    order = np.random.default_rng(seed).permutation(len(sentences))
    if limit is not None:
        order = order[:limit]
    return [sentences[k] for k in order]


def encode_batch(tokenizer: Tokenizer, sentences: Sequence[str], config: Any, max_length: int,
                 device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """[SOS] pieces [EOS] rows cut to max_length, right-padded: (ids, attention mask)."""
    from .score.text import encode_ids

    rows = [[config.sos_token_id, *ids[:max_length - 2], config.eos_token_id]
            for ids in encode_ids(tokenizer, list(sentences))]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), config.pad_token_id, dtype=torch.long)
    for k, row in enumerate(rows):
        ids[k, :len(row)] = torch.tensor(row)
    lengths = torch.tensor([len(r) for r in rows])
    return ids.to(device), (torch.arange(width)[None, :] < lengths[:, None]).to(device)


# ---- training -----------------------------------------------------------------------------------------------

@dataclass
class SimcseOptions:
    lr: float = 3e-5  # the paper's, for BERT-base with batch 64
    batch_size: int = 64
    max_steps: int | None = None  # None: --minutes decides, else one pass over the sentences
    minutes: float | None = None  # wall-clock budget; the learning rate decays to 0 at whichever end comes first
    temperature: float = 0.05
    pooling: str = "mean"
    max_length: int = 32  # pieces with [SOS]/[EOS] (the paper's max_seq_length for unsupervised SimCSE)
    diagonal_mask: bool = True  # T-TA: as `maskplay embed` / `eval sts` embed by default
    dropout: float | None = None  # None: the model's own (0.1 for every bundled config)
    warmup_steps: int = 0  # the paper: none
    weight_decay: float = 0.0  # the paper (HuggingFace Trainer's default)
    clip: float | None = 1.0
    seed: int = 0
    precision: str = "fp32"  # resolved (not auto)
    save_every: int | None = None  # steps between checkpoints under OUT/ckpt-STEP (each a model directory)
    log_every: int = 50

    def check(self) -> None:
        """Every bad option as one ValueError naming it (the command-line names)."""
        if self.batch_size < 2:
            raise ValueError(f"--batch-size must be at least 2 (the other sentences of the batch are the negatives), "
                             f"got {self.batch_size}")
        for name, value in (("--lr", self.lr), ("--temperature", self.temperature)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"--max-steps must be at least 1, got {self.max_steps}")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise ValueError(f"--minutes must be a positive number, got {self.minutes}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"--pooling must be one of {list(POOLINGS)} (or cls), got {self.pooling!r}")
        if self.max_length < 3:
            raise ValueError(f"--max-length must be at least 3 ([SOS], one piece, [EOS]), got {self.max_length}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.warmup_steps < 0 or not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"--warmup-steps and --weight-decay must be >= 0, got {self.warmup_steps}, "
                             f"{self.weight_decay}")
        if self.clip is not None and not (math.isfinite(self.clip) and self.clip > 0):  # nan would reach the weights
            raise ValueError(f"--clip must be a positive number (0 on the command line: none), got {self.clip}")
        for name, value in (("--save-every", self.save_every), ("--log-every", self.log_every)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


@dataclass
class SimcseResult:
    steps: int
    seconds: float
    sentences_seen: int
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped_by: str = ""


def budgeted_learning_rate(step: int, elapsed: float, options: SimcseOptions, total_steps: int | None) -> float:
    """train.schedule.learning_rate (linear warmup, then linear decay to 0 at total_steps) with the wall-clock
    budget as a second clock: the decay ends at max_steps or at the time budget, whichever is nearer (so a run given
    only --minutes, total_steps None, still ends its decay, as Cramming's budgeted schedule does)."""
    from .train.config import OptimSection
    from .train.schedule import learning_rate

    warmup = options.warmup_steps
    if step < warmup or total_steps is not None:
        # a run no longer than its warmup: the decay's one step after it (the rate's value at the run's end)
        rate = learning_rate(step, OptimSection(lr=options.lr, warmup_steps=warmup,
                                                max_steps=max(total_steps or 0, warmup + 1)))
    else:
        rate = options.lr
    if step < warmup or options.minutes is None:
        return rate
    return min(rate, options.lr * max(0.0, 1.0 - elapsed / (options.minutes * 60)))


def train_simcse(model: MaskplayModel, tokenizer: Tokenizer, sentences: Sequence[str],
                 options: SimcseOptions | None = None, save: Callable[[int], None] | None = None,
                 progress: bool | None = None) -> SimcseResult:
    """Train `model` in place. save(step) is called every save_every steps (the caller writes the checkpoint,
    the model in eval mode). Progress (maskplay.runtime.progress): a bar on a terminal, else a line every 30 s;
    progress=False shows none. The loss every log_every steps goes into the result's history. Stops at
    max_steps, at the time budget, or after one pass when neither is given."""
    from .train.schedule import parameter_groups
    from .train.update import apply_update

    options = options or SimcseOptions()
    options.check()
    forward_kwargs(model, options.diagonal_mask)  # a T-TA-only option on another family: an error before training
    if len(sentences) < options.batch_size:
        raise ValueError(f"{len(sentences)} training sentences, fewer than one batch of {options.batch_size}")
    torch.manual_seed(options.seed)
    if options.dropout is not None:
        set_dropout(model, options.dropout)
    per_pass = len(sentences) // options.batch_size
    total = options.max_steps if options.max_steps is not None else (None if options.minutes else per_pass)
    device = next(model.parameters()).device
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameter_groups(model, options.weight_decay), lr=options.lr)
    rng = np.random.default_rng(options.seed)
    order = rng.permutation(len(sentences))
    cursor, step, start, seen = 0, 0, time.monotonic(), 0
    losses: list[float] = []
    history: list[dict[str, Any]] = []
    bar = Progress(total=total, desc="simcse", unit="step", enabled=True if progress is None else progress)
    stopped_by = "max_steps" if options.max_steps is not None else ("minutes" if options.minutes else "one pass")
    model.train()
    while True:
        elapsed = time.monotonic() - start
        if total is not None and step >= total:
            break
        if options.minutes is not None and elapsed >= options.minutes * 60:
            stopped_by = "minutes"
            break
        if cursor + options.batch_size > len(order):
            order, cursor = rng.permutation(len(sentences)), 0
        batch = [sentences[k] for k in order[cursor:cursor + options.batch_size]]
        cursor += options.batch_size
        ids, mask = encode_batch(tokenizer, batch, model.config, options.max_length, device)
        lr = budgeted_learning_rate(step, elapsed, options, total)
        loss = simcse_batch_loss(model, ids, mask, options.temperature, options.pooling, options.diagonal_mask,
                                 options.precision)
        if not torch.isfinite(loss):
            raise ValueError(f"step {step}: the SimCSE loss is {float(loss)}; try a lower --lr or --precision fp32")
        apply_update(optimizer, loss, lr, trainable, options.clip)
        step += 1
        seen += len(batch)
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", lr=f"{lr:.2e}")
        bar.update(1)
        if step % options.log_every == 0 or step == 1:
            history.append({"step": step, "loss": round(float(np.mean(losses[-options.log_every:])), 5), "lr": lr,
                            "seconds": round(time.monotonic() - start, 1)})
        if save is not None and options.save_every is not None and step % options.save_every == 0:
            model.eval()
            save(step)
            model.train()
    bar.close()
    model.eval()
    if losses and (not history or history[-1]["step"] != step):
        history.append({"step": step, "loss": round(float(np.mean(losses[-options.log_every:])), 5),
                        "lr": budgeted_learning_rate(step, time.monotonic() - start, options, total),
                        "seconds": round(time.monotonic() - start, 1)})
    return SimcseResult(steps=step, seconds=time.monotonic() - start, sentences_seen=seen, history=history,
                        stopped_by=stopped_by)


def save_simcse(model: MaskplayModel, tokenizer: Tokenizer, directory: str | Path, record: dict[str, Any]) -> Path:
    """A model directory (MaskplayModel.save_pretrained: safetensors + config.json + manifest; tokenizer.json)
    and simcse.json with how it was trained."""
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save(directory)
    with atomic_path(directory / SIMCSE_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    return directory
