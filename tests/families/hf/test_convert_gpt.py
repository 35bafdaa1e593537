"""maskplay GPT <-> HuggingFace BertLMHeadModel (is_decoder=True): a random HuggingFace decoder, converted, gives
the same logits (padding on either side) and the same greedy generation; a maskplay GPT converts back; and the same
through `maskplay convert`."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay import GPT, MaskplayModel, preset  # noqa: E402
from maskplay.cli import main  # noqa: E402
from maskplay.families.hf.gpt import (  # noqa: E402
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


# ---- the command line -------------------------------------------------------------------------------------


def save_hf(model, directory, tokenizer: bool = False):
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer:
        from maskplay.data.tokenizer import wordpiece_from_vocab

        vocab = directory / "vocab.txt"
        specials = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
        vocab.write_text("".join(specials.get(i, f"tok{i}") + "\n" for i in range(VOCAB)))
        wordpiece_from_vocab(vocab).save(str(directory / "tokenizer.json"))
    return directory


def close_on_real_tokens(a, b, attn):
    torch.testing.assert_close(a[attn.bool()], b[attn.bool()], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("named", [True, False], ids=["architectures", "model_type-and-is_decoder"])
def test_cli_round_trip_hf_maskplay_hf(hf_model, tmp_path, capsys, named):
    """HF -> maskplay -> HF: the same fp32 logits at every step, right- and left-padded; without `architectures`,
    model_type bert with is_decoder = true is taken for a BertLMHeadModel."""
    hf_dir = save_hf(hf_model, tmp_path / "hf", tokenizer=True)
    if not named:
        config = json.loads((hf_dir / "config.json").read_text())
        del config["architectures"]
        (hf_dir / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "mp")]) == 0
    out = capsys.readouterr().out
    assert "gpt (a BERT decoder)" in out and "copied tokenizer.json" in out
    assert sorted(p.name for p in (tmp_path / "mp").iterdir()) == ["config.json", "manifest.json", "model.safetensors",
                                                                  "tokenizer.json"]
    model = MaskplayModel.from_pretrained(tmp_path / "mp").eval()
    assert isinstance(model, GPT) and model.config.family == "gpt"
    assert (model.config.pad_token_id, model.config.mask_token_id, model.config.sos_token_id) == (0, 103, 101)

    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "back")]) == 0
    assert "wrote" in capsys.readouterr().out
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == ["BertLMHeadModel"] and config["is_decoder"] is True
    assert (tmp_path / "back" / "tokenizer.json").is_file()
    back, info = transformers.BertLMHeadModel.from_pretrained(tmp_path / "back", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    back = back.eval()
    for side in ("right", "left"):
        ids, attn = batch(side)
        with torch.no_grad():
            want = hf_model(input_ids=ids, attention_mask=attn).logits
            close_on_real_tokens(model(ids, attention_mask=attn.bool()).logits, want, attn)
            close_on_real_tokens(back(input_ids=ids, attention_mask=attn).logits, want, attn)


def test_cli_maskplay_gpt_round_trip(tmp_path):
    """A maskplay-native GPT (no segment table) -> HF -> maskplay: the same weights and logits."""
    torch.manual_seed(5)
    model = randomised(GPT(preset("tiny", family="gpt", vocab_size=VOCAB))).eval()
    model.save_pretrained(tmp_path / "mp")
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["type_vocab_size"] == 1
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "back")]) == 0
    back = MaskplayModel.from_pretrained(tmp_path / "back").eval()
    assert isinstance(back, GPT) and back.config.type_vocab_size == 1
    ids, attn = batch("left")
    with torch.no_grad():
        close_on_real_tokens(back(ids, attention_mask=attn.bool()).logits,
                             model(ids, attention_mask=attn.bool()).logits, attn)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_cli_damaged_hf_weights_are_one_line_naming_the_file(hf_model, tmp_path, capsys, damage):
    hf_dir = save_hf(hf_model, tmp_path / "hf")
    weights = hf_dir / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x07" * 64, "empty": b""}[damage])
    capsys.readouterr()
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "mp")]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and str(weights) in err and "damaged" in err, err
    assert "Traceback" not in captured.err and not (tmp_path / "mp").exists()


def test_cli_refuses_causal_models_without_a_maskplay_counterpart(hf_model, tmp_path, capsys):
    """is_decoder makes a BertForMaskedLM causal: converting it to a (bidirectional) bert would change its logits."""
    hf_dir = save_hf(hf_model, tmp_path / "hf")
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    capsys.readouterr()
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "mp")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is_decoder" in err and "BertLMHeadModel" in err
    # a BertLMHeadModel that is not a decoder is refused by name
    (hf_dir / "config.json").write_text(json.dumps({**config, "is_decoder": False}))
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "mp")]) == 2
    assert "is_decoder is false" in capsys.readouterr().err
    assert not (tmp_path / "mp").exists()
