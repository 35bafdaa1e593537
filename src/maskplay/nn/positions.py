"""Where a model's positions come from. One piece every family can take, chosen by `ModelConfig.positions`:

- "learned": a learned absolute table added to the token embeddings (BERT, T-TA, GPT; backbone.Embeddings).
- "transformer-xl": no absolute positions at all; every attention layer adds a term that depends on the
  distance between query and key (Dai et al. 2019, the scheme XLNet uses, and GPT's Transformer-XL: its Frame then
  built by backbone.Encoder, its layers without the segment term), through a fixed sinusoid of the
  distance that the layer projects with its own weights, and two learned biases per layer, u (content) and
  v (position):  score(i, j) = (q_i + u) . k_j + (q_i + v) . W_r R(pos_i - pos_j)  [+ segment term].

A scheme that acts inside attention gets, besides q and k, a `Frame`: everything about positions that is the
same in every layer of one forward pass (the sinusoid table, which row of it each query/key pair reads,
which pairs are in different segments), built once per batch like the mask. Attention then runs as SDPA with
the position term as an additive float mask (scaled like the scores), so it keeps SDPA's fused kernel.

The other schemes (docs/guides/switches.md), for every single-stream family (BERT, GPT, UniLM, ELECTRA, T-TA):

- "sinusoidal": Vaswani et al.'s fixed table added to the token embeddings where the learned one would be,
  PE(p, 2k) = sin(p / 10000^(2k/d)), PE(p, 2k+1) = cos(p / 10000^(2k/d)), scaled to the RMS a learned table has
  at initialisation (std = initializer_range): the paper instead scales the token embeddings up by sqrt(d).
- "rotary": RoPE (Su et al. 2021): each head's queries and keys rotated by their absolute positions, so that
  q_m . k_n depends on m - n only; dimension k pairs with k + d/2 (GPT-NeoX / LLaMA layout), base 10000
  (`rotary_base`, LLaMA's rope_theta); `rotary_fraction` < 1 rotates the first d' = fraction x d dimensions only,
  k pairing with k + d'/2, the rest passing through (GPT-NeoX's rotary_pct).
- "t5": T5's learned scalar bias per head and relative-distance bucket (Raffel et al. 2020), one table shared by
  every layer as T5 shares it (32 buckets, max distance 128; bidirectional buckets except for GPT, whose
  buckets are T5 decoder's, all for the past).
- "alibi": Press et al.'s fixed bias -m_h |i - j| with the paper's head slopes (the geometric sequence
  2^(-8/n), 2^(-16/n), ... for n = 2^k heads, interleaved from the next power of two otherwise); symmetric in
  i - j, so the family's mask decides which side a query sees.
- "none": no positions at all (a causal mask still orders GPT's tokens; BERT becomes a bag of words).
- "disentangled": DeBERTa's disentangled attention as GPT-BERT has it (He et al. 2021; Charpentier & Samuel 2024):
  one table of relative embeddings (2 x 32 - 1 rows, log-bucketed distances up to 512, its own LayerNorm),
  shared by the layers (`Disentangled`, the encoder's); each layer projects it with its own query and key
  projections, and score(i, j) = (q_i . k_j + q_i . K_r[b(i - j)] + k_j . Q_r[b(i - j)]) / sqrt(3 d)
  (attention/disentangled.py). No absolute positions.

A bias scheme (t5, alibi) is folded into the attention mask once per pass: Encoder.forward turns the boolean
mask into `bias.masked_fill(~mask, -inf)` (a float mask SDPA adds to the scaled scores), so every path that
reads the mask (packing's groups, the last-layer query rows of PLL, the key/value cache) cuts the bias with it.
Rotary hands each layer a `PassPositions` whose `Rotary` (cos and sin of the query and key positions) attention
applies to q and k, before keys enter a key/value cache: cached keys keep the rotation of their own absolute
positions.

T-TA under these schemes: learned and sinusoidal positions enter both streams through the embeddings (the
query stream is [MASK] + position, the keys/values token + position); under rotary, t5, alibi and none the
embeddings of both streams carry no position at all, and positions enter attention only, as the relation
between a query's position and a key's (rotation of q and k, or a bias on their score)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig


def sinusoid(distances: Tensor, width: int) -> Tensor:
    """Transformer-XL's encoding of each distance, (R,) -> (R, width): [sin(d w_k), cos(d w_k)] with
    w_k = 1 / 10000^(2k / width), as the XLNet code builds it (all sines first, then all cosines)."""
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, width, 2, device=distances.device).float() / width)
    angles = distances.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


@dataclass
class Frame:
    """Positions for one forward pass. `table` (R, H): the sinusoid of every distance from `largest` down;
    `index` (B or 1, 1, Lq, Lk): for each query/key pair, the table row of its distance; `segments_differ`
    (B, 1, Lq, Lk) bool or None: True where query and key are in different segments."""

    table: Tensor
    index: Tensor
    segments_differ: Tensor | None = None

    def rows_from(self, start: int) -> Frame:
        """The frame of the query rows from `start` on (XLNet's last layer runs its query-stream rows alone)."""
        differ = None if self.segments_differ is None else self.segments_differ[:, :, start:]
        return Frame(self.table, self.index[:, :, start:], differ)


def relative_frame(query_columns: Tensor, key_positions: Tensor, width: int, clamp: int = -1,
                   query_segments: Tensor | None = None, key_segments: Tensor | None = None,
                   dropout: nn.Module | None = None) -> Frame:
    """The Transformer-XL frame. query_columns (Lq,) or (B, Lq), key_positions (Lk,) or (B, Lk): integer
    positions (memory keys sit before 0); distance = query position - key position, clamped to +-clamp when
    clamp > 0 (XLNet's clamp_len). Segments (B, Lq) / (B, Lk) give the relative segment term."""
    qp = query_columns if query_columns.dim() == 2 else query_columns[None]
    kp = key_positions if key_positions.dim() == 2 else key_positions[None]
    distance = qp[:, :, None] - kp[:, None, :]  # (B or 1, Lq, Lk)
    if clamp > 0:
        distance = distance.clamp(-clamp, clamp)
    largest, smallest = int(distance.max()), int(distance.min())
    table = sinusoid(torch.arange(largest, smallest - 1, -1, device=distance.device), width)
    if dropout is not None:
        table = dropout(table)
    differ = None
    if query_segments is not None and key_segments is not None:
        differ = (query_segments[:, :, None] != key_segments[:, None, :])[:, None]
    return Frame(table, (largest - distance)[:, None], differ)


class RelativePositions(nn.Module):
    """One layer's Transformer-XL position term (HuggingFace XLNet's r, r_w_bias, r_r_bias, r_s_bias and
    seg_embed). Its parameters are those of the layer that owns it. `segments`: XLNet's relative segment term
    (r_s_bias, seg_embed); a single-stream family (GPT) has no segments, so its layers have W_r, u and v only, as
    Transformer-XL's (whose untie_r = true gives each layer its own u and v, as here)."""

    def __init__(self, config: ModelConfig, segments: bool = True) -> None:
        super().__init__()
        heads, size = config.num_heads, config.key_width  # scores are q . k: the query/key width
        self.heads, self.size = heads, size
        self.project = nn.Linear(config.hidden_size, heads * size, bias=False)  # W_r
        self.content_bias = nn.Parameter(torch.zeros(heads, size))  # u
        self.position_bias = nn.Parameter(torch.zeros(heads, size))  # v
        self.segment_bias = nn.Parameter(torch.zeros(heads, size)) if segments else None
        # same segment, different segment
        self.segment_embed = nn.Parameter(torch.zeros(2, heads, size)) if segments else None

    def no_weight_decay(self) -> list[nn.Parameter]:
        """u, v and the segment bias are biases (HuggingFace's r_w_bias, r_r_bias, r_s_bias: names with "bias")."""
        return [p for p in (self.content_bias, self.position_bias, self.segment_bias) if p is not None]

    def reset_parameters(self, std: float) -> None:
        for p in (self.content_bias, self.position_bias, self.segment_bias, self.segment_embed):
            if p is not None:
                nn.init.normal_(p, std=std)

    def forward(self, q: Tensor, frame: Frame) -> tuple[Tensor, Tensor]:
        """q (B, heads, Lq, size), unscaled. Returns the queries to use against the content keys (q + u) and
        the additive score term (B, heads, Lq, Lk), already scaled by 1/sqrt(size) like SDPA's scores."""
        content, by_distance, seg = self.tables(q, frame)
        B, h, Lq, _ = by_distance.shape
        term = by_distance.gather(-1, frame.index.expand(B, h, Lq, -1))
        if seg is not None:
            term = term + torch.where(frame.segments_differ, seg[..., 1:2], seg[..., 0:1])
        return content, term * self.size ** -0.5

    def tables(self, q: Tensor, frame: Frame) -> tuple[Tensor, Tensor, Tensor | None]:
        """What the term is read from: the queries against the content keys (q + u), each query against every
        distance of the frame's table, (B, heads, Lq, R), and (with segments) against the same and the other
        segment's embedding, (B, heads, Lq, 2); a pair's term is its distance's entry plus its segment's."""
        keys = self.project(frame.table.to(q.dtype)).view(-1, self.heads, self.size).transpose(0, 1)  # (h, R, s)
        by_distance = (q + self.position_bias[:, None].to(q.dtype)) @ keys.transpose(-1, -2)
        seg = None
        if frame.segments_differ is not None:
            if self.segment_bias is None or self.segment_embed is None:
                raise ValueError("segments need the relative segment term, which only a two-stream family has")
            seg = (q + self.segment_bias[:, None].to(q.dtype)) @ self.segment_embed.to(q.dtype).permute(1, 2, 0)
        return q + self.content_bias[:, None].to(q.dtype), by_distance, seg

    def score_terms(self, by_distance: Tensor, seg: Tensor | None, frame: Frame) -> Callable[..., Tensor]:
        """FlexAttention's score_mod for the term (attention/flex.py): score(i, j) + (by_distance[i, index(i, j)]
        + seg[i, differ(i, j)]) / sqrt(size), read inside the kernel instead of a (B, heads, Lq, Lk) term. The
        tables in fp32, as the scores they join (their gradients are atomic adds in the kernel's backward)."""
        scale, index, differ = self.size ** -0.5, frame.index, frame.segments_differ
        by_distance, shared = by_distance.float(), index.shape[0] == 1
        seg = None if seg is None else seg.float()

        def score_mod(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            term = by_distance[b, h, i, index[0 if shared else b, 0, i, j]]
            if seg is not None:
                term = term + seg[b, h, i, differ[b, 0, i, j].long()]
            return score + term * scale

        return score_mod


def attend_with_term(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, term: Tensor, dropout_p: float = 0.0,
                     training: bool = False) -> Tensor:
    """SDPA with an additive score term (already scaled) and a boolean mask (True = may attend)."""
    bias = term.masked_fill(~mask, float("-inf"))
    if training and dropout_p > 0:
        from .dropout import dropout

        scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5).add_(bias)
        return dropout(scores.softmax(dim=-1), dropout_p, True) @ v
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


# ---- absolute, inside attention, or none: the other schemes ---------------------------------------------------

ABSOLUTE = ("learned", "sinusoidal")  # added to the embeddings (backbone.Embeddings)
IN_ATTENTION = ("rotary", "t5", "alibi")  # acting inside attention, built once per pass (PositionScheme)
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128  # T5's defaults (relative_attention_num_buckets, ..._max_distance)
ROTARY_BASE = 10000.0


def sinusoid_table(length: int, width: int) -> Tensor:
    """Vaswani et al.'s table, (length, width): column 2k holds sin(p w_k), column 2k + 1 cos(p w_k), with
    w_k = 1 / 10000^(2k / width) (interleaved, unlike Transformer-XL's sinusoid above)."""
    positions = torch.arange(length, dtype=torch.float64)[:, None]
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, width, 2, dtype=torch.float64) / width)
    angles = positions * inv_freq
    table = torch.zeros(length, width, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, :width // 2]
    return table.float()


def sinusoidal_embedding(config: ModelConfig) -> Tensor:
    """The fixed table backbone.Embeddings adds: sinusoid_table scaled so that its entries have the RMS of a learned
    table at initialisation (initializer_range): a sin/cos pair has mean square 1/2."""
    return sinusoid_table(config.max_position, config.embedding_width) * (config.initializer_range * math.sqrt(2))


def rotate_half(x: Tensor) -> Tensor:
    """[x1, x2] -> [-x2, x1] over the last dimension's halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rotary_angles(positions: Tensor, width: int, base: float = ROTARY_BASE) -> tuple[Tensor, Tensor]:
    """cos and sin of RoPE's angles for integer positions (..., L): (..., L, width), angle p theta_k in columns k and
    k + width/2, theta_k = base^(-2k / width). Computed in fp32 whatever the model's dtype."""
    inv_freq = 1.0 / torch.pow(base, torch.arange(0, width, 2, device=positions.device, dtype=torch.float32) / width)
    angles = positions.float()[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, heads, L, width) rotated: each pair (x_k, x_{k + width/2}) by its position's angle theta_k p."""
    return x * cos + rotate_half(x) * sin


@dataclass
class Rotary:
    """One pass's rotary tables: cos/sin of each query's position (1 or B, 1, Lq, width) and each key's (1 or B,
    1, Lk, width), in the dtype of the model's activations."""

    q_cos: Tensor
    q_sin: Tensor
    k_cos: Tensor
    k_sin: Tensor

    def apply(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        width = self.q_cos.shape[-1]
        if width != q.shape[-1]:  # rotary_fraction < 1 (GPT-NeoX's rotary_pct): the first `width` dimensions only
            return (torch.cat([apply_rotary(q[..., :width], self.q_cos, self.q_sin), q[..., width:]], dim=-1),
                    torch.cat([apply_rotary(k[..., :width], self.k_cos, self.k_sin), k[..., width:]], dim=-1))
        return apply_rotary(q, self.q_cos, self.q_sin), apply_rotary(k, self.k_cos, self.k_sin)

    def cut(self, end: int) -> Rotary:
        """The first `end` positions (a packing group, whose columns are positions 0..end-1)."""
        return Rotary(self.q_cos[..., :end, :], self.q_sin[..., :end, :], self.k_cos[..., :end, :],
                      self.k_sin[..., :end, :])

    def rows(self, rows: Tensor) -> Rotary:
        """Queries at one position per row, rows (B,): (B, 1, 1, width) query tables, keys unchanged."""
        B = rows.shape[0]
        pick = lambda t: t.expand(B, -1, -1, -1)[torch.arange(B, device=rows.device), :, rows][:, :, None]  # noqa: E731
        return Rotary(pick(self.q_cos), pick(self.q_sin), self.k_cos, self.k_sin)


@dataclass
class PassPositions:
    """What attention may read of one pass's positions, built once per pass by backbone.Encoder when a layer needs
    it (rotary, or an attention kind that reads positions, like attention.variants.Synthesizer): each query's and
    each key's position, (1 or B, Lq) and (1 or B, Lk) integers (with a key/value cache: every cached key's), and
    the rotary tables when positions = "rotary"."""

    query: Tensor
    key: Tensor
    rotary: Rotary | None = None
    relative: RelativeTable | None = None  # positions = "disentangled"

    def cut(self, end: int) -> PassPositions:
        """The first `end` columns (a packing group, whose columns are positions 0..end-1)."""
        return PassPositions(self.query[..., :end], self.key[..., :end],
                             None if self.rotary is None else self.rotary.cut(end),
                             None if self.relative is None else self.relative.cut(end))

    def rows(self, rows: Tensor) -> PassPositions:
        """Queries at one position per row, rows (B,) (PLL's last layer); keys unchanged."""
        B = rows.shape[0]
        query = self.query.expand(B, -1)[torch.arange(B, device=rows.device), rows][:, None]
        return PassPositions(query, self.key, None if self.rotary is None else self.rotary.rows(rows),
                             None if self.relative is None else self.relative.rows(rows))


# ---- disentangled attention (DeBERTa, GPT-BERT) ---------------------------------------------------------------

DISENTANGLED_BUCKETS, DISENTANGLED_MAX_DISTANCE = 32, 512  # GPT-BERT's position_bucket_size, max_position_embeddings


def log_bucket(relative: Tensor, bucket_size: int = DISENTANGLED_BUCKETS,
               max_distance: int = DISENTANGLED_MAX_DISTANCE) -> Tensor:
    """DeBERTa's log-bucketed relative position (its make_log_bucket_position) as GPT-BERT computes it: with
    mid = bucket_size // 2, a distance r with |r| <= mid is its own bucket; a larger one gets
    sign(r) (mid + ceil(log(|r| / mid) / log((max_distance - 1) / mid) (mid - 1))), |r| clamped to max_distance - 1
    first, so buckets run from -(bucket_size - 1) to bucket_size - 1. (DeBERTa does not clamp |r|: beyond
    max_distance - 1 its bucket grows on, and its table lookup clamps the index, to 2 bucket_size - 1 on the
    positive side, which is GPT-BERT's last bucket, and to 0, a bucket GPT-BERT has not, on the negative side.)"""
    mid = bucket_size // 2
    distance = relative.abs().clamp(mid - 1, max_distance - 1).double()  # below mid: the exact branch below
    large = torch.ceil(torch.log(distance / mid) / math.log((max_distance - 1) / mid) * (mid - 1)).long() + mid
    return torch.where(relative.abs() <= mid, relative, large * relative.sign())


@dataclass
class RelativeTable:
    """One pass's disentangled positions: `table` (R, hidden), the relative embeddings after their LayerNorm, and
    `index` (1 or B, Lq, Lk), the table row of each query/key pair (its distance's bucket + bucket_size - 1)."""

    table: Tensor
    index: Tensor

    def cut(self, end: int) -> RelativeTable:
        return RelativeTable(self.table, self.index[..., :end, :end])

    def rows(self, rows: Tensor) -> RelativeTable:
        B = rows.shape[0]
        return RelativeTable(self.table, self.index.expand(B, -1, -1)[torch.arange(B, device=rows.device), rows][:, None])


class Disentangled(nn.Module):
    """GPT-BERT's relative embeddings, shared by every layer (the encoder owns them): 2 bucket_size - 1 rows of the
    hidden width and their LayerNorm, which keeps its gain and bias whatever norm_affine says (as in the authors'
    code). The layers project the table with their own query and key weights (attention/disentangled.py)."""

    def __init__(self, config: ModelConfig, bucket_size: int | None = None, max_distance: int | None = None) -> None:
        super().__init__()
        # the config's (default GPT-BERT's DISENTANGLED_BUCKETS and _MAX_DISTANCE) unless given
        bucket_size = config.relative_buckets if bucket_size is None else bucket_size
        max_distance = config.relative_max_distance if max_distance is None else max_distance
        self.table = nn.Parameter(torch.zeros(2 * bucket_size - 1, config.hidden_size))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.reach = max_distance - 1  # every larger distance shares the last bucket
        distances = torch.arange(-self.reach, self.reach + 1)
        self.row: Tensor
        self.register_buffer("row", log_bucket(distances, bucket_size, max_distance) + bucket_size - 1,
                             persistent=False)

    def reset_parameters(self, std: float, truncated: bool = False) -> None:
        if truncated:
            nn.init.trunc_normal_(self.table, std=std, a=-2 * std, b=2 * std)
        else:
            nn.init.normal_(self.table, std=std)

    def prepare(self, query_columns: Tensor, key_positions: Tensor) -> RelativeTable:
        """The pass's table and index, for positions (1 or B, Lq) and (1 or B, Lk)."""
        relative = (query_columns[:, :, None] - key_positions[:, None, :]).clamp(-self.reach, self.reach)
        return RelativeTable(self.norm(self.table), self.row[relative + self.reach])


def t5_bucket(relative_position: Tensor, bidirectional: bool = True, num_buckets: int = T5_BUCKETS,
              max_distance: int = T5_MAX_DISTANCE) -> Tensor:
    """T5's bucket of each relative position (key position - query position), as Mesh TensorFlow's
    _relative_position_bucket: with bidirectional buckets half of them for keys after the query; of a side's n
    buckets, distances below n/2 get one bucket each, larger ones logarithmically wider buckets up to
    max_distance, and everything beyond the last bucket. Unidirectional (a decoder): keys after the query share
    bucket 0 (the mask hides them anyway)."""
    bucket = torch.zeros_like(relative_position)
    n = num_buckets
    if bidirectional:
        n //= 2
        bucket = bucket + (relative_position > 0).long() * n
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp_min(0)
    exact = n // 2
    # log(0) at distance 0 is -inf; those distances take the exact branch, so clamp only what log sees
    large = exact + (torch.log(distance.clamp_min(1).float() / exact) / math.log(max_distance / exact)
                     * (n - exact)).long()
    large = large.clamp_max(n - 1)
    return bucket + torch.where(distance < exact, distance, large)


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's head slopes (Press et al. 2022): for n = 2^k heads the geometric sequence starting at and with ratio
    2^(-8/n); otherwise those of the largest power of two below n, then every other slope of twice that many."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(heads).is_integer():
        slopes = power_of_two(heads)
    else:
        below = 2 ** math.floor(math.log2(heads))
        slopes = power_of_two(below) + power_of_two(2 * below)[0::2][:heads - below]
    return torch.tensor(slopes, dtype=torch.float32)


class PositionScheme(nn.Module):
    """The per-pass position terms of "rotary", "t5" and "alibi", built by backbone.Encoder once per forward pass
    and used by every layer. Parameters: T5's bucket table only (`buckets`, one scalar per bucket and head)."""

    def __init__(self, config: ModelConfig, causal: bool = False) -> None:
        super().__init__()
        if config.positions not in IN_ATTENTION:
            raise ValueError(f"PositionScheme is for {IN_ATTENTION}, not {config.positions!r}")
        self.kind = config.positions
        self.heads, self.width = config.num_heads, config.key_width
        if self.kind == "rotary":  # the dimensions rotated, and RoPE's base (rotary_fraction, rotary_base)
            self.width, self.base = config.rotary_width, config.rotary_base
        self.bidirectional = not causal  # T5's decoder buckets for a left-to-right family
        self.buckets = nn.Embedding(T5_BUCKETS, config.num_heads) if self.kind == "t5" else None
        if self.kind == "alibi":
            self.register_buffer("slopes", alibi_slopes(config.num_heads), persistent=False)

    def no_weight_decay(self) -> list[nn.Parameter]:
        """T5's bucket table is a score bias (HuggingFace's relative_attention_bias), not a weight."""
        return list(self.buckets.parameters()) if self.buckets is not None else []

    def bias(self, query_columns: Tensor, key_positions: Tensor) -> Tensor:
        """The additive score term (1 or B, heads, Lq, Lk) in fp32, for positions (1 or B, Lq) and (1 or B, Lk)."""
        relative = key_positions[:, None, :] - query_columns[:, :, None]  # (B, Lq, Lk): key - query
        if self.kind == "alibi":
            return -self.slopes[None, :, None, None] * relative.abs()[:, None].float()
        bucket = t5_bucket(relative, self.bidirectional)
        return self.buckets(bucket).permute(0, 3, 1, 2).float()

    def prepare(self, mask: Tensor, query_columns: Tensor, key_positions: Tensor, dtype: torch.dtype,
                new_key_positions: Tensor | None = None) -> tuple[Tensor, Rotary | None]:
        """What the layers of one pass get: the mask, with a bias scheme's term folded in (a float mask, -inf where
        the boolean mask forbids), and the rotary tables (rotary only). Positions are (1 or B, L) integers; with a
        key/value cache, key_positions are every cached key's and new_key_positions those of the keys this pass
        projects (and rotates: cached keys were rotated when they were new)."""
        if self.kind == "rotary":
            q_cos, q_sin = rotary_angles(query_columns, self.width, self.base)
            k_cos, k_sin = rotary_angles(key_positions if new_key_positions is None else new_key_positions, self.width,
                                         self.base)
            return mask, Rotary(*(t[:, None].to(dtype) for t in (q_cos, q_sin, k_cos, k_sin)))
        bias = self.bias(query_columns, key_positions).to(dtype)
        return bias.masked_fill(~mask, float("-inf")), None
