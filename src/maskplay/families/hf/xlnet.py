"""HuggingFace XLNetLMHeadModel <-> maskplay XLNet. Every source weight lands somewhere, every target weight is
filled. HuggingFace keeps each projection as a (d_model, n_head, d_head) tensor used in einsums ("ibh,hnd->ibnd"
for q/k/v/r, "ibnd,hnd->ibh" for o); maskplay's are nn.Linear weights, (out, in)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...config import ModelConfig
from ..base import MaskplayModel
from ..xlnet import XLNet, XlnetConfig
from .common import HFCheckpoint, HFConverter, HFExport

# XLNet's SentencePiece vocabulary: <unk> <s> </s> <cls> <sep> <pad> <mask>; the fallback for a checkpoint that
# comes without a tokenizer (convert reads the ids from the tokenizer when there is one)
XLNET_SPECIAL_IDS = dict(unk_token_id=0, sos_token_id=1, eos_token_id=2, sep_token_id=4, pad_token_id=5,
                         mask_token_id=6, special_token_ids=[0, 1, 2, 3, 4, 5, 6])
_PROJECTIONS = {"q": "attn.query", "k": "attn.key", "v": "attn.value", "r": "attn.relative.project"}
_PARAMETERS = {"r_w_bias": "attn.relative.content_bias", "r_r_bias": "attn.relative.position_bias",
               "r_s_bias": "attn.relative.segment_bias", "seg_embed": "attn.relative.segment_embed"}
_MODULES = {"rel_attn.layer_norm": "attn_norm", "ff.layer_norm": "ffn_norm", "ff.layer_1": "ffn.up",
            "ff.layer_2": "ffn.down"}
_TOP = {"transformer.word_embedding.weight": "embeddings.word.weight", "transformer.mask_emb": "query_start",
        "lm_loss.bias": "head.bias"}
_DECODER = "lm_loss.weight"  # tied to the word embedding
# transformers.XLNetConfig's defaults
XLNET_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "d_model": 1024, "n_layer": 24, "n_head": 16, "d_inner": 4096, "ff_activation": "gelu",
    "attn_type": "bi", "dropout": 0.1, "mem_len": None, "reuse_len": None, "bi_data": False, "clamp_len": -1,
    "same_length": False,
}


def _copied(num_layers: int) -> list[tuple[str, str]]:
    """(HuggingFace name, maskplay name) of every weight that moves as it is (the projections are reshaped)."""
    pairs = list(_TOP.items())
    for i in range(num_layers):
        hf, ours = f"transformer.layer.{i}.", f"encoder.layers.{i}."
        pairs += [(f"{hf}rel_attn.{src}", f"{ours}{dst}") for src, dst in _PARAMETERS.items()]
        pairs += [(f"{hf}{src}.{kind}", f"{ours}{dst}.{kind}") for src, dst in _MODULES.items()
                  for kind in ("weight", "bias")]
    return pairs


def config_from_hf_xlnet(hf_config: Any, special_ids: dict[str, Any] | None = None) -> ModelConfig:
    """The maskplay config of a transformers.XLNetConfig: attn_type "bi", bi_data false, GELU, no same_length
    (the settings of XLNetLMHeadModel pretraining and inference in HuggingFace)."""
    def get(name: str, default: Any = None) -> Any:
        return getattr(hf_config, name, default)

    for name, want in (("attn_type", "bi"), ("bi_data", False), ("same_length", False), ("ff_activation", "gelu")):
        if get(name, want) != want:
            raise ValueError(f"XLNet: only {name}={want!r} is supported, got {get(name)!r}")
    if get("reuse_len"):
        raise ValueError(f"XLNet: reuse_len={get('reuse_len')} is not supported (memory keeps the last mem_len states)")
    vocab = get("vocab_size")
    ids = special_ids or {k: v for k, v in XLNET_SPECIAL_IDS.items()
                          if not isinstance(v, int) or v < vocab}
    if "special_token_ids" in ids:
        ids = {**ids, "special_token_ids": [i for i in ids["special_token_ids"] if i < vocab]}
    return ModelConfig(
        family="xlnet", vocab_size=vocab, hidden_size=get("d_model"), num_layers=get("n_layer"),
        num_heads=get("n_head"), intermediate_size=get("d_inner"), max_position=512,
        hidden_dropout=get("dropout"), attention_dropout=get("dropout"), layer_norm_eps=get("layer_norm_eps"),
        initializer_range=get("initializer_range"),
        xlnet=XlnetConfig(mem_len=get("mem_len") or 0, clamp_len=get("clamp_len", -1)), **ids)


def hf_xlnet_config_dict(config: ModelConfig) -> dict[str, Any]:
    """config.json of the XLNetLMHeadModel a maskplay XLNet becomes."""
    if config.family != "xlnet":
        raise ValueError(f"family {config.family!r} is not an XLNet")
    if config.attention_bias:
        raise ValueError("this XLNet has biases in its attention projections (attention_bias = true); HuggingFace "
                         "XLNet has none")
    if config.hidden_dropout != config.attention_dropout:
        raise ValueError(f"HuggingFace XLNet has one dropout; this model has hidden {config.hidden_dropout} and "
                         f"attention {config.attention_dropout}")
    return {"architectures": ["XLNetLMHeadModel"], "model_type": "xlnet", "vocab_size": config.vocab_size,
            "d_model": config.hidden_size, "n_layer": config.num_layers, "n_head": config.num_heads,
            "d_head": config.head_dim, "d_inner": config.intermediate_size, "ff_activation": "gelu",
            "untie_r": True, "attn_type": "bi", "initializer_range": config.initializer_range,
            "layer_norm_eps": config.layer_norm_eps, "dropout": config.hidden_dropout,
            "mem_len": config.xlnet.mem_len or None, "reuse_len": None, "bi_data": False,
            "clamp_len": config.xlnet.clamp_len, "same_length": False, "pad_token_id": config.pad_token_id,
            "bos_token_id": config.sos_token_id, "eos_token_id": config.eos_token_id, "tie_word_embeddings": True}


def hf_xlnet_to_maskplay(hf_state: dict[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """An XLNetLMHeadModel state dict as a maskplay XLNet's. A weight that maps nowhere is an error."""
    state = dict(hf_state)
    out: dict[str, Tensor] = {}
    decoder = state.pop(_DECODER, None)
    if decoder is not None and not decoder.equal(state.get("transformer.word_embedding.weight", decoder)):
        raise ValueError("lm_loss.weight differs from the word embedding: maskplay's XLNet head is tied to it")
    for src, dst in _copied(num_layers):
        out[dst] = _take(state, src)
    for i in range(num_layers):
        hf, ours = f"transformer.layer.{i}.", f"encoder.layers.{i}."
        for src, dst in _PROJECTIONS.items():
            w = _take(state, f"{hf}rel_attn.{src}")  # (d_model, n_head, d_head)
            out[f"{ours}{dst}.weight"] = w.reshape(w.shape[0], -1).t().contiguous()
        o = _take(state, f"{hf}rel_attn.o")  # out[h] = sum_{n,d} vec[n, d] o[h, n, d]
        out[f"{ours}attn.out.weight"] = o.reshape(o.shape[0], -1).contiguous()
    if state:
        raise ValueError(f"XLNet weights with no maskplay counterpart: {sorted(state)}")
    return out


