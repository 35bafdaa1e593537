"""maskplay GPT <-> HuggingFace BertLMHeadModel (is_decoder=True): a random HuggingFace decoder, converted, gives
the same logits (padding on either side) and the same greedy generation; a maskplay GPT converts back."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay import GPT, preset  # noqa: E402
from maskplay.convert import (  # noqa: E402
    config_from_hf_bert_lm_head,
    gpt_from_hf_bert_lm_head,
    gpt_to_hf_bert_lm_head,
    hf_bert_lm_head_config_dict,
)

VOCAB = 211


def randomised(model):
    with torch.no_grad():  # random LayerNorms and biases, so that a missed transform or bias shows
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.5)
    return model


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=96, max_position_embeddings=64, type_vocab_size=2,
                                  is_decoder=True)
    return randomised(transformers.BertLMHeadModel(cfg)).eval()


def batch(side: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (3, 17), generator=g)
    attn = torch.ones_like(ids)
    if side == "right":
        attn[1, 11:] = 0
        attn[2, 4:] = 0
    else:
        attn[1, :6] = 0
        attn[2, :13] = 0
    return ids.masked_fill(attn == 0, 0), attn


@pytest.mark.parametrize("side", ["right", "left"])
def test_logits_match_huggingface(hf_model, side):
    model = gpt_from_hf_bert_lm_head(hf_model.config, hf_model.state_dict())
    assert isinstance(model, GPT) and model.config.type_vocab_size == 2
    ids, attn = batch(side)
    with torch.no_grad():
        want = hf_model(input_ids=ids, attention_mask=attn).logits
        got = model(ids, attention_mask=attn.bool()).logits
    real = attn.bool()  # padding rows are not outputs of either model
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    assert model.head.bias.abs().sum() > 0  # the separate bias was carried over


def test_greedy_generation_matches_huggingface_generate(hf_model):
    """Left-padded prompts: HuggingFace counts positions from each row's first real token, as maskplay does."""
    model = gpt_from_hf_bert_lm_head(hf_model.config, hf_model.state_dict())
    ids, attn = batch("left")
    with torch.no_grad():
        want = hf_model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=8, do_sample=False,
                                 pad_token_id=0, eos_token_id=None)[:, ids.shape[1]:]
    got = model.generate(ids, attention_mask=attn.bool(), max_new_tokens=8, stop_ids=[])
    assert [g.token_ids for g in got] == want.tolist()


def test_round_trip_back_to_huggingface():
    torch.manual_seed(2)
    model = randomised(GPT(preset("tiny", family="gpt", vocab_size=VOCAB, type_vocab_size=2))).eval()
    config, state = gpt_to_hf_bert_lm_head(model)
    hf_config = transformers.BertConfig(**{k: v for k, v in config.items() if k != "architectures"})
    hf = transformers.BertLMHeadModel(hf_config).eval()
    hf.load_state_dict(state, strict=True)
    ids, attn = batch("right")
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=attn).logits[attn.bool()],
                                   model(ids, attention_mask=attn.bool()).logits[attn.bool()], atol=1e-5, rtol=1e-5)
    # a GPT without segments gets a zero token-type row, which adds nothing
    plain = GPT(preset("tiny", family="gpt", vocab_size=VOCAB)).eval()
    config, state = gpt_to_hf_bert_lm_head(plain)
    assert config["type_vocab_size"] == 1 and not state["bert.embeddings.token_type_embeddings.weight"].any()


def test_unsupported_configs_and_missing_weights_are_errors(hf_model):
    encoder = transformers.BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(ValueError, match="is_decoder is false"):
        config_from_hf_bert_lm_head(encoder)
    state = dict(hf_model.state_dict())
    del state["bert.encoder.layer.2.output.dense.bias"]
    with pytest.raises(ValueError, match=r"missing weights: \['bert.encoder.layer.2.output.dense.bias'\]"):
        gpt_from_hf_bert_lm_head(hf_model.config, state)
    with pytest.raises(ValueError, match="not a 'bert' model"):
        hf_bert_lm_head_config_dict(preset("tiny", family="bert"))
