"""GPT-BERT (Charpentier & Samuel, "GPT or BERT: why not both?", BabyLM 2024): one network that is both a causal and
a masked LM, trained with masked next-token prediction (MNTP).

In both modes the output at position k predicts token k + 1 through the one tied head:
- masked mode: bidirectional attention; spans of 1..max_span real tokens are selected (the rate falling linearly from
  gpt_bert.mask_start to mask_end over training), each span replaced by [MASK] (or a random token, or kept:
  random_share / keep_share), special tokens never; the loss is only where the *next* token was selected;
- causal mode: the same mask made lower-triangular, the loss at every next real token (GPT exactly).
Each training batch puts a gpt_bert.causal_share of its rows in causal mode ("1:15" = 1/16); the loss is
(1 - causal_share) x the masked rows' mean + causal_share x the causal rows' mean (the paper's split of GPUs between
the modes), plus gpt_bert.z_loss x mean (log Z)^2.

Scores: causal (one pass, the exact log-likelihood), pll (MNTP's pseudo-log-likelihood: each piece masked in turn,
read one position to its left) and fused (their sum). Embedding and fine-tuning read the bidirectional mode,
generation the causal one (prefill / step as GPT). The architecture of the paper (model_extra.py) is switches every
family can use (docs/guides/switches.md); this file holds only what the family decides."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import ModelConfig
from ..nn.masks import MaskMod, MaskPicture, bidirectional, causal
from ..nn.modeling import IGNORE_INDEX
from ..nn.outputs import ModelOutput, Targets
from ..nn.pass_modes import LastLayerRows
from ..nn.score_rules import PLL, PLL_WORD, SUM, ScoreRule
from .base import MaskplayModel
from .gpt import GPT


def row_modes(causal_rows: Tensor) -> MaskMod:
    """Causal attention in the rows marked True (B,), bidirectional in the others."""
    return lambda b, h, q, kv: (kv <= q) | ~causal_rows[b]


class _KnownModes:
    """The rows' modes of the batch being run, as the caller checked them on the host (modes_from_host): "causal",
    "bidirectional" or "mixed"; None: batch_modes reads them."""

    modes: str | None = None


def modes_of(causal_rows: Tensor) -> str:
    return "causal" if bool(causal_rows.all()) else "mixed" if bool(causal_rows.any()) else "bidirectional"


@contextmanager
def modes_from_host(causal_rows: Tensor | None) -> Iterator[None]:
    """Within: the forward's batch has these rows' modes, read here from the host's copy (nothing read when it is
    None or on a device), so batch_modes reads nothing back (no synchronisation; under torch.compile a class
    attribute is a guard, not a graph break)."""
    before = _KnownModes.modes
    if causal_rows is not None and causal_rows.device.type == "cpu":
        _KnownModes.modes = modes_of(causal_rows)
    try:
        yield
    finally:
        _KnownModes.modes = before


def batch_modes(causal_rows: Tensor) -> MaskMod:
    """row_modes, as causal() or bidirectional() where every row has the one mode (SDPA may then run without the
    mask: masks.sdpa_kind)."""
    modes = _KnownModes.modes or modes_of(causal_rows)
    return causal() if modes == "causal" else row_modes(causal_rows) if modes == "mixed" else bidirectional()


@dataclass
class GptBertConfig:
    """GPT-BERT's objective (Charpentier & Samuel 2024, masked next-token prediction); read only by
    family="gpt-bert". The defaults are the paper's 10 M-word recipe."""

    causal_share: float = 1 / 16  # share of each batch's sequences in causal mode ("1:15"); the rest masked
    mask_start: float = 0.30  # masked mode's masking rate at the start of training, falling linearly to mask_end
    mask_end: float = 0.15
    max_span: int = 3  # masked spans of 1..max_span tokens
    random_share: float = 0.1  # of the selected spans: replaced by random tokens
    keep_share: float = 0.1  # of the selected spans: kept as they are (the rest become [MASK])
    z_loss: float = 1e-4  # weight of mean (log Z)^2 (0: off, and the head never holds the whole logits)

    def __post_init__(self) -> None:
        for name in ("causal_share", "mask_start", "mask_end", "random_share", "keep_share"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"gpt_bert.{name} must be in [0, 1], got {value}")
        if not (self.mask_start > 0 and self.mask_end > 0):
            raise ValueError("gpt_bert.mask_start and mask_end must be above 0")
        if self.random_share + self.keep_share > 1:
            raise ValueError(f"gpt_bert.random_share + keep_share must be at most 1, got "
                             f"{self.random_share + self.keep_share}")
        if self.max_span < 1:
            raise ValueError(f"gpt_bert.max_span must be at least 1, got {self.max_span}")
        if not (self.z_loss >= 0 and math.isfinite(self.z_loss)):
            raise ValueError(f"gpt_bert.z_loss must be a finite number >= 0, got {self.z_loss}")