def maskplay_to_hf_xlnet(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A maskplay XLNet's state dict as an XLNetLMHeadModel's (lm_loss.weight the tied embedding)."""
    hf_xlnet_config_dict(config)  # names an option HuggingFace cannot hold before any weight is touched
    state = dict(state)
    heads, size = config.num_heads, config.head_dim
    out: dict[str, Tensor] = {}
    for dst, src in _copied(config.num_layers):
        out[dst] = _take(state, src)
    out[_DECODER] = out["transformer.word_embedding.weight"]
    for i in range(config.num_layers):
        hf, ours = f"transformer.layer.{i}.", f"encoder.layers.{i}."
        for dst, src in _PROJECTIONS.items():
            w = _take(state, f"{ours}{src}.weight")  # (n_head * d_head, d_model)
            out[f"{hf}rel_attn.{dst}"] = w.t().reshape(-1, heads, size).contiguous()
        o = _take(state, f"{ours}attn.out.weight")
        out[f"{hf}rel_attn.o"] = o.reshape(o.shape[0], heads, size).contiguous()
    if state:
        raise ValueError(f"maskplay XLNet weights with no HuggingFace counterpart: {sorted(state)}")
    return out


def _take(state: dict[str, Tensor], name: str) -> Tensor:
    if name not in state:
        raise ValueError(f"the checkpoint is missing the weight {name}")
    return state.pop(name)


class XLNetConverter(HFConverter):
    """XLNet <-> XLNetLMHeadModel."""

    family = "xlnet"
    architectures = ("XLNetLMHeadModel",)
    hf_defaults = XLNET_DEFAULTS

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        return "XLNetLMHeadModel" if data.get("model_type") == "xlnet" else None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        return "xlnet"

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        hf_config, state = checkpoint
        config = config_from_hf_xlnet(hf_config, special_ids)
        model = XLNet(config)
        model.load_strict(hf_xlnet_to_maskplay(state, config.num_layers),
                          source="the converted XLNetLMHeadModel weights")
        return model.eval()

    def to_hf(self, model: MaskplayModel) -> list[HFExport]:
        config, state = model.config, model.state_dict()
        return [(hf_xlnet_config_dict(config), maskplay_to_hf_xlnet(state, config))]

    def config_from_hf(self, hf_config: Any, special_ids: dict[str, Any] | None = None) -> ModelConfig:
        return config_from_hf_xlnet(hf_config, special_ids)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return hf_xlnet_config_dict(config)


XLNET = XLNetConverter()
