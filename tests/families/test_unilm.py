"""UniLM: the seq2seq mask against a brute-force reference and by gradient, the shifted targets, the mixed
pretraining objective, BERT weights loading as they are, parity with HuggingFace BertForMaskedLM under the
same 3-D mask, and a tiny fine-tuning run from a BERT checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from maskplay import BertMLM, UniLM, preset
from maskplay.cli import main as cli_main
from maskplay.families import build_model
from maskplay.families.unilm import MIX, RIGHT_TO_LEFT, SEQ2SEQ, UnilmConfig, segments_after_separator, structure
from maskplay.nn.masks import and_masks, materialize, padding
from maskplay.nn.modeling import IGNORE_INDEX

SOS, EOS, SEP, PAD = 3, 1, 6, 0


def unilm(objective: str = "seq2seq", **overrides) -> UniLM:
    torch.manual_seed(0)
    return build_model(preset("tiny", family="unilm", sep_token_id=SEP, unilm=UnilmConfig(objective), **overrides))


def pairs_batch() -> tuple[torch.Tensor, torch.Tensor]:
    rows = [[SOS, 10, 11, 12, SEP, 20, 21, EOS], [SOS, 13, SEP, 22, 23, 24, EOS, PAD], [SOS, 14, 15, SEP, 25, EOS, PAD, PAD]]
    ids = torch.tensor(rows)
    return ids, ids != PAD


def test_seq2seq_mask_equals_a_brute_force_reference():
    ids, attn = pairs_batch()
    seg = segments_after_separator(ids, SEP)
    assert seg[0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    got = materialize(and_masks(structure(SEQ2SEQ, seg), padding(attn)), 3, 8)[:, 0]
    for b in range(3):
        for i in range(8):
            for j in range(8):
                want = bool(attn[b, j]) and (seg[b, j] == 0 or (seg[b, i] == 1 and j <= i))
                assert bool(got[b, i, j]) == want, (b, i, j)


def test_no_position_sees_a_later_target_token_by_gradient():
    """d output_i / d input_j = 0 whenever j is a target token after i, or i is a source token and j a target one;
    and a source position does see a later source token (the test can fail)."""
    model = unilm(hidden_dropout=0.0, attention_dropout=0.0).eval()
    ids, attn = pairs_batch()
    ids, attn = ids[:1], attn[:1]
    seg = segments_after_separator(ids, SEP)[0]
    embedded = model.embed(ids).detach().requires_grad_(True)
    model_embed = model.embed
    model.embed = lambda *a, **k: embedded  # feed the leaf in, so gradients are taken with respect to it
    try:
        h = model(ids, attn).last_hidden_state
    finally:
        model.embed = model_embed
    L = ids.shape[1]
    probe = torch.randn(h.shape[-1], generator=torch.Generator().manual_seed(0))  # a LayerNorm output sums to ~0
    for i in range(L):
        (grad,) = torch.autograd.grad((h[0, i] * probe).sum(), embedded, retain_graph=True)
        for j in range(L):
            sees = bool(grad[0, j].abs().sum() > 0)
            allowed = seg[j] == 0 or (seg[i] == 1 and j <= i)
            assert sees == bool(allowed), (i, j)


def test_seq2seq_targets_are_the_next_target_tokens_only():
    model = unilm()
    ids, attn = pairs_batch()
    batch = model.training_batch(ids, attn)
    assert batch["labels"][0].tolist() == [IGNORE_INDEX] * 4 + [20, 21, EOS, IGNORE_INDEX]
    assert batch["labels"][2].tolist() == [IGNORE_INDEX] * 3 + [25, EOS] + [IGNORE_INDEX] * 3
    out = model(**batch)
    assert out.logits.shape[0] == int((batch["labels"] != IGNORE_INDEX).sum()) == 9
    with pytest.raises(ValueError, match="no target"):
        model.training_batch(torch.tensor([[SOS, 10, 11, EOS]]), torch.ones(1, 4, dtype=torch.bool))


def test_mixed_objective_draws_the_papers_proportions_with_masked_targets():
    model = unilm("mixed")
    ids = torch.randint(7, 100, (4, 12))
    attn = torch.ones_like(ids, dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    kinds = [int(model.training_batch(ids, attn, g)["mask_kind"]) for _ in range(3000)]
    for kind, share in enumerate(MIX):
        assert abs(kinds.count(kind) / 3000 - share) < 0.03
    batch = model.training_batch(ids, attn, g)
    assert ((batch["labels"] != IGNORE_INDEX).sum(1) > 0).any()
    seg = batch["token_type_ids"]
    assert (seg[:, :2] == 0).all() and (seg[:, -1] == 1).all()  # a random split, source at least [SOS] + 1
    out = model(**batch)
    out.loss.backward()
    r2l = materialize(structure(RIGHT_TO_LEFT, seg), 1, 4)[0, 0]
    assert r2l.tolist() == [[j >= i for j in range(4)] for i in range(4)]


def test_a_bert_checkpoint_loads_as_it_is(tmp_path):
    bert = build_model(preset("tiny", family="bert", type_vocab_size=2))
    bert.save_pretrained(tmp_path / "bert")
    model = unilm(type_vocab_size=2)
    from safetensors.torch import load_file

    model.load_strict(load_file(str(tmp_path / "bert" / "model.safetensors")))
    assert set(model.state_dict()) == set(bert.state_dict())
    ids, attn = pairs_batch()
    # all-source input (no separator): the seq2seq mask is bidirectional, so UniLM is BERT exactly
    plain = torch.tensor([[SOS, 10, 11, 12, EOS]])
    torch.testing.assert_close(model.eval()(plain).logits, bert.eval()(plain, token_type_ids=torch.zeros_like(plain)).logits)


def test_forward_equals_huggingface_bert_given_the_same_mask():
    transformers = pytest.importorskip("transformers")
    from maskplay.families.hf.bert import config_from_hf_bert, hf_bert_to_maskplay

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32, type_vocab_size=2)
    hf = transformers.BertForMaskedLM(cfg).eval()
    config = config_from_hf_bert(cfg)
    import dataclasses

    model = UniLM(dataclasses.replace(config, family="unilm", sep_token_id=SEP)).eval()
    model.load_strict(hf_bert_to_maskplay(hf.state_dict()))
    ids, attn = pairs_batch()
    seg = segments_after_separator(ids, SEP)
    mask = materialize(and_masks(structure(SEQ2SEQ, seg), padding(attn)), 3, 8)
    with torch.no_grad():
        # transformers 5 takes a per-query mask as (B, 1, L, L) (its older versions took the (B, L, L) form)
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=seg).logits
        got = model(ids, attn, token_type_ids=seg).logits
    torch.testing.assert_close(got[attn], want[attn], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_seq2seq_fine_tuning_from_a_bert_checkpoint_through_the_cli(tmp_path):
    from maskplay.data.dataset import write_split
    from tests.tasks.train.test_train import SMALL, make_data

    data = make_data(tmp_path / "data")
    base = [a for item in SMALL for a in ("--set", item)] + ["--set", "run.progress=false"]
    assert cli_main(["pretrain", "--family", "bert", "--data", str(data), "--out", str(tmp_path / "bert"),
                     *base]) == 0
    g = torch.Generator().manual_seed(0)
    pairs = [[SOS, *torch.randint(7, 100, (5,), generator=g).tolist(), SEP,
              *torch.randint(7, 100, (3,), generator=g).tolist(), EOS] for _ in range(64)]
    write_split(data / "train", pairs, 100)
    write_split(data / "valid", pairs[:16], 100)
    run = tmp_path / "s2s"
    args = ["seq2seq", "train", "--init", str(tmp_path / "bert" / "final"), "--data", str(data), "--out", str(run),
            *base]
    assert cli_main([*args, "--max-steps", "4"]) == 0
    assert cli_main([*args, "--max-steps", "6", "--resume"]) == 0
    saved = json.loads((run / "final" / "config.json").read_text())
    assert saved["family"] == "unilm" and saved["unilm"]["objective"] == "seq2seq"
    assert "initialised the unilm model from" in (run / "train.log").read_text()
    model = UniLM.from_pretrained(run / "final")
    assert isinstance(model, BertMLM)


@pytest.mark.parametrize("segments", [0, 2])
def test_generation_with_cache_equals_the_uncached_forward(segments):
    """The source's keys/values computed once, then the target token by token: the same tokens and logits as
    recomputing the whole sequence, and the prefill logits are the forward pass's at the separator."""
    model = unilm(type_vocab_size=segments).eval()
    prompts = [[SOS, 10, 11, 12, SEP], [SOS, 13, SEP]]
    for strategy in ("greedy", "beam"):
        cached = model.generate(prompts, max_new_tokens=6, strategy=strategy, num_beams=3, output_logits=True,
                                stop_ids=[])
        plain = model.generate(prompts, max_new_tokens=6, strategy=strategy, num_beams=3, output_logits=True,
                               stop_ids=[], use_cache=False)
        for a, b in zip(cached.generations, plain.generations, strict=True):
            assert a.token_ids == b.token_ids and len(a.token_ids) == 6
            if strategy == "greedy":
                torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)
    ids = torch.tensor([prompts[0]])
    _, first = model.prefill(ids)
    with torch.no_grad():
        want = model(ids).logits[0, -1]
    torch.testing.assert_close(first[0], want, rtol=1e-5, atol=1e-5)
