"""A random HuggingFace XLNetLMHeadModel, converted, gives the same content stream, query stream and logits as
maskplay's XLNet under the same perm_mask, target_mapping, segments and memory; converted back (by function and
by `maskplay convert`), HuggingFace loads it and gives them again."""

import dataclasses
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402

from maskplay import MaskplayModel  # noqa: E402
from maskplay.cli import main  # noqa: E402
from maskplay.families import XLNet  # noqa: E402
from maskplay.families.hf import from_hf, to_hf  # noqa: E402
from maskplay.families.hf.xlnet import config_from_hf_xlnet, hf_xlnet_to_maskplay, maskplay_to_hf_xlnet  # noqa: E402
from maskplay.nn.masks import from_perm_mask, to_perm_mask  # noqa: E402

VOCAB, L, B = 60, 9, 3


def hf_model(mem_len=None) -> "transformers.XLNetLMHeadModel":
    torch.manual_seed(0)
    config = transformers.XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=4, d_inner=48, mem_len=mem_len,
                                      pad_token_id=5)
    model = transformers.XLNetLMHeadModel(config).eval()
    with torch.no_grad():  # random biases, LayerNorms and segment embeddings, so that a missed one shows
        for name, p in model.named_parameters():
            if "bias" in name or "seg_embed" in name or "layer_norm" in name:
                p.normal_(std=0.5)
    return model


def permutation_inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, VOCAB, (B, L), generator=g)
    segments = (torch.arange(L)[None] >= torch.tensor([[3], [5], [9]])).long()
    rank = torch.stack([torch.randperm(L, generator=g) for _ in range(B)])
    may = rank[:, None, :] < rank[:, :, None]  # i may see j when j comes earlier in the order
    targets = torch.stack([(rank[b] >= L - 3).nonzero().squeeze(1) for b in range(B)])  # never the first step
    return ids, segments, may, torch.nn.functional.one_hot(targets, L).float()


def test_perm_mask_convention_flips_once():
    may = torch.rand(2, 5, 5) > 0.5
    perm = to_perm_mask(may)
    assert perm.dtype == torch.float32 and bool(((perm == 1) == ~may).all())
    assert torch.equal(from_perm_mask(perm), may)


@pytest.mark.parametrize("segments_on", [False, True])
def test_two_streams_and_logits_match_huggingface(segments_on):
    hf = hf_model()
    config = config_from_hf_xlnet(hf.config)
    ours = XLNet(config).eval()
    ours.load_strict(hf_xlnet_to_maskplay(hf.state_dict(), config.num_layers))
    ids, segments, may, mapping = permutation_inputs(1)
    tt = segments if segments_on else None
    with torch.no_grad():
        theirs = hf(ids, perm_mask=to_perm_mask(may), target_mapping=mapping, token_type_ids=tt,
                    output_hidden_states=True, use_mems=True)
        h, g, mems = ours.with_perm_mask(ids, to_perm_mask(may), mapping, token_type_ids=tt)
    their_h, their_g = theirs.hidden_states[-2:]
    torch.testing.assert_close(h, their_h, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g, their_g, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.logits(g), theirs.logits, atol=1e-5, rtol=1e-5)
    for our_mem, their_mem in zip(mems, theirs.mems, strict=True):  # HuggingFace's memory is (M, B, H)
        torch.testing.assert_close(our_mem, their_mem.transpose(0, 1), atol=1e-5, rtol=1e-5)
    # the next segment reads that memory, in both
    nxt = torch.randint(7, VOCAB, (B, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs2 = hf(nxt, mems=theirs.mems, use_mems=True, output_hidden_states=True)
        h2, _, _ = ours.with_perm_mask(nxt, mems=mems)
    torch.testing.assert_close(h2, theirs2.hidden_states[-1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.logits(h2), theirs2.logits, atol=1e-5, rtol=1e-5)


def test_back_to_huggingface_gives_the_same_outputs():
    torch.manual_seed(3)
    hf = hf_model()
    config = config_from_hf_xlnet(hf.config)
    ours = XLNet(config).eval()  # a model of our own, randomly initialised
    (hf_config, state), = to_hf(ours)
    assert hf_config["architectures"] == ["XLNetLMHeadModel"]
    back = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**hf_config)).eval()
    back.load_state_dict(state, strict=True)
    ids, segments, may, mapping = permutation_inputs(4)
    with torch.no_grad():
        theirs = back(ids, perm_mask=to_perm_mask(may), target_mapping=mapping, token_type_ids=segments)
        _, g, _ = ours.with_perm_mask(ids, to_perm_mask(may), mapping, token_type_ids=segments)
    torch.testing.assert_close(ours.logits(g), theirs.logits, atol=1e-5, rtol=1e-5)
    # and the state dict survives the round trip exactly
    again = maskplay_to_hf_xlnet(ours.state_dict(), config)
    assert all(torch.equal(again[k], v) for k, v in state.items())


def test_convert_command_both_ways(tmp_path):
    hf = hf_model(mem_len=16)
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({**hf.config.to_dict(), "architectures": ["XLNetLMHeadModel"]}))
    save_file({k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_loss.weight"},
              str(hf_dir / "model.safetensors"))
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "ours")]) == 0
    ours = MaskplayModel.from_pretrained(tmp_path / "ours").eval()
    assert ours.family == "xlnet" and ours.config.xlnet.mem_len == 16 and ours.config.pad_token_id == 5
    assert main(["convert", "--to-hf", str(tmp_path / "ours"), "--out", str(tmp_path / "back")]) == 0
    back = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "back").eval()
    ids, segments, may, mapping = permutation_inputs(5)
    with torch.no_grad():
        want = hf(ids, perm_mask=to_perm_mask(may), target_mapping=mapping).logits
        got = back(ids, perm_mask=to_perm_mask(may), target_mapping=mapping).logits
        _, g, _ = ours.with_perm_mask(ids, to_perm_mask(may), mapping)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.logits(g), want, atol=1e-5, rtol=1e-5)


def test_unsupported_settings_are_named():
    hf = hf_model()
    for name, value in (("attn_type", "uni"), ("bi_data", True), ("ff_activation", "relu")):
        config = transformers.XLNetConfig(**{**hf.config.to_dict(), name: value})
        with pytest.raises(ValueError, match=name):
            config_from_hf_xlnet(config)
    config = config_from_hf_xlnet(hf.config)
    state = hf_xlnet_to_maskplay(hf.state_dict(), config.num_layers)
    with pytest.raises(ValueError, match="missing the weight"):
        hf_xlnet_to_maskplay({k: v for k, v in hf.state_dict().items() if "layer.1.ff.layer_2.bias" not in k}, 2)
    biased = XLNet(dataclasses.replace(config, attention_bias=True))
    with pytest.raises(ValueError, match="attention_bias"):
        to_hf(biased)
    assert "query_start" in state and "head.bias" in state


def test_from_hf_function_matches_load(tmp_path):
    hf = hf_model()
    model = from_hf("XLNetLMHeadModel", (hf.config, hf.state_dict()))
    assert isinstance(model, XLNet) and not model.training
