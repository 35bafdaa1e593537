"""The tokenizer files of a HuggingFace export: tokenizer.json with a post-processor that frames a sentence as
maskplay does (`[SOS] pieces [EOS]`, `[CLS] ... [SEP]` with a BERT vocabulary; a pair `[SOS] a [SEP] b [EOS]`, as
fine-tuning frames it), tokenizer_config.json and special_tokens_map.json, so that AutoTokenizer, and every
pipeline built on it, gives maskplay's ids, specials included; and the special-token ids config.json carries."""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import processors

from ...data.tokenizer import Tokenizer


def special_tokens(tokenizer: Tokenizer) -> dict[str, str]:
    """transformers' names for maskplay's specials: bos = the start token, eos = the end token, ..."""
    s, name = tokenizer.special, tokenizer.backend.id_to_token
    return {"bos_token": name(s.sos), "eos_token": name(s.eos), "unk_token": name(s.unk), "sep_token": name(s.sep),
            "pad_token": name(s.pad), "cls_token": name(s.sos), "mask_token": name(s.mask)}


def special_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """The ids config.json states, so that generate() and lm-eval's `hf` model know the start, end and padding."""
    s = tokenizer.special
    return {"bos_token_id": s.sos, "eos_token_id": s.eos, "pad_token_id": s.pad, "sep_token_id": s.sep}


def tokenizer_files(tokenizer: Tokenizer, max_length: int, token_types: bool) -> dict[str, str]:
    """{file name: text}: tokenizer.json (maskplay's own, its framing added as a TemplateProcessing),
    tokenizer_config.json, special_tokens_map.json. `token_types`: the model reads token_type_ids."""
    backend = HFTokenizer.from_str(tokenizer.backend.to_str())  # a copy: the caller's keeps its own
    names = special_tokens(tokenizer)
    s = tokenizer.special
    bos, eos, sep = names["bos_token"], names["eos_token"], names["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0 {eos}:0", pair=f"{bos}:0 $A:0 {sep}:0 $B:1 {eos}:1",
        special_tokens=sorted({(bos, s.sos), (eos, s.eos), (sep, s.sep)}))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast", **names, "model_max_length": max_length,
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"] if token_types
        else ["input_ids", "attention_mask"],
        "padding_side": "right", "truncation_side": "right", "clean_up_tokenization_spaces": False,
        "add_bos_token": False, "add_eos_token": False,  # the post-processor frames; nothing may frame twice
    }
    return {"tokenizer.json": backend.to_str(pretty=True),
            "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(names, indent=2) + "\n"}
