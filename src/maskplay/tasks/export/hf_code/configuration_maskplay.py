"""The configuration of a maskplay model exported as HuggingFace custom code (`maskplay export --to-hf`). This file
is copied next to the weights and loaded by transformers (trust_remote_code=True): it imports transformers only,
never maskplay. The attention mask is described by kind (`mask`, `causal_mask`), so one modeling file serves every
family maskplay trains on one backbone."""

from __future__ import annotations

try:  # transformers 5 names it PreTrainedConfig; 4.x PretrainedConfig (5 keeps the old name as an alias)
    from transformers import PreTrainedConfig as _Config
except ImportError:  # pragma: no cover - transformers 4
    from transformers import PretrainedConfig as _Config

MASKS = ("bidirectional", "causal", "no_diagonal", "prefix_lm")
SEGMENTS = ("given", "after_separator", "none")


class MaskplayConfig(_Config):
    """Sizes and switches of maskplay's backbone (its ModelConfig, flattened), and how the exported family reads:
    `mask` the attention mask of AutoModel and AutoModelForMaskedLM, `causal_mask` that of AutoModelForCausalLM
    (None: the family does not generate), `query_stream` whether the queries start from [MASK] + position with the
    keys and values from the embedding output (T-TA), `segments` where token types come from, `causal_buckets`
    whether T5 buckets are one-directional."""

    model_type = "maskplay"

    def __init__(self, vocab_size: int = 100, hidden_size: int = 32, num_layers: int = 2, num_heads: int = 4,
                 intermediate_size: int = 64, ffn_width: int | None = None, max_position: int = 64,
                 type_vocab_size: int = 0, embedding_size: int | None = None, positions: str = "learned",
                 attention_bias: bool = True, key_width: int | None = None, norm: str = "layernorm",
                 norm_placement: str = "post", ffn: str = "gelu", ffn_bias: bool = True, share_layers: bool = False,
                 norm_affine: bool = True, attention_output_norm: bool = False, ffn_inner_norm: bool = False,
                 gelu_tanh: bool = False, value_gate: bool = False, denseformer: bool = False,
                 head_norm: bool = False, layer_norm_eps: float = 1e-12, initializer_range: float = 0.02,
                 mask: str = "bidirectional", causal_mask: str | None = None, query_stream: bool = False,
                 segments: str = "none", causal_buckets: bool = False, mask_token_id: int = 4,
                 separator_id: int = 6, pool_frame_as_mean: bool = False, **kwargs) -> None:
        if mask not in MASKS or (causal_mask is not None and causal_mask not in MASKS):
            raise ValueError(f"mask must be one of {MASKS}, got {mask!r} / {causal_mask!r}")
        if segments not in SEGMENTS:
            raise ValueError(f"segments must be one of {SEGMENTS}, got {segments!r}")
        self.vocab_size, self.hidden_size, self.num_layers = vocab_size, hidden_size, num_layers
        self.num_heads, self.intermediate_size, self.max_position = num_heads, intermediate_size, max_position
        self.ffn_width = intermediate_size if ffn_width is None else ffn_width
        self.type_vocab_size, self.embedding_size, self.positions = type_vocab_size, embedding_size, positions
        self.attention_bias = attention_bias
        self.key_width = hidden_size // num_heads if key_width is None else key_width
        self.norm, self.norm_placement, self.ffn, self.ffn_bias = norm, norm_placement, ffn, ffn_bias
        self.share_layers, self.norm_affine = share_layers, norm_affine
        self.attention_output_norm, self.ffn_inner_norm = attention_output_norm, ffn_inner_norm
        self.gelu_tanh, self.value_gate, self.denseformer, self.head_norm = gelu_tanh, value_gate, denseformer, head_norm
        self.layer_norm_eps, self.initializer_range = layer_norm_eps, initializer_range
        self.mask, self.causal_mask, self.query_stream = mask, causal_mask, query_stream
        self.segments, self.causal_buckets = segments, causal_buckets
        self.mask_token_id, self.separator_id = mask_token_id, separator_id
        # a sentence-transformers export with mean pooling: the outputs at [SOS] and [EOS] are replaced by the mean of
        # the pieces between them, so that a mean over every token is maskplay's mean over the pieces
        self.pool_frame_as_mean = pool_frame_as_mean
        # the model's own names for what transformers' pipelines read
        self.num_hidden_layers, self.num_attention_heads = num_layers, num_heads
        self.max_position_embeddings = max_position
        kwargs.setdefault("tie_word_embeddings", False)  # the head reads the embedding table itself: nothing to tie
        super().__init__(**kwargs)

    @property
    def embedding_width(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size