class GPTBert(MaskplayModel):
    family = "gpt-bert"
    settings = GptBertConfig  # [model.gpt_bert]
    # causal mode: piece k from the output at k - 1, every piece in one pass; MNTP's PLL: the pieces masked, the
    # piece at k read from the bidirectional output at k - 1; fused: the two summed
    score_rules = (ScoreRule("causal", offset=-1, pass_kwargs=lambda mask: {"causal": True}, left_to_right=True),
                   ScoreRule("pll", PLL, offset=-1), ScoreRule("pll-word", PLL_WORD, offset=-1),
                   ScoreRule("fused", SUM, parts=("pll", "causal")))
    masked_lm_method = "pll"  # minicons' masked-LM reading: MNTP's PLL
    default_pooling = "mean"
    predicted_fraction = 1 / 16 + 15 / 16 * 0.225  # causal rows at every token, masked rows at the mean mask rate
    masks_shown = (MaskPicture("gpt-bert", "GPT-BERT masked mode: bidirectional", lambda s, r: bidirectional()),
                   MaskPicture("gpt-bert-causal", "GPT-BERT causal mode", lambda s, r: causal(), in_all=False))
    hf_code = {"mask": "bidirectional", "causal_mask": "causal", "query_stream": False, "segments": "none"}

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.progress = 0.0  # the share of training done: the masked mode's rate follows it

    # ---- training ---------------------------------------------------------------------------------------------

    def set_training_progress(self, fraction: float) -> None:
        self.progress = min(max(float(fraction), 0.0), 1.0)

    def mask_rate(self) -> float:
        options = self.config.gpt_bert
        return options.mask_start + (options.mask_end - options.mask_start) * self.progress

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Rows in causal mode drawn at causal_share (an unbiased count: floor(B share + u)); the others span-masked.
        labels[:, k] is the target of output k (the next token), -100 where there is none."""
        options, cfg = self.config.gpt_bert, self.config
        attention_mask = attention_mask.bool()
        B, L = input_ids.shape
        n_causal = min(B, math.floor(B * options.causal_share + float(torch.rand((), generator=generator))))
        causal_rows = torch.zeros(B, dtype=torch.bool)
        causal_rows[torch.randperm(B, generator=generator)[:n_causal]] = True
        causal_rows = causal_rows.to(input_ids.device)
        selected, corrupted = span_mask(input_ids, attention_mask, cfg.special_token_ids, cfg.mask_token_id,
                                        cfg.vocab_size, self.mask_rate(), options, generator)
        targets = torch.where(causal_rows[:, None], attention_mask, selected & ~causal_rows[:, None])
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        labels[:, :-1] = input_ids[:, 1:].masked_fill(~targets[:, 1:], IGNORE_INDEX)
        inputs = torch.where(causal_rows[:, None], input_ids, corrupted)
        return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels, "causal_rows": causal_rows}

    @contextmanager
    def known_from_host(self, batch: dict[str, Tensor]) -> Iterator[None]:  # type: ignore[override]
        """The padding (the base's) and the rows' modes, read from the host's copy of the batch."""
        with super().known_from_host(batch), modes_from_host(batch.get("causal_rows")):
            yield

    # ---- forward ----------------------------------------------------------------------------------------------

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                causal_rows: Tensor | None = None, causal: bool = False, output_hidden_states: bool = False,
                last_layer_rows: LastLayerRows | None = None) -> ModelOutput:
        """causal_rows (B,) bool: the rows in causal mode (training_batch's); else `causal` sets every row's mode
        (default: the bidirectional mode, what embedding and fine-tuning read). labels are already shifted: the
        output at k is scored against labels[:, k]."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        if causal_rows is None:
            causal_rows = torch.full((input_ids.shape[0],), causal, dtype=torch.bool, device=input_ids.device)
        last_layer_rows = self._last_layer_rows(last_layer_rows, labels)
        # batch_modes' one-mode forms only serve SDPA's mask_kind; without it, the rows' modes as they are (the
        # same mask, and no read-back of causal_rows: a graph break under torch.compile)
        modes = batch_modes(causal_rows) if self.encoder.reads_mask_kind else row_modes(causal_rows)
        h, states = self.encode_under(modes, input_ids, attention_mask,
                                      output_hidden_states=output_hidden_states, last_layer_rows=last_layer_rows)
        if labels is None:
            return self.output(h, None, states)
        return self._mntp_loss(h, labels, causal_rows, states)

    def _mntp_loss(self, h: Tensor, labels: Tensor, causal_rows: Tensor,
                   states: tuple[Tensor, ...] | None) -> ModelOutput:
        """The modes' mean token losses, weighted by their shares when the batch has both modes (the whole loss a
        mode's when it has one). parts holds both means, nan for a mode the batch has no targets of (the trainer's
        windows and the evaluation skip it). With z_loss the whole of it is tensor arithmetic: nothing is read
        back, so a compiled step is one graph whatever the modes' counts."""
        options = self.config.gpt_bert
        at = Targets.of_labels(labels, labels != IGNORE_INDEX)
        in_causal = at.take(causal_rows[:, None].expand_as(labels))
        hidden, targets = at.take(h), at.take(labels)
        modes = {"masked_loss": ~in_causal, "causal_loss": in_causal}
        shares = torch.tensor([1 - options.causal_share, options.causal_share], device=h.device)
        counts = torch.stack([m.sum() for m in modes.values()])
        parts: dict[str, Tensor] = {}
        if options.z_loss > 0:  # log Z needs the logits whole
            logits = self.logits(hidden).float()
            token_loss = F.cross_entropy(logits, targets, reduction="none")
            # each mode's mean as a masked sum over its count: no selection, so no read back
            means = torch.stack([token_loss.mul(m).sum() for m in modes.values()]) / counts.clamp(min=1)
            parts["z_loss"] = log_z(logits).pow(2).mean()
        else:  # the fused head loss, never holding the (N, V) logits: each mode's rows selected (read back)
            present_now = counts.tolist()
            means = torch.stack([self.head.loss(hidden[m], self.embeddings.word.weight, targets[m]) if n
                                 else hidden.new_zeros((), dtype=torch.float32)
                                 for m, n in zip(modes.values(), present_now, strict=True)])
        present = counts > 0
        weights = torch.where(present.all(), shares, present.to(shares.dtype))
        loss = (weights * means).sum()
        if options.z_loss > 0:
            loss = loss + options.z_loss * parts["z_loss"]
        parts.update({name: torch.where(present[k], means[k], math.nan) for k, name in enumerate(modes)})
        return ModelOutput(loss=loss, logits=self._deferred_logits(hidden), last_hidden_state=h, hidden_states=states,
                           parts={k: v.detach() for k, v in parts.items()})

    # ---- the contract's rules (families/base.py) ------------------------------------------------------------

    # ---- generation: the causal mode, exactly GPT's hooks (maskplay.nn.generation_hooks) -------------------------------

    prefill = GPT.prefill
    step = GPT.step


