"""Weight converters between HuggingFace BERT and maskplay. Every source weight must land somewhere and
every target weight must be filled: nothing is silently skipped."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .config import ModelConfig

# HuggingFace buffers that are not weights (present in some transformers versions' state dicts).
_HF_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")

_LAYER = {
    "attention.self.query": "attn.query",
    "attention.self.key": "attn.key",
    "attention.self.value": "attn.value",
    "attention.output.dense": "attn.out",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
_TOP = {
    "bert.embeddings.word_embeddings": "embeddings.word",
    "bert.embeddings.position_embeddings": "embeddings.position",
    "bert.embeddings.token_type_embeddings": "embeddings.segment",
    "bert.embeddings.LayerNorm": "embeddings.norm",
    "cls.predictions.transform.dense": "head.dense",
    "cls.predictions.transform.LayerNorm": "head.norm",
}


def config_from_hf_bert(hf_config: Any) -> ModelConfig:
    """A BertMLM config matching a transformers.BertConfig."""
    if hf_config.hidden_act != "gelu":
        raise ValueError(f"only hidden_act='gelu' is supported, got {hf_config.hidden_act!r}")
    if getattr(hf_config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported")
    vocab = hf_config.vocab_size
    mask_id = 103 if vocab > 103 else vocab - 1
    return ModelConfig(
        family="bert", vocab_size=vocab, hidden_size=hf_config.hidden_size,
        num_layers=hf_config.num_hidden_layers, num_heads=hf_config.num_attention_heads,
        intermediate_size=hf_config.intermediate_size, max_position=hf_config.max_position_embeddings,
        type_vocab_size=hf_config.type_vocab_size, hidden_dropout=hf_config.hidden_dropout_prob,
        attention_dropout=hf_config.attention_probs_dropout_prob, layer_norm_eps=hf_config.layer_norm_eps,
        initializer_range=hf_config.initializer_range, pad_token_id=hf_config.pad_token_id or 0,
        # bert-base-uncased layout: [PAD]=0 [UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103
        unk_token_id=min(100, vocab - 1), sos_token_id=min(101, vocab - 1), eos_token_id=min(102, vocab - 1),
        mask_token_id=mask_id, special_token_ids=sorted({0, *(i for i in (100, 101, 102, 103) if i < vocab)}),
    )


def hf_bert_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Rename a BertForMaskedLM state dict to BertMLM's. The decoder must be tied to the word embeddings
    and its bias must be the head's bias; anything unrecognised is an error naming the key."""
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in hf_state.items():
        if key in _HF_BUFFERS:
            continue
        if key in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"):
            continue  # tied, checked below
        if key == "cls.predictions.bias":
            out["head.bias"] = value
            continue
        module, _, leaf = key.rpartition(".")
        if module in _TOP:
            out[f"{_TOP[module]}.{leaf}"] = value
            continue
        parts = module.split(".")
        if parts[:3] == ["bert", "encoder", "layer"] and ".".join(parts[4:]) in _LAYER:
            out[f"encoder.layers.{parts[3]}.{_LAYER['.'.join(parts[4:])]}.{leaf}"] = value
            continue
        unknown.append(key)
    if unknown:
        raise ValueError(f"HuggingFace weights with no maskplay counterpart: {unknown}")
    decoder = hf_state.get("cls.predictions.decoder.weight")
    if decoder is not None and not torch.equal(decoder, hf_state["bert.embeddings.word_embeddings.weight"]):
        raise ValueError("cls.predictions.decoder.weight differs from the word embeddings: maskplay ties them")
    bias = hf_state.get("cls.predictions.decoder.bias")
    if bias is not None and "cls.predictions.bias" in hf_state and not torch.equal(bias, hf_state["cls.predictions.bias"]):
        raise ValueError("cls.predictions.decoder.bias differs from cls.predictions.bias")
    return out


def maskplay_to_hf_bert(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The inverse rename, with the tied decoder weight and bias written out as HuggingFace expects."""
    top = {v: k for k, v in _TOP.items()}
    layer = {v: k for k, v in _LAYER.items()}
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        module, _, leaf = key.rpartition(".")
        if key == "head.bias":
            out["cls.predictions.bias"] = value
            out["cls.predictions.decoder.bias"] = value
        elif module in top:
            out[f"{top[module]}.{leaf}"] = value
        elif module.startswith("encoder.layers."):
            _, _, idx, rest = module.split(".", 3)
            out[f"bert.encoder.layer.{idx}.{layer[rest]}.{leaf}"] = value
        else:
            raise ValueError(f"maskplay weight with no HuggingFace counterpart: {key}")
    out["cls.predictions.decoder.weight"] = state["embeddings.word.weight"]
    return out
