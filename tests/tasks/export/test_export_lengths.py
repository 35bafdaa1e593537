"""BabyLM's fine-tuning track loads AutoModel and truncates at --sequence_length 512 (docs/guides/babylm.md). The BabyLM
recipes' architecture (configs/babylm/*.toml, at a tiny width) exported takes a 512-token input through AutoModel and
gives maskplay's hidden states; positions that can stretch (rotary, sinusoidal) take inputs past max_position in the
export, learned ones are refused in one line. Oracle for the stretched inputs: a causal model's outputs on a prefix
do not depend on what follows, so the first max_position outputs of the long input equal maskplay's on the prefix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.tasks.export import export_to_hf  # noqa: E402
from tests.tasks.export.test_export_hf import TOKENIZER, saved, tiny  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TINY = dict(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)


def randomized(model):
    with torch.no_grad():  # order-1 weights, as test_export_hf's tiny(): a missed piece shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3) if p.dim() == 1 else p.normal_(0.0, p.shape[-1] ** -0.5)
    return model.eval()


def long_ids(length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tokenizer = load_tokenizer(TOKENIZER)
    inner = torch.randint(10, vocab, (length - 2,), generator=g).tolist()
    return torch.tensor([[tokenizer.special.sos, *inner, tokenizer.special.eos]])


@pytest.mark.parametrize("family", ["gpt-bert", "gpt", "bert", "tta"])
def test_babylm_recipe_takes_512_tokens_through_automodel(family, tmp_path):
    from maskplay.tasks.train import load_train_config

    section = load_train_config(REPO / f"configs/babylm/strict-small-{family}.toml").model
    config = dataclasses.replace(section, **TINY).build(load_tokenizer(TOKENIZER).model_config_ids())
    assert config.max_position >= 512  # the recipes' preset (gpt-bert-small) holds 512 positions
    torch.manual_seed(0)
    model = randomized(build_model(config))
    export_to_hf(saved(model, tmp_path / "mp"), tmp_path / "hf")
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    ids = long_ids(512, config.vocab_size)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        ours = model(ids, **model.embedding_kwargs()).last_hidden_state
    assert theirs.shape == (1, 512, 32)
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["rotary", "sinusoidal", "alibi"])
def test_positions_that_stretch_take_inputs_past_max_position(positions, tmp_path):
    model = tiny("gpt", positions=positions, norm_placement="pre")  # max_position 64
    export_to_hf(saved(model, tmp_path / "mp"), tmp_path / "hf", custom_code=True)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    ids = long_ids(100, model.config.vocab_size)
    with torch.no_grad():
        theirs = hf(input_ids=ids).logits
        ours = model(ids[:, :64]).logits  # maskplay itself stops at max_position
    assert theirs.shape[1] == 100 and torch.isfinite(theirs).all()
    torch.testing.assert_close(theirs[:, :64], ours, atol=1e-5, rtol=1e-5)


def test_learned_positions_refuse_inputs_past_max_position(tmp_path):
    export_to_hf(saved(tiny("gpt", positions="learned", norm_placement="pre"), tmp_path / "mp"), tmp_path / "hf",
                 custom_code=True)
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    with pytest.raises(ValueError, match="exceeds the model's 64 learned positions"):
        hf(input_ids=long_ids(65, 100))


def test_a_per_query_attention_mask_narrows_the_familys(tmp_path):
    """BabyLM's fine-tuning with --causal passes (B, L, L) masks: the padding tril'ed. On a GPT export it gives the
    2-D mask's hidden states; on a BERT export it makes the model causal (the first token sees itself alone)."""
    ids = long_ids(12, 100)
    ids = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)  # right padding, as the pipeline pads
    flat = (ids != 0).long()
    per_query = flat[:, None, :].repeat(1, ids.shape[1], 1).tril()
    outputs = {}
    for family in ("gpt", "bert"):
        export_to_hf(saved(tiny(family), tmp_path / family), tmp_path / f"hf-{family}", custom_code=True)
        hf = transformers.AutoModel.from_pretrained(tmp_path / f"hf-{family}", trust_remote_code=True).eval()
        with torch.no_grad():
            outputs[family] = [hf(input_ids=ids, attention_mask=m).last_hidden_state for m in (flat, per_query)]
    real = flat.bool()
    torch.testing.assert_close(outputs["gpt"][1][real], outputs["gpt"][0][real], atol=1e-6, rtol=1e-6)
    bert_flat, bert_causal = outputs["bert"]
    assert not torch.allclose(bert_causal[real], bert_flat[real], atol=1e-3)
    # under the causal mask the first token sees itself alone, at every layer: BERT on that token alone
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf-bert", trust_remote_code=True).eval()
    with torch.no_grad():
        alone = hf(input_ids=ids[:, :1]).last_hidden_state
    torch.testing.assert_close(bert_causal[:, 0], alone[:, 0], atol=1e-5, rtol=1e-5)
