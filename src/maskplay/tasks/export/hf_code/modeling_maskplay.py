"""A maskplay model as HuggingFace custom code (`maskplay export --to-hf`): one standalone PyTorch implementation of
maskplay's backbone (embeddings, blocks, the tied masked-LM head) under the attention mask of the family it was
trained as. It imports torch and transformers only, never maskplay: copied next to the weights, it loads with
`AutoModel*.from_pretrained(DIR, trust_remote_code=True)` wherever transformers is installed.

The weights keep maskplay's names (under `maskplay.`; the head under `head.`). What the switches do is maskplay's
(its docs/guides/switches.md): positions learned / sinusoidal / rotary / t5 / alibi / none / disentangled, norm layernorm /
rmsnorm with or without a gain, norm placement post / pre / deepnorm, feed-forward gelu / geglu / swiglu, GPT-BERT's
switches. Inference only: no dropout. Generation keeps a key/value cache (transformers' DynamicCache, under the
name the installed transformers passes: `cache` in 5, `past_key_values` in 4) where the mask is causal (GPT, GPT-BERT's
causal mode); UniLM's seq2seq mask recomputes the whole sequence at each step.
Positions other than learned ones take inputs longer than `max_position` (the length trained at, or the table the
model was built with): sinusoidal, rotary, t5, alibi, none and disentangled positions have no table to run out of
(BabyLM's fine-tuning truncates at 512); the model never saw such lengths in training."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithPast, MaskedLMOutput

from .configuration_maskplay import MaskplayConfig

T5_BUCKETS, T5_MAX_DISTANCE = 32, 128
REL_BUCKETS, REL_MAX_DISTANCE = 32, 512  # disentangled positions (GPT-BERT's)
ROTARY_BASE = 10000.0
# the name transformers passes the key/value cache by, and reads it from an output by: `cache` (5), `past_key_values` (4)
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def make_norm(config: MaskplayConfig, width: int | None = None) -> nn.Module:
    width = config.hidden_size if width is None else width
    kind = nn.RMSNorm if config.norm == "rmsnorm" else nn.LayerNorm
    return kind(width, eps=config.layer_norm_eps, elementwise_affine=config.norm_affine)


# ---- positions ------------------------------------------------------------------------------------------------


def sinusoid_table(length: int, width: int) -> Tensor:
    positions = torch.arange(length, dtype=torch.float64)[:, None]
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, width, 2, dtype=torch.float64) / width)
    angles = positions * inv_freq
    table = torch.zeros(length, width, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, :width // 2]
    return table.float()


def rotary_angles(positions: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """cos, sin (B, 1, L, width) of RoPE's angles (NeoX layout: dimension k pairs with k + width / 2)."""
    inv_freq = 1.0 / torch.pow(ROTARY_BASE, torch.arange(0, width, 2, device=positions.device,
                                                         dtype=torch.float32) / width)
    angles = positions.float()[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, None]
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def t5_bucket(relative: Tensor, bidirectional: bool) -> Tensor:
    bucket = torch.zeros_like(relative)
    n = T5_BUCKETS
    if bidirectional:
        n //= 2
        bucket = bucket + (relative > 0).long() * n
        distance = relative.abs()
    else:
        distance = (-relative).clamp_min(0)
    exact = n // 2
    large = exact + (torch.log(distance.clamp_min(1).float() / exact) / math.log(T5_MAX_DISTANCE / exact)
                     * (n - exact)).long()
    return bucket + torch.where(distance < exact, distance, large.clamp_max(n - 1))


def alibi_slopes(heads: int) -> Tensor:
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(heads).is_integer():
        slopes = power_of_two(heads)
    else:
        below = 2 ** math.floor(math.log2(heads))
        slopes = power_of_two(below) + power_of_two(2 * below)[0::2][:heads - below]
    return torch.tensor(slopes, dtype=torch.float32)


def log_bucket(relative: Tensor) -> Tensor:
    """DeBERTa's log-bucketed distance, as GPT-BERT computes it."""
    mid = REL_BUCKETS // 2
    distance = relative.abs().clamp(mid - 1, REL_MAX_DISTANCE - 1).double()
    large = torch.ceil(torch.log(distance / mid) / math.log((REL_MAX_DISTANCE - 1) / mid) * (mid - 1)).long() + mid
    return torch.where(relative.abs() <= mid, relative, large * relative.sign())


