"""`maskplay grow`: a bigger model that computes what a smaller one computes, to continue pretraining from
(function-preserving growth, as Net2Net's, Chen et al. 2016; docs/guides/switches.md).

Width, by an integer factor k (hidden k x, heads k x at the same head width, FFN k x): every hidden, head and FFN
unit is duplicated k times, in blocks ([copy 1 | copy 2 | ...]), and every weight that reads duplicated units is
divided by k (Net2Net's duplication and scaling, Chen et al. 2016). Then each copy of a unit holds exactly the old
unit's value: a LayerNorm or RMSNorm over k copies sees the old mean and variance, a head's copy attends exactly as
the head did, and the tied LM head's LayerNorm is divided by k so that h' . E' = h . E. Exact for every norm
placement (post-LN included), except where a fixed part depends on the width or head count: positions =
"sinusoidal" (the table is rebuilt for the new width) and "alibi" (the slopes are those of the new head count).

Depth, to N layers: the new blocks go on top, with their output projections (attention's `out`, the FFN's `down`)
zero, so that their residual branches add nothing. Exact under pre-LN (h + 0 = h). Not under post-LN or DeepNorm:
there a block normalises its output even when its branches add nothing, LN(h + 0) = LN(h), which is not h (the
last block's norm has its own gain and bias), so the new blocks still change the outputs; grow does the same
zero-branch construction, says it is not exact and measures by how much. With share_layers there is one block
in every layer, and depth growth is refused."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..config import CAUSAL_LM_SWITCHES, UNGATED
from ..families import MaskplayModel, build_model, families


@dataclass
class Grown:
    """The grown model, whether the construction is exact, and why not where it is not."""

    model: MaskplayModel
    exact: bool
    reasons: list[str] = field(default_factory=list)


def grow(model: MaskplayModel, layers: int | None = None, hidden: int | None = None,
         heads: int | None = None) -> Grown:
    """The model grown to `layers` blocks and `hidden` width with `heads` heads (each None: unchanged; heads default
    to the same factor as hidden). Raises ValueError, in one line, for what cannot be grown."""
    cfg = model.config
    if not model.growable:
        growable = [f.family for f in families() if f.growable]
        raise ValueError(f"grow is built for {', '.join(growable)}, not family {cfg.family!r}")
    if cfg.embedding_size is not None:
        raise ValueError("grow does not widen factorised embeddings (embedding_size): leave it out")
    layers = cfg.num_layers if layers is None else layers
    hidden = cfg.hidden_size if hidden is None else hidden
    if layers < cfg.num_layers or hidden < cfg.hidden_size:
        raise ValueError(f"grow only grows: {cfg.num_layers} layers x {cfg.hidden_size} to {layers} x {hidden}")
    if hidden % cfg.hidden_size:
        raise ValueError(f"--hidden must be a multiple of the model's {cfg.hidden_size} (units are duplicated), "
                         f"got {hidden}")
    k = hidden // cfg.hidden_size
    heads = cfg.num_heads * k if heads is None else heads
    if heads != cfg.num_heads * k:
        raise ValueError(f"--heads must grow by the width's factor {k} (heads keep their width, "
                         f"{cfg.head_dim}): {cfg.num_heads * k}, got {heads}")
    if k > 1 and cfg.attention == "lsra":
        raise ValueError("grow does not widen attention = 'lsra' (duplicated units would cross its attention and "
                         "convolution halves): grow its depth only")
    if cfg.denseformer:
        raise ValueError("grow does not grow denseformer's depth weights yet: leave denseformer off")
    if k > 1 and (cfg.positions in ("disentangled", "transformer-xl") or not cfg.norm_affine):
        what = f"positions = {cfg.positions!r} (its relative table)" if cfg.norm_affine else \
            "norm_affine = false (the LM head's norm has no gain to divide by the factor)"
        raise ValueError(f"grow does not widen {what}: grow its depth only")
    causal_lm = [f"{name} = {getattr(cfg, name)!r}" for name, default in CAUSAL_LM_SWITCHES.items()
                 if getattr(cfg, name) != default]
    if causal_lm:
        raise ValueError(f"grow does not grow a model with {causal_lm[0]} yet (a HuggingFace causal LM's switch)")
    if cfg.share_layers and layers != cfg.num_layers:
        raise ValueError("share_layers: every layer is the one shared block, so new layers cannot start as "
                         "identities; grow its width only")
    reasons = []
    if k > 1 and cfg.positions in ("sinusoidal", "alibi"):
        what = "the sinusoid table depends on the width" if cfg.positions == "sinusoidal" else \
            "ALiBi's slopes depend on the number of heads"
        reasons.append(f"positions = {cfg.positions!r}: {what}")
    if layers > cfg.num_layers and cfg.norm_placement != "pre":
        reasons.append(f"norm_placement = {cfg.norm_placement!r}: a new block's norm re-normalises the old output "
                       "even with its branches zero (exact depth growth needs pre-LN)")
    intermediate = cfg.intermediate_size * k
    if cfg.ffn not in UNGATED:  # a gated layer's width is 2/3 of intermediate_size, rounded: pick the size giving k x its
        intermediate = round(1.5 * k * cfg.ffn_width)
    big_cfg = dataclasses.replace(cfg, num_layers=layers, hidden_size=hidden, num_heads=heads,
                                  intermediate_size=intermediate)
    big = build_model(big_cfg).to(next(model.parameters()).device)
    small = model.state_dict()
    state = big.state_dict()
    for name, value in state.items():
        if name.startswith("encoder.layers."):
            index = int(name.split(".")[2])
            if index >= cfg.num_layers:
                if name.endswith(("attn.out.weight", "attn.out.bias", "ffn.down.weight", "ffn.down.bias")):
                    state[name] = torch.zeros_like(value)  # the new block's branches add nothing
                continue
        state[name] = _widened(name, small[name], k, cfg.ffn not in UNGATED)
        if state[name].shape != value.shape:
            raise AssertionError(f"grow: {name} came out {tuple(state[name].shape)}, expected {tuple(value.shape)}")
    big.load_strict(state, source="the grown weights")
    return Grown(big.train(model.training), not reasons, reasons)


def _widened(name: str, x: Tensor, k: int, gated: bool) -> Tensor:
    """One small-model tensor at k times the width (see the module docstring)."""
    if k == 1 or name == "head.bias":
        return x.clone()
    if name.startswith("embeddings.") and x.dim() == 2:
        return x.repeat(1, k)  # token, position and segment tables: each row's units duplicated
    if name.startswith("head.norm."):
        return x.repeat(k) / k  # the tied decoder sums k copies: divide once, here
    if name.endswith(("logits_mix", "weights_mix")):
        return torch.block_diag(*[x] * k)  # talking heads: each copy of the heads mixes among itself
    if name.endswith("positions.buckets.weight"):
        return x.repeat(1, k)  # T5 bias (buckets, heads): the copied heads' columns
    if name.endswith("synthesizer.table"):
        return x.repeat(k, 1, 1)
    if gated and name.endswith(("ffn.up.weight", "ffn.up.bias")):
        return torch.cat([_widened("ffn.up", half, k, False) for half in x.chunk(2)])  # gate, value: each on its own
    if x.dim() == 2:
        return x.repeat(k, k) / k  # a linear layer: outputs duplicated, duplicated inputs summed once
    return x.repeat(k)  # biases, norm gains and biases


def largest_difference(small: MaskplayModel, big: MaskplayModel, seed: int = 0) -> float:
    """max |logits difference| on a fixed random batch (8 x 32 ids, every position real), in fp32, eval mode."""
    cfg = small.config
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(cfg.special_token_ids), cfg.vocab_size, (8, min(32, cfg.max_position)), generator=g)
    modes = small.training, big.training
    small.eval(), big.eval()
    try:
        with torch.no_grad():
            return float((small(ids).logits - big(ids).logits).abs().max())
    finally:
        small.train(modes[0]), big.train(modes[1])

