"""HuggingFace DebertaV2ForMaskedLM (DeBERTa-v2 / v3) -> maskplay BertMLM with `positions = "disentangled"`:
content-to-content, content-to-position and position-to-content scores over log-bucketed relative positions,
the relative table projected by the layers' own query and key weights (share_att_key) through its LayerNorm
(norm_rel_ebd = layer_norm), scaled by 1 / sqrt(3 d). DeBERTa's position_buckets and max_relative_positions are
`relative_buckets` and `relative_max_distance`. Its table has one more row than maskplay's (row 0, read only at
distances beyond max_relative_positions - 1 on one side, which no input up to max_position has): maskplay's table
is HuggingFace's from row 1 on. Exact for the released v3 layout; what maskplay has no counterpart for is refused:
absolute positions in the input (position_biased_input), the convolution of v2-xlarge (conv_kernel_size), separate
position projections (share_att_key = false), attention types other than c2p|p2c, unbucketed positions,
embedding_size != hidden_size (DeBERTa normalises after its projection)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...config import ModelConfig
from .common import backbone_fields
from .masked import MaskedConverter, activation_fields, special_layout

_LAYER = {
    "attention.self.query_proj": "attn.query",
    "attention.self.key_proj": "attn.key",
    "attention.self.value_proj": "attn.value",
    "attention.output.dense": "attn.out",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
_TABLE = "deberta.encoder.rel_embeddings.weight"
_HEAD = "lm_predictions.lm_head."  # the head of legacy = false, renamed to the legacy head's names


class DebertaV2Converter(MaskedConverter):
    """DebertaV2ForMaskedLM -> BertMLM with positions = "disentangled"."""

    architectures = ("DebertaV2ForMaskedLM",)
    model_type = "deberta-v2"
    hf_defaults = {"vocab_size": 128100, "hidden_size": 1536, "num_hidden_layers": 24, "num_attention_heads": 24,
                   "intermediate_size": 6144, "type_vocab_size": 0, "layer_norm_eps": 1e-7, "relative_attention": False,
                   "max_relative_positions": -1, "position_biased_input": True, "pos_att_type": None,
                   "position_buckets": -1, "share_att_key": False, "norm_rel_ebd": "none", "conv_kernel_size": 0,
                   "legacy": True}
    top = {
        "deberta.embeddings.word_embeddings": "embeddings.word",
        "deberta.embeddings.token_type_embeddings": "embeddings.segment",
        "deberta.embeddings.LayerNorm": "embeddings.norm",
        "deberta.encoder.LayerNorm": "encoder.relative.norm",
        "cls.predictions.transform.dense": "head.dense",
        "cls.predictions.transform.LayerNorm": "head.norm",
        "cls.predictions": "head",  # cls.predictions.bias -> head.bias
    }
    layers = "deberta.encoder.layer"
    layer_map = _LAYER
    skip = ("deberta.embeddings.position_ids",)
    decoder = ("cls.predictions.decoder.weight", "deberta.embeddings.word_embeddings.weight")
    decoder_bias = ("cls.predictions.decoder.bias", "cls.predictions.bias")
    head_prefix = "cls.predictions."
    encoders = {"DebertaV2Model": "deberta."}

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        if data.get("model_type") == self.model_type and any(k.startswith((self.head_prefix, _HEAD)) for k in state):
            return self.architectures[0]
        return None

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        refused = self._refused(hf_config)
        if refused:
            raise ValueError(f"DeBERTa-v2: {refused}")
        fields = backbone_fields(hf_config)
        vocab = hf_config.vocab_size
        reach = hf_config.max_relative_positions
        fields.update(positions="disentangled", relative_buckets=hf_config.position_buckets,
                      relative_max_distance=reach if reach >= 1 else hf_config.max_position_embeddings,
                      **special_layout(vocab, pad=hf_config.pad_token_id or 0, sos=1, eos=2, unk=3,
                                       mask=128000 if vocab > 128000 else vocab - 1),
                      **activation_fields(hf_config.hidden_act, "DeBERTa-v2"))
        return ModelConfig(family="bert", **fields)

    @staticmethod
    def _refused(c: Any) -> str | None:
        """Why this config has no exact maskplay counterpart (None: it has one)."""
        kinds = c.pos_att_type.split("|") if isinstance(c.pos_att_type, str) else list(c.pos_att_type or [])
        norms = [x.strip() for x in str(c.norm_rel_ebd).lower().split("|")]
        for bad, why in ((not c.relative_attention, "relative_attention = false (no disentangled attention)"),
                         (c.position_biased_input, "position_biased_input = true: absolute positions in the input "
                          "beside the relative ones"),
                         (sorted(kinds) != ["c2p", "p2c"], f"pos_att_type {kinds}: only c2p|p2c"),
                         (not c.share_att_key, "share_att_key = false: separate position projections"),
                         (c.position_buckets is None or c.position_buckets <= 0, "position_buckets <= 0: unbucketed "
                          "relative positions"),
                         ("layer_norm" not in norms, f"norm_rel_ebd = {c.norm_rel_ebd!r}: the relative table without "
                          "its LayerNorm"),
                         ((c.conv_kernel_size or 0) > 0, "conv_kernel_size > 0: the v2 convolution layer"),
                         (getattr(c, "embedding_size", None) not in (None, c.hidden_size), "embedding_size != "
                          "hidden_size (normalised after its projection)")):
            if bad:
                return f"{why} has no maskplay counterpart"
        return None

    def reshape(self, state: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
        # v3 checkpoints carry the replaced-token-detection head; DebertaV2ForMaskedLM ignores it as well
        # (its _keys_to_ignore_on_load_unexpected), so the masked LM is the same without it
        for key in [k for k in state if k.startswith("mask_predictions.")]:
            del state[key]
        for key in [k for k in state if k.startswith(_HEAD)]:
            leaf = key[len(_HEAD):]
            state[("cls.predictions." if leaf == "bias" else "cls.predictions.transform.") + leaf] = state.pop(key)
        return state

    def state_from_hf(self, hf_state: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
        table = hf_state.get(_TABLE)
        out = super().state_from_hf({k: v for k, v in hf_state.items() if k != _TABLE}, hf_config)
        if table is not None:
            out["encoder.relative.table"] = table[1:]  # row 0: beyond the maximum distance, never read here
        return out

    def hf_name(self, key: str, value: Tensor) -> str:
        return _TABLE if key == "encoder.relative.table" else super().hf_name(key, value)


DEBERTA_V2 = DebertaV2Converter()