def log_z(logits: Tensor) -> Tensor:
    """torch.logsumexp over the last dim, written out: the library's asks whether the rows are empty, which under
    torch.compile, with as many rows as the batch has targets (a size known at run time), is a graph break. The
    shift by the rows' maxima is detached: the value does not depend on it."""
    top = logits.detach().amax(-1, keepdim=True)
    return (logits - top).exp().sum(-1).log() + top.squeeze(-1)


def span_mask(input_ids: Tensor, attention_mask: Tensor, special_ids: list[int], mask_id: int, vocab_size: int,
              rate: float, options: Any, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """(selected (B, L) bool, corrupted ids): in each row, spans of 1..max_span consecutive positions, each span with
    one uniform draw; the floor(n rate + u) eligible tokens (real, not special; at least one) of the lowest draws are
    selected, so whole spans go together. A selected span becomes random tokens (random_share), stays (keep_share)
    or becomes [MASK] (the rest)."""
    device = input_ids.device
    B, L = input_ids.shape
    lengths = torch.randint(1, options.max_span + 1, (B, L), generator=generator)
    starts = lengths.cumsum(1) - lengths  # the first L spans cover at least L positions
    is_start = torch.zeros(B, L + options.max_span * L, dtype=torch.long).scatter_(1, starts, 1)[:, :L]
    span = is_start.cumsum(1) - 1  # (B, L): each position's span
    draw = torch.rand(B, L, generator=generator).gather(1, span)
    action = torch.rand(B, L, generator=generator).gather(1, span)
    eligible = attention_mask.cpu() & ~torch.isin(input_ids.cpu(), torch.tensor(special_ids))
    n = eligible.sum(1)
    count = torch.clamp((n * rate + torch.rand(B, generator=generator)).floor().long(), min=1)
    count = torch.minimum(count, n)
    rank = draw.masked_fill(~eligible, math.inf).argsort(1).argsort(1)
    selected = eligible & (rank < count[:, None])
    random_tokens = torch.randint(len(special_ids), vocab_size, (B, L), generator=generator)
    replaced = torch.where(action < options.random_share, random_tokens, input_ids.cpu())
    replaced = torch.where(action >= options.random_share + options.keep_share, mask_id, replaced)
    corrupted = torch.where(selected, replaced, input_ids.cpu())
    return selected.to(device), corrupted.to(device)
