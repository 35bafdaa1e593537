"""Long-text attention wired into the backbone: `[model.long]` (config.LongAttentionConfig) for every single-stream
family (T-TA, BERT, GPT, UniLM, ELECTRA). docs/guides/long-text.md has the user's side.

- **Longformer window** (`long.window` = w keys on each side, `long.dilation`, `long.global_tokens` = the first N
  positions global): the pattern (|i - j| <= w and d | i - j) OR global is ANDed with the family's structural mask
  and padding (True = may attend), so GPT stays causal (it sees w keys to the left) and T-TA keeps its diagonal
  hidden (output i never depends on token i).
- **Adaptive span** (`long.adaptive_span`, Sukhbaatar et al. 2019): every layer's attention owns an
  `adaptive_span.AdaptiveSpan`, a soft mask m_z(|i - j|) per head entering the scores as the log-bias log m_z;
  the training loop adds `long.span_penalty` x (the layers' mean spans, summed) to the loss (`span_penalty`) and
  clamps the spans after each optimizer step (`clamp_spans`); `learned_spans` reports them.

Two ways to run it, equal to float rounding (tests/nn/test_long_attention.py):

- dense SDPA with the pattern materialised into the (B, 1, Lq, Lk) mask (`LongAttention.prepare` returns the mask,
  the adaptive span's bias is added per layer by `span_mask`): sequences shorter than `long.banded_from` (1024 by
  default: docs/guides/long-text.md's measurements have dense SDPA as fast or faster up to 512 tokens and the banded kernel
  faster from 1024), a key/value cache (generation), PLL's one-query last layer;
- the banded kernel `banded.sliding_window_attention` (scores and probabilities linear in length) for
  longer full passes: `prepare` returns a `BandedMask`, which the encoder hands to every layer instead of the mask
  (as PassInputs.mask). ALiBi and T5 biases enter the kernel as a `bias_mod` rather than an L x L float mask.
  The family's boolean mask is still materialised (1 byte per query/key pair); only the attention is banded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ...config import ModelConfig
from ..masks import MaskMod
from ..positions import PassPositions, PositionScheme, t5_bucket
from .adaptive_span import AdaptiveSpan
from .banded import sliding_window_attention

__all__ = ["LongAttention", "BandedMask", "span_mask", "span_penalty", "clamp_spans", "learned_spans", "write_spans"]


class LongAttention:
    """What the encoder does with `[model.long]` once per pass (no parameters: the spans live in each layer)."""

    def __init__(self, config: ModelConfig) -> None:
        self.long = config.long

    def prepare(self, mask: Tensor, query_columns: Tensor, key_positions: Tensor, banded_ok: bool,
                scheme: PositionScheme | None) -> Tensor | BandedMask:
        """The family's mask (B, 1, Lq, Lk) bool with the window pattern ANDed in; a BandedMask instead when the
        pass may run banded (`banded_ok`: a full self-attention pass, no cache) and is long enough. Positions:
        (1 or B, Lq) and (1 or B, Lk) integers (with a cache, each key's absolute position)."""
        long = self.long
        if banded_ok and mask.shape[-1] >= long.banded_from:
            return BandedMask(mask, long.window, long.dilation, long.global_tokens, scheme)
        if long.window is None:
            return mask
        distance = query_columns[:, :, None] - key_positions[:, None, :]
        allowed = distance.abs() <= long.window * long.dilation
        if long.dilation > 1:
            allowed = allowed & (distance % long.dilation == 0)
        if long.global_tokens:
            allowed = allowed | (query_columns < long.global_tokens)[:, :, None] \
                | (key_positions < long.global_tokens)[:, None, :]
        return mask & allowed[:, None]


@dataclass
class BandedMask:
    """Handed to the layers instead of a mask tensor: the family's (B, 1, L, L) bool mask and the pattern, run by
    `attend` through the banded kernel. Positions are the columns 0..L-1."""

    mask: Tensor
    window: int | None
    dilation: int
    global_tokens: int
    scheme: PositionScheme | None

    @property
    def length(self) -> int:
        return self.mask.shape[-1]

    def pass_positions(self, dtype: torch.dtype) -> PassPositions:
        """The pass's positions (and rotary tables under positions = "rotary"; a bias scheme enters `attend`)."""
        columns = torch.arange(self.length, device=self.mask.device)[None]
        rotary = None
        if self.scheme is not None and self.scheme.kind == "rotary":
            _, rotary = self.scheme.prepare(self.mask, columns, columns, dtype)
        return PassPositions(columns, columns, rotary)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, span: AdaptiveSpan | None, dropout_p: float) -> Tensor:
        """q, k, v (B, H, L, D) -> (B, H, L, D): attention under the family mask AND the pattern (or the span)."""
        table = self.mask

        def family(b: Tensor, h: Tensor, qi: Tensor, kv: Tensor) -> Tensor:
            return table[b, 0, qi, kv]

        mask_mod: MaskMod = family
        if self.dilation > 1:
            d = self.dilation
            mask_mod = lambda b, h, qi, kv: family(b, h, qi, kv) & ((qi - kv) % d == 0)  # noqa: E731
        biases = [] if span is None else [span.bias_mod()]
        if self.scheme is not None and self.scheme.kind != "rotary":
            biases.append(position_bias_mod(self.scheme))
        bias_mod = None
        if biases:
            def bias_mod(b: Tensor, h: Tensor, qi: Tensor, kv: Tensor) -> Tensor:
                return sum(f(b, h, qi, kv).to(q.dtype) for f in biases)  # type: ignore[return-value]

        window = span.window() if span is not None else self.window * self.dilation  # type: ignore[operator]
        globals_ = None
        if self.global_tokens:
            count = min(self.global_tokens, self.length)
            globals_ = torch.arange(count, device=q.device)[None].expand(q.shape[0], count)
        return sliding_window_attention(q, k, v, window, mask_mod, global_positions=globals_, bias_mod=bias_mod,
                                        dropout_p=dropout_p)


