"""Typed model configuration, presets, and TOML loading with command-line overrides."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tomllib

from .registry import family_names, family_sections, rules

POSITION_SCHEMES = ("learned", "sinusoidal", "rotary", "t5", "alibi", "none", "transformer-xl",
                    "disentangled")  # positions.py
NORMS = ("layernorm", "rmsnorm")  # norms.py
NORM_PLACEMENTS = ("post", "pre", "deepnorm")
FFNS = ("gelu", "geglu", "swiglu", "relu")  # feedforward.py
UNGATED = ("gelu", "relu")  # two matrices; the others gate (three)
ATTENTION_KINDS = ("dot", "synthesizer-random", "synthesizer-dense", "lsra")  # attention/variants.py, attention/lsra.py
# modeling.py; "truncated-depth-scaled" was called "gpt-bert" (the name of the family whose paper uses it), a name
# still read, with a warning (renamed values: renamed_values)
WEIGHT_INITS = ("bert", "truncated-depth-scaled")
LM_HEADS = ("mlm", "tied", "untied")  # heads.py


def _switch(default: Any = dataclasses.MISSING, *, group: str = "architecture", quiet: bool | None = None,
            renamed: dict[str, str] | None = None, default_factory: Any = dataclasses.MISSING) -> Any:
    """A ModelConfig field that changes the architecture away from BERT's (docs/guides/switches.md): the switch lists
    below are read from this metadata. group: the switches that came together (gpt-bert: Charpentier & Samuel
    2024's; hf-masked and causal-lm: what HuggingFace's masked and causal LMs need); quiet: config.json leaves it
    out at its default, so that it reads as it did before the switch existed (every group but the first's);
    renamed: old values still read, each mapped to its new name with a warning."""
    metadata = {"switch": group, "quiet": group != "architecture" if quiet is None else quiet,
                "renamed": renamed or {}}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class LongAttentionConfig:
    """Long-text attention (docs/guides/long-text.md, attention/long_attention.py), for every single-stream family: a
    Longformer window with global tokens, or a learned span per head (adaptive span). All off by default."""

    window: int | None = None  # Longformer's sliding window: w keys on each side (GPT, causal, sees w to the left)
    dilation: int = 1  # Longformer's dilated window: keys i +- k * dilation for k <= window
    global_tokens: int = 0  # the first N positions ([SOS]/[CLS]) see every key and are seen by every query
    adaptive_span: bool = False  # Sukhbaatar et al. 2019: a soft span learned per layer and head
    max_span: int = 1024  # adaptive span: the largest span z
    span_ramp: int = 32  # adaptive span: R, the width of the soft mask's ramp
    span_penalty: float = 2e-6  # adaptive span: the L1 coefficient on the spans (tokens), summed over layers
    span_init: float = 0.0  # adaptive span: the spans' start, a fraction of max_span (the official code's 0)
    banded_from: int = 1024  # sequences of at least this many tokens run through the banded kernel; shorter: SDPA

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 1:
            raise ValueError(f"long.window must be >= 1 (keys on each side) or left out, got {self.window}")
        if self.dilation < 1 or (self.dilation > 1 and self.window is None):
            raise ValueError(f"long.dilation must be >= 1 and needs long.window, got {self.dilation}")
        if self.global_tokens < 0 or (self.global_tokens and self.window is None):
            raise ValueError(f"long.global_tokens must be >= 0 and needs long.window, got {self.global_tokens}")
        if self.adaptive_span and self.window is not None:
            raise ValueError("long.adaptive_span learns its own window: not with long.window")
        if not 0 <= self.span_init <= 1:
            raise ValueError(f"long.span_init is a fraction of long.max_span, in [0, 1], got {self.span_init}")
        if min(self.max_span, self.span_ramp, self.banded_from) < 1 or not self.span_penalty >= 0:
            raise ValueError("long.max_span, long.span_ramp and long.banded_from must be >= 1 and long.span_penalty "
                             f">= 0, got {self.max_span}, {self.span_ramp}, {self.banded_from}, {self.span_penalty}")

    @property
    def enabled(self) -> bool:
        return self.window is not None or self.adaptive_span


class FamilySections:
    """A config dataclass with a `sections` field: the families' own config sections (each family's `settings`,
    registry.family_sections), by TOML name. Each reads as if it were a field - config.electra, Config(electra=...)
    (sections_as_keywords), from_dict, apply_overrides and as_dict - so that files keep their [model.electra]
    tables while the core names no family's section."""

    sections: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        sections = self.__dict__.get("sections")  # absent while copy/pickle rebuild the object
        if sections is not None and name in sections:
            return sections[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _fill_sections(self, source: str = "config") -> None:
        """Every registered family's section: the one given (a dict is read into it), else its defaults."""
        known = family_sections()
        taken = sorted(set(known) & {f.name for f in dataclasses.fields(self)})  # type: ignore[arg-type]
        if taken:
            raise ValueError(f"a family's section may not take the name of a {type(self).__name__} field: {taken}")
        unknown = sorted(set(self.sections) - set(known))
        if unknown:
            raise ValueError(f"{source}: unknown section(s) {unknown}; the families' sections: {sorted(known)}")
        self.sections = {name: _section(cls, self.sections.get(name), f"{source}.{name}")
                         for name, cls in known.items()}


def _section(cls: type, value: Any, source: str) -> Any:
    if value is None:
        return cls()
    if isinstance(value, dict):
        return from_dict(cls, value, source=source)
    if not isinstance(value, cls):
        raise ValueError(f"{source}: expected a table of {cls.__name__} fields, got {type(value).__name__}")
    return value


C = TypeVar("C")


def sections_as_keywords(cls: type[C]) -> type[C]:
    """Let the dataclass `cls` take each family's section as a keyword of its own (ModelConfig(electra=...),
    dataclasses.replace(config, xlnet=...)), into its `sections`."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, sections: dict[str, Any] | None = None, **kwargs: Any) -> None:
        named = family_sections()
        own = {name: kwargs.pop(name) for name in list(kwargs) if name in named}
        init(self, *args, sections={**(sections or {}), **own}, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def __getattr__(name: str) -> Any:
    """The families' section classes (ElectraConfig, ...) lived here before they moved next to their families:
    `from maskplay.config import ElectraConfig` still finds them, with a warning naming the new place."""
    if name.startswith("__"):  # the import system's probes (__path__ on every `from maskplay.config import ...`)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")  # must not load the families
    for cls in family_sections().values():
        if cls.__name__ == name:
            warnings.warn(f"maskplay.config.{name} has moved to {cls.__module__}.{name}", DeprecationWarning,
                          stacklevel=2)
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def renamed_values(obj: Any) -> None:
    """Old values of renamed switches (field metadata "renamed") mapped to their new names, with a warning."""
    for f in dataclasses.fields(obj):
        old = getattr(obj, f.name)
        new = f.metadata.get("renamed", {}).get(old) if isinstance(old, str) else None
        if new is not None:
            warnings.warn(f"{f.name} = {old!r} is now called {new!r}; the old name will stop being read",
                          FutureWarning, stacklevel=4)
            setattr(obj, f.name, new)


@sections_as_keywords
@dataclass
class ModelConfig(FamilySections):
    """Everything needed to build one model. Special token ids follow maskplay's vocabulary layout
    ([PAD]=0 [EOS]=1 [UNK]=2 [SOS]=3 [MASK]=4 [CLS]=5 [SEP]=6), the layout of the T-TA paper's vocabulary."""

    family: str = "tta"
    vocab_size: int = 29530
    hidden_size: int = 512
    num_layers: int = 3
    num_heads: int = 8
    intermediate_size: int = 2048
    max_position: int = 128
    type_vocab_size: int = 0  # 0 = no segment embedding
    # width of the embedding tables; None = hidden_size. When it differs, a linear projection maps the embeddings
    # to the hidden size and the LM head maps back (HuggingFace ELECTRA's embedding_size, ALBERT's factorisation)
    embedding_size: int | None = None
    # where positions come from (positions.py, docs/guides/switches.md): learned | sinusoidal | rotary | t5 | alibi |
    # none | transformer-xl; None = the family's own: "transformer-xl" for xlnet, else "learned"
    positions: str | None = _switch(None)
    # biases on the attention's query/key/value/output projections; None = the family's own (XLNet has none)
    attention_bias: bool | None = None
    # query/key width per head, decoupled from the value width hidden_size / num_heads (Bhojanapalli et al. 2020);
    # None = hidden_size / num_heads
    key_size: int | None = _switch(None)
    # talking-heads attention (Shazeer et al. 2020): learned head mixing before and after the softmax
    talking_heads: bool = _switch(False)
    # the backbone's norm (layernorm | rmsnorm) and where it sits (post: BERT's | pre | deepnorm); norms.py
    norm: str = _switch("layernorm")
    norm_placement: str = _switch("post")
    # the feed-forward layer: gelu (BERT's) | geglu | swiglu (hidden width 2/3 of intermediate_size: ffn_width);
    # ffn_bias: biases on its linear layers
    ffn: str = _switch("gelu")
    ffn_bias: bool = _switch(True)
    # ALBERT's cross-layer sharing: one block's weights in every layer (embedding_size is its other half)
    share_layers: bool = _switch(False)
    # what makes the attention logits: dot (q . k) | synthesizer-random | synthesizer-dense (attention/variants.py)
    # | lsra: Lite Transformer's long-short range attention, half the channels through a convolution (attention/lsra.py)
    attention: str = _switch("dot")
    lsra_kernel: int = 7  # the convolution's kernel size (odd; centred on the query), read by attention = "lsra" only
    # GPT-BERT's architecture (Charpentier & Samuel 2024; docs/guides/switches.md), each off by default. norm_affine = false:
    # every norm of the backbone and the LM head without a learned gain and bias (elementwise_affine=False)
    norm_affine: bool = _switch(True, group="gpt-bert")
    # a norm on the attention output before its output projection
    attention_output_norm: bool = _switch(False, group="gpt-bert")
    # a norm inside the feed-forward, after the (gated) activation (NormFormer's)
    ffn_inner_norm: bool = _switch(False, group="gpt-bert")
    # the feed-forward's GELU in its tanh approximation (GPT-2's, GPT-BERT's GEGLU)
    gelu_tanh: bool = _switch(False, group="gpt-bert")
    # attention output x GELU(gate), the gate a second projection of the queries' stream
    value_gate: bool = _switch(False, group="gpt-bert")
    # DenseFormer: after every sub-layer, x = a weighted sum of the embedding output and every sub-layer output so
    # far, the weights learned, starting at the identity (the plain residual stream)
    denseformer: bool = _switch(False, group="gpt-bert")
    # a norm in front of the LM head's dense layer (GPT-BERT's head: norm, dense, GELU, norm)
    head_norm: bool = _switch(False, group="gpt-bert")
    # RevNet's reversible residual (Reformer's; backbone.Encoder): two halves, y1 = x1 + Attn(x2), y2 = x2 + FFN(y1),
    # the output their mean; training recomputes each block in the backward pass instead of keeping its activations
    reversible: bool = _switch(False, quiet=True)
    # bert: normal(initializer_range); truncated-depth-scaled (GPT-BERT's): truncated normal, std sqrt(2 / (5 hidden))
    # at +-2 std, the feed-forward weights of layer i scaled by sqrt(1 / (2 (i + 1)))
    weight_init: str = _switch("bert", group="gpt-bert", renamed={"gpt-bert": "truncated-depth-scaled"})
    # ---- HuggingFace masked LMs' switches (docs/guides/switches.md). head_gelu_tanh: the LM head's GELU in its tanh
    # approximation (ALBERT's and any HuggingFace hidden_act = "gelu_new" model's head; gelu_tanh is the feed-forward's)
    head_gelu_tanh: bool = _switch(False, group="hf-masked")
    # positions = "disentangled": the relative buckets (2 x relative_buckets - 1 table rows) and the distance the
    # log buckets reach (GPT-BERT's 32 and 512; DeBERTa-v3's position_buckets 256 and max_relative_positions 512)
    relative_buckets: int = _switch(32, group="hf-masked")
    relative_max_distance: int = _switch(512, group="hf-masked")
    # HuggingFace causal LMs' switches (docs/guides/switches.md), each off by default. num_kv_heads: grouped-query attention,
    # that many key/value heads shared by num_heads / num_kv_heads query heads each (None: one per query head)
    num_kv_heads: int | None = _switch(None, group="causal-lm")
    # GPT-NeoX: h + Attn(norm1(h)) + FFN(norm2(h)), one residual (pre-norm only)
    parallel_residual: bool = _switch(False, group="causal-lm")
    # positions = "rotary": the share of each head's query/key width rotated (rotary_pct)
    rotary_fraction: float = _switch(1.0, group="causal-lm")
    rotary_base: float = _switch(10000.0, group="causal-lm")  # positions = "rotary": RoPE's base (LLaMA's rope_theta)
    # the norm after the embeddings (BERT's); GPT-2, GPT-NeoX, LLaMA and OPT have none
    embedding_norm: bool = _switch(True, group="causal-lm")
    # the LM head: mlm (BERT's: Dense, GELU, LayerNorm, tied decoder + bias) | tied (h E^T) | untied (h W^T, W its own)
    lm_head: str = _switch("mlm", group="causal-lm")
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    # masked-LM families (bert, unilm): the share of real tokens selected for prediction (BERT's 0.15; Wettig et
    # al. 2023, "Should you mask 15 %?", find 0.4 better; Cramming uses 0.25). Training only: scoring is unchanged
    mask_probability: float = 0.15
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    eos_token_id: int = 1
    unk_token_id: int = 2
    sos_token_id: int = 3
    mask_token_id: int = 4
    sep_token_id: int | None = None  # between source and target (UniLM, seq2seq data); None = eos_token_id
    special_token_ids: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4, 5, 6])
    # the families' own sections ([model.electra], ...: each family's `settings`, declared in its file), by their
    # TOML names; config.electra reads one and ModelConfig(electra=...) sets one, as if each were a field
    sections: dict[str, Any] = field(default_factory=dict)
    # [model.long]: long-text attention
    long: LongAttentionConfig = _switch(default_factory=LongAttentionConfig, quiet=True)

    def __post_init__(self) -> None:
        self._fill_sections()
        renamed_values(self)
        family = rules(self.family)
        xl = family.two_streams
        if self.positions is None:
            self.positions = "transformer-xl" if xl else "learned"
        if self.attention_bias is None:
            self.attention_bias = not xl
        if self.positions not in POSITION_SCHEMES:
            raise ValueError(f"positions must be one of {POSITION_SCHEMES}, got {self.positions!r}")
        if xl and self.positions != "transformer-xl":
            raise ValueError(f"family {self.family} needs positions = 'transformer-xl' (its two streams have no "
                             f"absolute positions), got {self.positions!r}")
        if not xl and self.positions == "transformer-xl" and not family.xl_positions:
            takers = " / ".join(n for n in family_names() if rules(n).two_streams or rules(n).xl_positions)
            raise ValueError(f"positions = 'transformer-xl' is built for family {takers} only so far, not "
                             f"{self.family!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(f"norm_placement must be one of {NORM_PLACEMENTS}, got {self.norm_placement!r}")
        if self.ffn not in FFNS:
            raise ValueError(f"ffn must be one of {FFNS}, got {self.ffn!r}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        if self.attention == "lsra":
            if xl:
                raise ValueError(f"attention = 'lsra' is built for the single-stream families, not family {self.family}")
            if self.positions == "transformer-xl":
                raise ValueError("attention = 'lsra' is not built with positions = 'transformer-xl' (its convolution "
                                 "branch has no relative-position term)")
            if self.head_dim % 2:
                raise ValueError(f"attention = 'lsra' splits every head's channels in two: hidden_size / num_heads "
                                 f"must be even, got {self.head_dim}")
        if not 0 < self.mask_probability < 1:
            raise ValueError(f"mask_probability must be in (0, 1), got {self.mask_probability}")
        self._check_gpt_bert_switches(xl)
        self._check_reversible(xl)
        self._check_relative_buckets()
        check_causal_lm_switches(self, xl)
        if self.lsra_kernel < 1 or self.lsra_kernel % 2 == 0:
            raise ValueError(f"lsra_kernel must be an odd kernel size >= 1 (centred on the query), got {self.lsra_kernel}")
        if self.attention not in ("dot", "lsra"):
            clash = [name for name, on in ((f"family {self.family}", xl),
                                           ("positions = 'rotary'", self.positions == "rotary"),
                                           ("positions = 'transformer-xl'", self.positions == "transformer-xl"),
                                           ("talking_heads", self.talking_heads), ("key_size", self.key_size))
                     if on]
            if clash:
                raise ValueError(f"attention = {self.attention!r} has no queries and keys: not with {clash[0]}")
        long_clash = [n for n, on in ((f"family {self.family}", xl),
                                      ("positions = 'transformer-xl'", self.positions == "transformer-xl"),
                                      (f"attention = {self.attention!r}", self.attention != "dot"),
                                      ("talking_heads", self.talking_heads)) if on and self.long.enabled]
        if long_clash:
            raise ValueError(f"long-text attention (model.long) needs q . k attention on one stream: not {long_clash[0]}")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.key_size is not None and self.key_size <= 0:
            raise ValueError(f"key_size must be positive (or left out: hidden_size / num_heads), got {self.key_size}")
        if self.positions == "rotary" and self.key_width % 2:
            raise ValueError(f"positions = 'rotary' rotates pairs of dimensions: the query/key width per head must "
                             f"be even, got {self.key_width}")
        if self.embedding_size is not None and self.embedding_size <= 0:
            raise ValueError(f"embedding_size must be positive (or left out: the hidden size), got {self.embedding_size}")
        family.check_config(self)  # what the family alone decides
        for name in ("pad_token_id", "eos_token_id", "unk_token_id", "sos_token_id", "mask_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary of size {self.vocab_size}")

    def _check_gpt_bert_switches(self, xl: bool) -> None:
        """The combinations GPT-BERT's switches refuse, each a one-line error."""
        if self.weight_init not in WEIGHT_INITS:
            raise ValueError(f"weight_init must be one of {WEIGHT_INITS}, got {self.weight_init!r}")
        if self.denseformer and xl:
            raise ValueError(f"denseformer weighs the sub-layer outputs of one stream: not family {self.family} (its "
                             "two-stream loop runs the blocks itself)")
        if self.head_norm and self.norm_placement == "pre":
            raise ValueError("head_norm with norm_placement = 'pre' normalises twice: the encoder's final norm is "
                             "already the norm in front of the head")
        lsra = [n for n in ("value_gate", "attention_output_norm") if getattr(self, n)]
        if lsra and self.attention == "lsra":
            raise ValueError(f"{lsra[0]} acts on the attention output: not with attention = 'lsra' (its convolution "
                             "half has its own output)")
        if self.positions == "disentangled":
            clash = [name for name, on in ((f"attention = {self.attention!r}", self.attention != "dot"),
                                           ("talking_heads", self.talking_heads), ("model.long", self.long.enabled))
                     if on]
            if clash:
                raise ValueError(f"positions = 'disentangled' runs its own scores on q . k attention: not with {clash[0]}")

    def _check_reversible(self, xl: bool) -> None:
        """reversible = true needs additive residuals on one stream (docs/guides/switches.md, "Reversible layers")."""
        if not self.reversible:
            return
        clash = [name for name, on in ((f"family {self.family} (its two streams run the blocks in its own loop)", xl),
                                       (f"norm_placement = {self.norm_placement!r} (a norm after the residual "
                                        "cannot be inverted; use 'pre')", self.norm_placement != "pre"),
                                       ("denseformer (it reads every sub-layer's output)", self.denseformer))
                 if on]
        if clash:
            raise ValueError(f"reversible = true rebuilds each block's input from its output: not with {clash[0]}")

    def _check_relative_buckets(self) -> None:
        """relative_buckets / relative_max_distance must make log buckets (docs/guides/switches.md)."""
        mid = self.relative_buckets // 2
        if self.relative_buckets < 2 or self.relative_max_distance - 1 <= mid:
            raise ValueError(f"relative_buckets ({self.relative_buckets}) must be >= 2 and relative_max_distance "
                             f"({self.relative_max_distance}) above relative_buckets / 2 + 1: the log buckets "
                             "span the distances between the two")

    def architecture_changes(self) -> list[str]:
        """The architecture switches (docs/guides/switches.md) set away from the family's own, as "name = value":
        what a converter to another library's architecture must refuse."""
        own = ModelConfig(family=self.family)
        return [f"{name} = {getattr(self, name)!r}" for name in ARCHITECTURE_SWITCHES
                if getattr(self, name) != getattr(own, name)]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def ffn_width(self) -> int:
        """The feed-forward hidden width: intermediate_size, or 2/3 of it for a gated layer (three matrices
        instead of two, the same parameters)."""
        return self.intermediate_size if self.ffn in UNGATED else max(1, round(2 * self.intermediate_size / 3))

    @property
    def key_width(self) -> int:
        """The query/key width per head: key_size, or the value width hidden_size / num_heads (half that under
        attention = "lsra", whose heads attend with half their channels)."""
        if self.key_size is not None:
            return self.key_size
        return self.head_dim // 2 if self.attention == "lsra" else self.head_dim

    @property
    def kv_heads(self) -> int:
        """The key/value heads: num_kv_heads, or one per query head."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def rotary_width(self) -> int:
        """The query/key dimensions per head that rotary rotates (GPT-NeoX's rotary_ndims)."""
        return int(self.key_width * self.rotary_fraction)

    @property
    def separator_id(self) -> int:
        return self.sep_token_id if self.sep_token_id is not None else self.eos_token_id

    @property
    def embedding_width(self) -> int:
        return self.embedding_size if self.embedding_size is not None else self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        """config.json: every field and family section, less the quiet switches at their defaults (so that it
        reads as it did before they existed)."""
        data = as_dict(self)
        for name, default in QUIET_SWITCHES.items():
            if getattr(self, name) == default:
                del data[name]
        return data

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> ModelConfig:
        return from_dict(cls, json.loads(Path(path).read_text()), source=str(path))


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def switches(group: str | None = None) -> dict[str, Any]:
    """The architecture switches (ModelConfig's fields made with _switch; one group's where given) and their
    defaults, in field order."""
    return {f.name: _default(f) for f in dataclasses.fields(ModelConfig)
            if "switch" in f.metadata and group in (None, f.metadata["switch"])}


ARCHITECTURE_SWITCHES = tuple(switches())
GPT_BERT_SWITCHES = switches("gpt-bert")  # Charpentier & Samuel 2024's (docs/guides/switches.md)
HF_MASKED_SWITCHES = switches("hf-masked")  # ALBERT's tanh GELU head, DeBERTa-v3's relative buckets
CAUSAL_LM_SWITCHES = switches("causal-lm")  # GPT-2, GPT-NeoX, LLaMA, Qwen2, OPT
# config.json leaves these out at their defaults (every group but the plain architecture's; reversible; long)
QUIET_SWITCHES = {f.name: _default(f) for f in dataclasses.fields(ModelConfig) if f.metadata.get("quiet")}


# Architectures only; the vocabulary size comes from the tokenizer a model is trained with.
PRESETS: dict[str, dict[str, Any]] = {
    # The released T-TA model (joongbo/tta config.layer-3.vocab-lower.sub-32k.json).
    "tta-paper": dict(hidden_size=512, num_layers=3, num_heads=8, intermediate_size=2048, max_position=128,
                      vocab_size=29530),
    # Small enough to pretrain on a 2-core CPU.
    "mini": dict(hidden_size=256, num_layers=3, num_heads=4, intermediate_size=1024, max_position=128,
                 vocab_size=16384),
    # GPT-BERT's small model (Charpentier & Samuel 2024, configs/small.json: 12 x 384, 6 heads, a GEGLU of width
    # 1,280, 8,192 pieces, 512 positions; ~30 M parameters). intermediate_size 1,920: a gated feed-forward's width is
    # 2/3 of it (ModelConfig.ffn_width), the authors' 1,280; a GELU one of 1,920 has the same parameters. The
    # architecture switches stay off here: the gpt-bert family sets them
    "gpt-bert-small": dict(hidden_size=384, num_layers=12, num_heads=6, intermediate_size=1920, max_position=512,
                           vocab_size=8192),
    # For tests.
    "tiny": dict(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64,
                 vocab_size=100),
}


def check_causal_lm_switches(config: ModelConfig, xl: bool) -> None:
    """The combinations the causal-LM switches refuse, each a one-line error."""
    if config.lm_head not in LM_HEADS:
        raise ValueError(f"lm_head must be one of {LM_HEADS}, got {config.lm_head!r}")
    changed = [name for name, default in CAUSAL_LM_SWITCHES.items() if getattr(config, name) != default]
    if xl and changed:
        raise ValueError(f"{changed[0]} is built for the single-stream families, not family {config.family}")
    kv = config.num_kv_heads
    if kv is not None:
        if kv < 1 or config.num_heads % kv:
            raise ValueError(f"num_kv_heads must divide num_heads ({config.num_heads}), got {kv}")
        clash = [n for n, on in ((f"attention = {config.attention!r}", config.attention != "dot"),
                                 ("positions = 'disentangled'", config.positions == "disentangled")) if on]
        if clash:
            raise ValueError(f"num_kv_heads (grouped-query attention) needs q . k attention: not with {clash[0]}")
    if config.parallel_residual and (config.norm_placement != "pre" or config.denseformer):
        raise ValueError("parallel_residual sums both sub-layers on one pre-norm residual: it needs "
                         "norm_placement = 'pre' and not denseformer")
    if (config.rotary_fraction != 1.0 or config.rotary_base != 10000.0) and config.positions != "rotary":
        raise ValueError(f"rotary_fraction and rotary_base need positions = 'rotary', got {config.positions!r}")
    if not (0 < config.rotary_fraction <= 1 and config.rotary_base > 0 and math.isfinite(config.rotary_base)):
        raise ValueError(f"rotary_fraction must be in (0, 1] and rotary_base a finite number > 0, got "
                         f"{config.rotary_fraction} and {config.rotary_base}")
    if config.rotary_fraction != 1.0 and (config.rotary_width < 2 or config.rotary_width % 2):
        raise ValueError(f"rotary_fraction {config.rotary_fraction} rotates {config.rotary_width} of the "
                         f"{config.key_width} query/key dimensions per head: it must be an even number >= 2")
    if config.lm_head != "mlm" and (config.head_norm or config.embedding_width != config.hidden_size):
        raise ValueError(f"lm_head = {config.lm_head!r} reads the last hidden state as it is: not with head_norm or "
                         "an embedding_size other than hidden_size")



def preset(name: str, family: str = "tta", **overrides: Any) -> ModelConfig:
    """Build the config of preset `name` for `family`; any field can be overridden."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return ModelConfig(family=family, **{**PRESETS[name], **overrides})


T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], source: str = "config") -> T:
    """Build a (possibly nested) dataclass from a dict, rejecting unknown keys by name."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    sections = family_sections() if issubclass(cls, FamilySections) else {}
    if sections:  # the sections are keys of their own in a file, never a "sections" table
        names = (names - {"sections"}) | set(sections)
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {unknown} for {cls.__name__}; known: {sorted(names)}")
    kwargs: dict[str, Any] = {"sections": {}} if sections else {}
    for key, value in data.items():
        if key in sections:
            kwargs["sections"][key] = _section(sections[key], value, f"{source}.{key}")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint) and not isinstance(value, hint):
            if not isinstance(value, dict):
                raise ValueError(f"{source}: {key} = {value!r}: expected a table of {hint.__name__} fields")
            value = from_dict(hint, value, source=f"{source}.{key}")
        else:
            value = _checked(value, hint, f"{source}: {key}")
        kwargs[key] = value
    return cls(**kwargs)


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is list:
        plural = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}
        inner = typing.get_args(hint)[0]
        return f"a list of {plural.get(inner, getattr(inner, '__name__', str(inner)) + 's')}"
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _checked(value: Any, hint: Any, name: str) -> Any:
    """`value` if it has the field's type (an int is accepted where a float is expected, as --set does); a file
    value of the wrong type (lr = "fast") is an error here, naming the key, not a TypeError deep in training."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{name} = {value!r}: expected {_type_name(hint)}")
        (item,) = typing.get_args(hint)
        return [_checked(v, item, name) for v in value]
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool):
        if isinstance(value, hint):
            return value
    else:
        return value  # a type this check does not know: the dataclass validates it
    raise ValueError(f"{name} = {value!r}: expected {_type_name(hint)}, got {type(value).__name__}")


def _coerce(text: str, hint: Any, name: str) -> Any:
    """Parse a command-line override value into the type of its dataclass field."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        hint = next(a for a in args if a is not type(None))
        # "none" is a value of some str fields (positions = "none"), so for them only "null" means None
        if type(None) in args and text.lower() in (("null",) if hint is str else ("none", "null")):
            return None
        origin = typing.get_origin(hint)
    if hint is bool:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"override {name}={text!r}: expected true or false")
    if origin is list:  # comma-separated, optionally in TOML's brackets: "1,2", "[1, 2]", "" or "[]" (empty)
        (item,) = typing.get_args(hint)
        inner = text.strip()
        if inner.startswith("[") and inner.endswith("]"):
            inner = inner[1:-1]
        return [_coerce(part.strip(), item, name) for part in inner.split(",") if part.strip()]
    try:
        return hint(text)
    except (TypeError, ValueError) as err:
        raise ValueError(f"override {name}={text!r}: expected {getattr(hint, '__name__', hint)}") from err


