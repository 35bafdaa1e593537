"""ModelConfig's generic parts: the switch lists read from field metadata, and the families' own sections held by
name (config.FamilySections) - each as the hand-written lists and fields they replace behaved."""

from __future__ import annotations

import dataclasses

import pytest

from maskplay.config import (
    ARCHITECTURE_SWITCHES,
    CAUSAL_LM_SWITCHES,
    GPT_BERT_SWITCHES,
    HF_MASKED_SWITCHES,
    ModelConfig,
    apply_overrides,
    from_dict,
    preset,
)
from maskplay.families.electra import ElectraConfig
from maskplay.families.gpt_bert import GptBertConfig
from maskplay.families.xlnet import XlnetConfig
from maskplay.registry import family_sections


def test_the_switch_lists_are_the_ones_that_were_written_by_hand():
    assert GPT_BERT_SWITCHES == {"norm_affine": True, "attention_output_norm": False, "ffn_inner_norm": False,
                                 "gelu_tanh": False, "value_gate": False, "denseformer": False, "head_norm": False,
                                 "weight_init": "bert"}
    assert HF_MASKED_SWITCHES == {"head_gelu_tanh": False, "relative_buckets": 32, "relative_max_distance": 512}
    assert CAUSAL_LM_SWITCHES == {"num_kv_heads": None, "parallel_residual": False, "rotary_fraction": 1.0,
                                  "rotary_base": 10000.0, "embedding_norm": True, "lm_head": "mlm"}
    assert set(ARCHITECTURE_SWITCHES) == {"positions", "key_size", "talking_heads", "norm", "norm_placement", "ffn",
                                          "ffn_bias", "share_layers", "attention", "long", "reversible",
                                          *GPT_BERT_SWITCHES, *HF_MASKED_SWITCHES, *CAUSAL_LM_SWITCHES}


def test_the_built_in_sections_keep_their_names_and_order():
    assert list(family_sections()) == ["electra", "unilm", "xlnet", "gpt_bert"]
    assert list(preset("tiny").to_dict())[-4:] == ["electra", "unilm", "xlnet", "gpt_bert"]  # config.json as before


def test_a_section_is_set_read_replaced_and_overridden_as_a_field_was():
    config = preset("tiny", family="xlnet", xlnet=XlnetConfig(mem_len=4))
    assert config.xlnet.mem_len == 4 and config.electra == ElectraConfig()
    other = dataclasses.replace(config, xlnet=XlnetConfig(mem_len=8))
    assert (other.xlnet.mem_len, config.xlnet.mem_len) == (8, 4)
    assert other != config and dataclasses.replace(other, xlnet=XlnetConfig(mem_len=4)) == config
    assert apply_overrides(config, ["xlnet.clamp_len=5"]).xlnet == XlnetConfig(mem_len=4, clamp_len=5)
    assert from_dict(ModelConfig, {"family": "gpt-bert", "gpt_bert": {"z_loss": 0.0}}).gpt_bert == GptBertConfig(z_loss=0.0)


@pytest.mark.parametrize("make,message", [
    (lambda: from_dict(ModelConfig, {"electric": {"mask_prob": 0.2}}), r"unknown key\(s\) \['electric'\]"),
    (lambda: from_dict(ModelConfig, {"electra": {"mask_prob": 2.0}}), "electra.mask_prob must be in"),
    (lambda: from_dict(ModelConfig, {"xlnet": 3}), "expected a table of XlnetConfig fields"),
    (lambda: apply_overrides(ModelConfig(), ["xlnet=3"]), "xlnet is a section; set one of its fields"),
    (lambda: apply_overrides(ModelConfig(), ["xlnet.memory=3"]), "XlnetConfig has no field 'memory'"),
    (lambda: ModelConfig(sections={"electric": {}}), r"unknown section\(s\) \['electric'\]"),
])
def test_a_bad_section_is_a_one_line_error(make, message):
    with pytest.raises(ValueError, match=message) as err:
        make()
    assert "\n" not in str(err.value)


def test_a_missing_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'electric'"):
        _ = ModelConfig().electric


@pytest.mark.parametrize("text, want", [("1000,2000", [1000, 2000]), ("[1000, 2000]", [1000, 2000]), ("", []),
                                        ("[]", []), (" [ 5 ] ", [5])])
def test_a_list_override_is_comma_separated_with_or_without_brackets(text, want):
    from maskplay.tasks.train.config import TrainConfig

    config = apply_overrides(TrainConfig(), [f"run.checkpoint_at_words={text}"])
    assert config.run.checkpoint_at_words == want