def position_bias_mod(scheme: PositionScheme) -> MaskMod:
    """ALiBi's or T5's score bias as a bias_mod (b, h, q, kv) -> float, what PositionScheme.bias computes densely."""
    if scheme.kind == "alibi":
        slopes = scheme.slopes
        return lambda b, h, qi, kv: -slopes[h] * (kv - qi).abs().float()
    table = scheme.buckets.weight  # (buckets, heads)
    return lambda b, h, qi, kv: table[t5_bucket(kv - qi, scheme.bidirectional), h].float()


def span_mask(span: AdaptiveSpan, mask: Tensor, dead_rows: Tensor | None, positions: PassPositions,
              dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """The dense path's mask under an adaptive span: a float (B, H, Lq, Lk) mask, the mask's own bias (if float)
    plus log m_z(|i - j|) per head, -inf where hidden; rows left with nothing get zeros (returned as dead rows)."""
    distance = (positions.query[:, :, None] - positions.key[:, None, :]).abs()  # (1 or B, Lq, Lk)
    m = span.soft_mask(distance).transpose(0, 1)  # (1 or B, H, Lq, Lk)
    bias = torch.where(m > 0, m.clamp_min(torch.finfo(m.dtype).tiny).log(), float("-inf"))
    if mask.dtype == torch.bool:
        out = bias.to(dtype).masked_fill(~mask, float("-inf"))
    else:
        out = mask + bias.to(mask.dtype)
    dead = ~torch.isfinite(out).any(dim=-1, keepdim=True)
    if not bool(dead.any()):
        return out, dead_rows
    return out.masked_fill(dead, 0.0), dead if dead_rows is None else dead | dead_rows


def _spans(model: nn.Module) -> list[AdaptiveSpan]:
    """The model's adaptive spans, layer by layer (one per distinct module: a shared block's once)."""
    seen: dict[int, AdaptiveSpan] = {}
    for module in model.modules():
        if isinstance(module, AdaptiveSpan):
            seen.setdefault(id(module), module)
    return list(seen.values())


def span_penalty(model: nn.Module) -> Tensor | float:
    """long.span_penalty x the sum over layers of the mean span (tokens): what the training loss adds (0 without
    adaptive span). Per token of the loss: the loop multiplies it by the micro-batch's target count."""
    spans = _spans(model)
    if not spans:
        return 0.0
    coefficient = model.config.long.span_penalty  # type: ignore[union-attr]
    return coefficient * torch.stack([s.penalty() for s in spans]).sum()


def clamp_spans(model: nn.Module) -> None:
    """Keep every span in [0, max_span], after each optimizer step."""
    for span in _spans(model):
        span.clamp_()


def learned_spans(model: nn.Module) -> list[list[float]]:
    """The learned span of each head, in tokens, layer by layer ([] without adaptive span)."""
    return [span.spans() for span in _spans(model)]


def span_summary(model: nn.Module) -> dict[str, float]:
    """Mean and largest span over all heads, for the training metrics ({} without adaptive span)."""
    spans = [z for layer in learned_spans(model) for z in layer]
    return {"span_mean": sum(spans) / len(spans), "span_max": max(spans)} if spans else {}


def write_spans(model: nn.Module, path: str | Path) -> list[list[float]]:
    """Write the learned spans as JSON (layers x heads, tokens, with the ramp and max_span); returns them."""
    spans = learned_spans(model)
    long = model.config.long  # type: ignore[union-attr]
    Path(path).write_text(json.dumps({"spans": spans, "ramp": long.span_ramp, "max_span": long.max_span,
                                      "penalty": long.span_penalty}, indent=1) + "\n")
    return spans