def apply_overrides(obj: T, overrides: list[str]) -> T:
    """Apply `a.b=value` overrides to a nested dataclass, returning a new object (validated again)."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like key=value (e.g. train.lr=3e-4)")
        dotted, text = item.split("=", 1)
        obj = _set(obj, dotted.split("."), text, dotted)
    return obj


def _set(obj: Any, path: list[str], text: str, dotted: str) -> Any:
    names = {f.name for f in dataclasses.fields(obj)}
    if isinstance(obj, FamilySections):
        names = (names - {"sections"}) | set(obj.sections)
    head = path[0]
    if head not in names:
        raise ValueError(f"override {dotted!r}: {type(obj).__name__} has no field {head!r}; known: {sorted(names)}")
    if len(path) == 1:
        if head not in getattr(obj, "sections", {}):
            value = _coerce(text, typing.get_type_hints(type(obj))[head], dotted)
        else:
            raise ValueError(f"override {dotted!r}: {head} is a section; set one of its fields ({dotted}.NAME=...)")
    else:
        value = _set(getattr(obj, head), path[1:], text, dotted)
    return dataclasses.replace(obj, **{head: value})


def as_dict(obj: Any) -> dict[str, Any]:
    """dataclasses.asdict, with the families' sections (FamilySections) written where `sections` is declared, each
    under its own name, as files have them."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "sections" and isinstance(obj, FamilySections):
            out.update({name: as_dict(section) for name, section in value.items()})
        elif dataclasses.is_dataclass(value):
            out[f.name] = as_dict(value)
        else:
            out[f.name] = copy.deepcopy(value)
    return out


def load_toml(cls: type[T], path: str | Path) -> T:
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: invalid TOML: {err}") from err
    try:
        return from_dict(cls, data, source=str(path))
    except ValueError as err:  # a check across fields (__post_init__) does not know the file: name it
        if str(err).startswith(str(path)):
            raise
        raise ValueError(f"{path}: {err}") from None
