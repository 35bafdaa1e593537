"""A random HuggingFace BertForMaskedLM, converted, gives the same logits as BertMLM."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay import BertMLM  # noqa: E402
from maskplay.families.hf.bert import config_from_hf_bert, hf_bert_to_maskplay, maskplay_to_hf_bert  # noqa: E402


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=211, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=96, max_position_embeddings=64, type_vocab_size=2)
    model = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():  # random LayerNorms and biases, so that a missed transform or bias shows
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.5)
    return model


def converted(hf_model):
    model = BertMLM(config_from_hf_bert(hf_model.config)).eval()
    model.load_strict(hf_bert_to_maskplay(hf_model.state_dict()))
    return model


def test_logits_match_huggingface(hf_model):
    model = converted(hf_model)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 211, (3, 17), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 11:] = 0
    types = torch.randint(0, 2, ids.shape, generator=g)
    with torch.no_grad():
        want = hf_model(input_ids=ids, attention_mask=attn, token_type_ids=types).logits
        got = model(ids, attention_mask=attn, token_type_ids=types).logits
    torch.testing.assert_close(got[attn.bool()], want[attn.bool()], atol=1e-5, rtol=1e-5)
    assert model.head.bias.abs().sum() > 0  # the separate bias was carried over


def test_decoder_is_tied_to_embeddings(hf_model):
    model = converted(hf_model)
    assert "head.decoder.weight" not in model.state_dict()
    with torch.no_grad():
        model.embeddings.word.weight[5].add_(1.0)
    ids = torch.tensor([[5, 6, 7]])
    h = model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    manual = model.head.norm(torch.nn.functional.gelu(model.head.dense(h))) @ model.embeddings.word.weight.T
    torch.testing.assert_close(model.logits(h), manual + model.head.bias)


def test_missing_or_unexpected_weights_are_errors(hf_model):
    state = hf_bert_to_maskplay(hf_model.state_dict())
    model = BertMLM(config_from_hf_bert(hf_model.config))
    missing = dict(state)
    del missing["head.bias"]
    with pytest.raises(ValueError, match=r"missing \['head.bias'\]"):
        model.load_strict(missing)
    extra = dict(state, **{"head.decoder.weight": state["embeddings.word.weight"]})
    with pytest.raises(ValueError, match="unexpected.*head.decoder.weight"):
        model.load_strict(extra)
    hf_state = dict(hf_model.state_dict(), **{"bert.pooler.dense.weight": torch.zeros(48, 48)})
    with pytest.raises(ValueError, match="bert.pooler.dense.weight"):
        hf_bert_to_maskplay(hf_state)
    untied = dict(hf_model.state_dict())
    untied["cls.predictions.decoder.weight"] = untied["cls.predictions.decoder.weight"] + 1
    with pytest.raises(ValueError, match="ties"):
        hf_bert_to_maskplay(untied)


def test_round_trip_back_to_huggingface(hf_model):
    back = maskplay_to_hf_bert(converted(hf_model).state_dict())
    fresh = transformers.BertForMaskedLM(hf_model.config).eval()
    fresh.load_state_dict(back, strict=True)
    ids = torch.randint(0, 211, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(fresh(input_ids=ids).logits, hf_model(input_ids=ids).logits)