class T5Buckets(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        self.buckets = nn.Embedding(T5_BUCKETS, config.num_heads)


class Disentangled(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(2 * REL_BUCKETS - 1, config.hidden_size))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


# ---- masks ----------------------------------------------------------------------------------------------------


def segments_after_separator(input_ids: Tensor, separator: int) -> Tensor:
    is_sep = (input_ids == separator).long()
    return ((is_sep.cumsum(1) - is_sep) > 0).long()


def build_mask(kind: str, attention_mask: Tensor, segments: Tensor, past: int = 0) -> Tensor:
    """(B, 1, Lq, L) bool, True = may attend: the family's structure AND the padding (keys only). With `past`
    cached keys, the queries are the last Lq = L - past tokens (only the causal mask is read with a cache)."""
    L = attention_mask.shape[1]
    q = torch.arange(past, L, device=attention_mask.device)[:, None]
    kv = torch.arange(L, device=attention_mask.device)[None, :]
    if kind == "causal":
        structure = (kv <= q)[None]
    elif kind == "no_diagonal":
        structure = (q != kv)[None]
    elif kind == "prefix_lm":
        structure = (segments[:, None, :] == 0) | ((segments[:, :, None] == 1) & (kv <= q)[None])
    else:
        structure = torch.ones(1, L - past, L, dtype=torch.bool, device=attention_mask.device)
    return (structure & attention_mask.bool()[:, None, :])[:, None]


class PassPositions:
    """What every layer of one pass reads: the mask (bool, or float with a position bias folded in), the rows that
    may attend nothing (their output is zero), rotary tables, the disentangled table and its index, and the key/value
    cache with the index of the layer running (`positions` the queries', `key_positions` every key's: the cached
    ones and the queries')."""

    def __init__(self, encoder: Encoder, mask: Tensor, positions: Tensor, dtype: torch.dtype,
                 key_positions: Tensor | None = None, cache: Any = None) -> None:
        config = encoder.config
        keys = positions if key_positions is None else key_positions
        self.cache, self.layer = cache, 0
        dead = ~mask.any(dim=-1, keepdim=True)
        self.dead = dead if bool(dead.any()) else None
        mask = mask | dead if self.dead is not None else mask
        self.rotary = self.relative = self.index = None
        kind = config.positions
        if kind == "rotary":
            cos, sin = rotary_angles(positions, config.key_width)
            self.rotary = (cos.to(dtype), sin.to(dtype))
        elif kind in ("t5", "alibi"):
            relative = keys[:, None, :] - positions[:, :, None]  # key - query
            if kind == "alibi":
                bias = -alibi_slopes(config.num_heads).to(mask.device)[None, :, None, None] * relative.abs()[:, None].float()
            else:
                bias = encoder.positions.buckets(t5_bucket(relative, not config.causal_buckets)).permute(0, 3, 1, 2).float()
            mask = bias.to(dtype).masked_fill(~mask, float("-inf"))
        elif kind == "disentangled":
            self.relative = encoder.relative.norm(encoder.relative.table)
            distance = (positions[:, :, None] - keys[:, None, :]).clamp(-(REL_MAX_DISTANCE - 1), REL_MAX_DISTANCE - 1)
            self.index = log_bucket(distance) + REL_BUCKETS - 1
        self.mask = mask


# ---- the backbone ---------------------------------------------------------------------------------------------


class Embeddings(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        width = config.embedding_width
        self.config = config
        self.word = nn.Embedding(config.vocab_size, width)
        self.position = nn.Embedding(config.max_position, width) if config.positions == "learned" else None
        self.segment = nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size else None
        self.norm = make_norm(config, width)

    def forward(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        x = self.word(input_ids)
        if self.position is not None:
            x = x + self.position(positions)
        elif self.config.positions == "sinusoidal":
            config = self.config
            # the formula goes on past the trained length (learned positions have no such rows)
            length = max(config.max_position, int(positions.max()) + 1)
            table = sinusoid_table(length, config.embedding_width).to(x.device)
            x = x + (table * (config.initializer_range * math.sqrt(2)))[positions].to(x.dtype)
        if self.segment is not None:
            x = x + (self.segment.weight[0] if token_type_ids is None else self.segment(token_type_ids))
        return self.norm(x)


class Attention(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        h, bias, keys = config.hidden_size, config.attention_bias, config.num_heads * config.key_width
        self.heads = config.num_heads
        self.query = nn.Linear(h, keys, bias=bias)
        self.key = nn.Linear(h, keys, bias=bias)
        self.value = nn.Linear(h, h, bias=bias)
        self.out = nn.Linear(h, h, bias=bias)
        self.gate = nn.Linear(h, h, bias=bias) if config.value_gate else None
        self.out_norm = make_norm(config) if config.attention_output_norm else None

    def split(self, x: Tensor) -> Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def forward(self, h: Tensor, kv: Tensor | None, p: PassPositions) -> Tensor:
        """Queries from h; keys and values from h, or from kv (T-TA's embedding output)."""
        source = h if kv is None else kv
        q, k, v = (self.split(x) for x in (self.query(h), self.key(source), self.value(source)))
        if p.rotary is not None:
            cos, sin = p.rotary
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if p.cache is not None:  # this pass's keys and values after those of the tokens before it
            k, v = p.cache.update(k, v, p.layer)
        if p.relative is not None:
            a = self.disentangled(q, k, v, p)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=p.mask)
        if p.dead is not None:
            a = a.masked_fill(p.dead, 0.0)
        a = a.transpose(1, 2).reshape(h.shape[0], h.shape[1], -1)
        if self.gate is not None:
            a = a * F.gelu(self.gate(h))
        if self.out_norm is not None:
            a = self.out_norm(a)
        return self.out(a)

    def disentangled(self, q: Tensor, k: Tensor, v: Tensor, p: PassPositions) -> Tensor:
        table = p.relative.to(q.dtype)
        rows = table.shape[0]
        pos_q = self.query(table).view(rows, self.heads, -1).transpose(0, 1)
        pos_k = self.key(table).view(rows, self.heads, -1).transpose(0, 1)
        scale = (3 * q.shape[-1]) ** -0.5
        c2p, p2c = q @ pos_k.transpose(-1, -2), k @ pos_q.transpose(-1, -2)
        B, heads, Lq, _ = c2p.shape
        index = p.index[:, None].expand(B, heads, Lq, k.shape[2])
        bias = c2p.gather(-1, index) + p2c.gather(-1, index.transpose(-1, -2)).transpose(-1, -2)
        bias = bias.mul_(scale).masked_fill_(~p.mask, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


class FeedForward(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        self.gated = config.ffn != "gelu"
        width = config.ffn_width
        self.up = nn.Linear(config.hidden_size, 2 * width if self.gated else width, bias=config.ffn_bias)
        self.down = nn.Linear(width, config.hidden_size, bias=config.ffn_bias)
        self.inner_norm = make_norm(config, width) if config.ffn_inner_norm else None
        tanh = config.gelu_tanh and config.ffn in ("gelu", "geglu")
        self.act = F.silu if config.ffn == "swiglu" else (lambda x: F.gelu(x, approximate="tanh" if tanh else "none"))

    def forward(self, h: Tensor) -> Tensor:
        if self.gated:
            gate, value = self.up(h).chunk(2, dim=-1)
            x = self.act(gate) * value
        else:
            x = self.act(self.up(h))
        return self.down(x if self.inner_norm is None else self.inner_norm(x))


class Block(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        self.attn, self.attn_norm = Attention(config), make_norm(config)
        self.ffn, self.ffn_norm = FeedForward(config), make_norm(config)
        self.pre_norm = config.norm_placement == "pre"
        self.alpha = (2 * config.num_layers) ** 0.25 if config.norm_placement == "deepnorm" else 1.0

    def attend(self, h: Tensor, kv: Tensor | None, p: PassPositions) -> Tensor:
        if self.pre_norm:
            return h + self.attn(self.attn_norm(h), kv, p)
        return self.attn_norm((h if self.alpha == 1.0 else h * self.alpha) + self.attn(h, kv, p))

    def feed_forward(self, h: Tensor) -> Tensor:
        if self.pre_norm:
            return h + self.ffn(self.ffn_norm(h))
        return self.ffn_norm((h if self.alpha == 1.0 else h * self.alpha) + self.ffn(h))


class DepthWeights(nn.Module):
    """DenseFormer's weighted sums of the embedding output and every sub-layer output so far."""

    def __init__(self, sublayers: int) -> None:
        super().__init__()
        self.alphas = nn.ParameterList(nn.Parameter(torch.zeros(n + 2)) for n in range(sublayers))

    def forward(self, states: list[Tensor], n: int) -> Tensor:
        alpha = self.alphas[n].to(states[-1].dtype)
        x = states[-1] * alpha[-1]
        for j in range(len(states) - 1):
            x = torch.addcmul(x, states[j], alpha[j])
        return x


class Encoder(nn.Module):
    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(Block(config) for _ in range(1 if config.share_layers else config.num_layers))
        self.final_norm = make_norm(config) if config.norm_placement == "pre" else None
        self.positions = T5Buckets(config) if config.positions == "t5" else None
        self.relative = Disentangled(config) if config.positions == "disentangled" else None
        self.dense = DepthWeights(2 * config.num_layers) if config.denseformer else None

    def forward(self, h: Tensor, kv: Tensor | None, p: PassPositions) -> tuple[Tensor, list[Tensor]]:
        states, outputs = [h], [h]
        for index in range(self.config.num_layers):
            layer = self.layers[0 if self.config.share_layers else index]
            p.layer = index  # the cache's slot: a shared layer has one per use
            if self.dense is None:
                h = layer.feed_forward(layer.attend(h, kv, p))
            else:
                outputs.append(layer.attend(h, kv, p))
                h = self.dense(outputs, 2 * index)
                outputs.append(layer.feed_forward(h))
                h = self.dense(outputs, 2 * index + 1)
            states.append(h)
        if self.final_norm is not None:
            h = states[-1] = self.final_norm(h)
        return h, states


class LMHead(nn.Module):
    """BERT's masked-LM head: (norm) -> dense -> GELU -> LayerNorm -> the word embeddings (tied) + bias."""

    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)
        self.norm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps, elementwise_affine=config.norm_affine)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.pre_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                     elementwise_affine=config.norm_affine) if config.head_norm else None

    def forward(self, hidden: Tensor, word: Tensor) -> Tensor:
        if self.pre_norm is not None:
            hidden = self.pre_norm(hidden)
        return F.linear(self.norm(F.gelu(self.dense(hidden))), word, self.bias)


# ---- transformers' classes ------------------------------------------------------------------------------------


class MaskplayPreTrainedModel(PreTrainedModel):
    config_class = MaskplayConfig
    base_model_prefix = "maskplay"
    _no_split_modules = ["Block"]

    def _init_weights(self, module: nn.Module) -> None:
        """Only for weights a checkpoint lacks (none, in an export): BERT's normal(initializer_range)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)


class MaskplayModel(MaskplayPreTrainedModel):
    """The backbone (AutoModel): the hidden states under the family's own mask (`config.mask`), as `maskplay embed`
    reads them."""

    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__(config)
        self.embeddings = Embeddings(config)
        width = config.embedding_width
        self.embeddings_project = nn.Linear(width, config.hidden_size) if width != config.hidden_size else None
        self.encoder = Encoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.word

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word = value

    def embed(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor | None) -> Tensor:
        x = self.embeddings(input_ids, positions, token_type_ids)
        return x if self.embeddings_project is None else self.embeddings_project(x)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
               mask_kind: str | None = None, cache: Any = None) -> tuple[Tensor, list[Tensor]]:
        """(last hidden state, hidden states) under `mask_kind` (default config.mask). Positions count from each
        row's first real token, so left padding (batched generation) reads as maskplay's key/value cache does. With
        `cache` (a causal mask only), input_ids are the tokens after the cached ones and attention_mask covers both.
        A 3-D attention_mask (B, Lq, L) (BabyLM's fine-tuning with --causal passes one) narrows the family's mask."""
        config = self.config
        given = None
        if attention_mask is not None and attention_mask.dim() == 3:
            given = attention_mask.bool()
            attention_mask = given.any(dim=1)  # the keys some query may see: the padding
        past = 0 if cache is None else cache.get_seq_length()
        length = past + input_ids.shape[1]
        if length > config.max_position and config.positions == "learned":
            raise ValueError(f"sequence length {length} exceeds the model's {config.max_position} learned "
                             "positions (a learned table has no row past them; truncate the input)")
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape[0], length, dtype=torch.long, device=input_ids.device)
        attention_mask = attention_mask.bool()
        key_positions = (attention_mask.long().cumsum(1) - 1).clamp_min(0)
        positions = key_positions[:, past:]
        segments = torch.zeros_like(input_ids)
        if config.segments == "after_separator":
            segments = segments_after_separator(input_ids, config.separator_id) if token_type_ids is None else token_type_ids
            token_type_ids = segments if config.type_vocab_size >= 2 else None
        elif config.segments == "none":
            token_type_ids = None
        kind = mask_kind or config.mask
        x = self.embed(input_ids, positions, token_type_ids)
        kv = None
        if config.query_stream:  # T-TA: queries from [MASK] + position, keys and values from the embedding output
            kv = x
            query_ids = torch.where(attention_mask, config.mask_token_id, config.pad_token_id)
            x = self.embed(query_ids, positions, None)
        mask = build_mask(kind, attention_mask, segments, past)
        if given is not None:
            mask = mask & given[:, None]
        p = PassPositions(self.encoder, mask, positions, x.dtype, key_positions, cache)
        return self.encoder(x, kv, p)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                **kwargs) -> BaseModelOutput | tuple:
        hidden, states = self.encode(input_ids, attention_mask, token_type_ids)
        if self.config.pool_frame_as_mean:
            hidden = frame_as_mean(hidden, attention_mask, input_ids)
        states = tuple(states) if output_hidden_states else None
        if return_dict is False:
            return (hidden,) if states is None else (hidden, states)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=states)


def frame_as_mean(hidden: Tensor, attention_mask: Tensor | None, input_ids: Tensor) -> Tensor:
    """The outputs at each row's first and last real token replaced by the mean of those between them: a mean over
    every token (sentence-transformers' mean pooling) is then the mean over the pieces, maskplay's."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    first, last = real.long().argmax(1), real.shape[1] - 1 - real.long().flip(1).argmax(1)
    inner = real.clone()
    inner[rows, first] = False
    inner[rows, last] = False
    weights = inner.to(hidden.dtype)[..., None]
    mean = (hidden * weights).sum(1) / weights.sum(1)
    hidden = hidden.clone()
    hidden[rows, first] = mean
    hidden[rows, last] = mean
    return hidden


class MaskplayForMaskedLM(MaskplayPreTrainedModel):
    """The head's logits at every position under the family's mask (`config.mask`): T-TA's one-pass prediction of
    every token, BERT's and UniLM's masked-LM predictions, GPT-BERT's masked mode (the output at k predicts token
    k + 1, as MNTP trains it)."""

    def __init__(self, config: MaskplayConfig) -> None:
        super().__init__(config)
        self.maskplay = MaskplayModel(config)
        self.head = LMHead(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.maskplay.embeddings.word

    def logits_under(self, kind: str | None, input_ids: Tensor, attention_mask: Tensor | None,
                     token_type_ids: Tensor | None, cache: Any = None) -> tuple[Tensor, list[Tensor]]:
        hidden, states = self.maskplay.encode(input_ids, attention_mask, token_type_ids, kind, cache)
        return self.head(hidden, self.maskplay.embeddings.word.weight), states

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, **kwargs) -> MaskedLMOutput | tuple:
        logits, states = self.logits_under(None, input_ids, attention_mask, token_type_ids)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1), ignore_index=-100)
        states = tuple(states) if output_hidden_states else None
        if return_dict is False:
            return tuple(x for x in (loss, logits, states) if x is not None)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=states)


class MaskplayForCausalLM(MaskplayForMaskedLM, GenerationMixin):
    """Left to right (`config.causal_mask`): GPT, GPT-BERT's causal mode, UniLM's seq2seq mask (a prompt
    `[SOS] source [SEP]`, generated tokens the target). With a causal mask, generate() keeps a key/value cache
    (each step runs the new token alone); UniLM's seq2seq mask recomputes the sequence at every step."""

    _supports_cache_class = True  # transformers 4: generate() makes a DynamicCache

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, cache: Any = None, past_key_values: Any = None,
                use_cache: bool | None = None, **kwargs) -> CausalLMOutputWithPast | tuple:
        """`cache` (or `past_key_values`): a transformers Cache holding the keys and values of the tokens before
        input_ids (attention_mask then covers those and input_ids); use_cache=True starts one."""
        store = cache if cache is not None else past_key_values
        if self.config.causal_mask != "causal":
            store = None  # the seq2seq mask's segments come from the whole sequence: recomputed at every step
        elif store is None and use_cache:
            store = DynamicCache()
        logits, states = self.logits_under(self.config.causal_mask, input_ids, attention_mask, token_type_ids, store)
        loss = None
        if labels is not None:
            shifted = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
            loss = F.cross_entropy(shifted, labels[:, 1:].reshape(-1), ignore_index=-100)
        states = tuple(states) if output_hidden_states else None
        if return_dict is False:
            return tuple(x for x in (loss, logits, store, states) if x is not None)
        return CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=states, **{CACHE: store})

    def prepare_inputs_for_generation(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                                      cache: Any = None, past_key_values: Any = None,
                                      **kwargs) -> dict[str, Any]:
        """The tokens the cache does not hold yet (with a causal mask; else the whole sequence)."""
        store = cache if cache is not None else past_key_values
        inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if store is not None and self.config.causal_mask == "causal":
            inputs["input_ids"] = input_ids[:, store.get_seq_length():]
            inputs[CACHE] = store
        return inputs
