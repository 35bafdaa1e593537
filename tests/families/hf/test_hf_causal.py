"""HuggingFace's causal LMs -> maskplay gpt (families/hf/gpt2.py, gpt_neox.py, llama.py, qwen2.py, opt.py): a small
random model built from each config class, saved with save_pretrained and read back from its directory as `maskplay
convert` reads it, gives HuggingFace's fp32 logits (1e-5), its sentence scores (maskplay's causal `score` against a
naive HuggingFace loop summing log-probabilities) and its greedy generation (left-padded prompts, the cache
path); `convert --from-hf` writes it, `convert --to-hf` refuses it in one line."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay.cli import main  # noqa: E402
from maskplay.data.tokenizer import Tokenizer, wordpiece_from_vocab  # noqa: E402
from maskplay.families import GPT, MaskplayModel  # noqa: E402
from maskplay.families.hf import from_hf  # noqa: E402
from maskplay.families.hf.directory import read_hf_dir  # noqa: E402
from maskplay.tasks.score import Scorer  # noqa: E402

VOCAB = 97
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SENTENCES = ["w10 w20 w33 w40 w41", "w7 w8", "w50 w51 w52 w53 w54 w55 w56 w60", "w90"]
SMALL = dict(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=80,
             max_position_embeddings=64)

# architecture -> (config class, model class, config keywords)
CASES = {
    "GPT2LMHeadModel": ("GPT2Config", dict(vocab_size=VOCAB, n_embd=48, n_layer=2, n_head=4, n_positions=64,
                                           bos_token_id=2, eos_token_id=3)),
    # head width 12, half of it rotated (Pythia: a quarter of 64)
    "GPTNeoXForCausalLM": ("GPTNeoXConfig", dict(SMALL, rotary_pct=0.5, rotary_emb_base=500, bos_token_id=2,
                                                 eos_token_id=3)),
    "LlamaForCausalLM": ("LlamaConfig", dict(SMALL, num_key_value_heads=2, rope_theta=500.0, bos_token_id=2,
                                             eos_token_id=3)),
    "Qwen2ForCausalLM": ("Qwen2Config", dict(SMALL, num_key_value_heads=1, tie_word_embeddings=True, bos_token_id=2,
                                             eos_token_id=3)),
    "OPTForCausalLM": ("OPTConfig", dict(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                         ffn_dim=80, max_position_embeddings=64, word_embed_proj_dim=48,
                                         pad_token_id=1, bos_token_id=2, eos_token_id=3)),
}


def build(architecture: str, **overrides):
    config_class, fields = CASES[architecture]
    config = getattr(transformers, config_class)(**{**fields, **overrides})
    torch.manual_seed(0)
    model = getattr(transformers, architecture)(config).eval()
    with torch.no_grad():  # large random weights, norms and biases, so that a missed transform or bias shows
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.15)
            elif "norm" in name or "ln" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3)
    return model


def saved(model, directory):
    """save_pretrained, and the model HuggingFace reads back (the parity is against the reloaded one)."""
    model.save_pretrained(directory)
    return type(model).from_pretrained(directory).eval()


def tokenizer(directory) -> Tokenizer:
    vocab = directory / "vocab.txt"
    vocab.write_text("".join(f"{SPECIALS[i] if i < len(SPECIALS) else f'w{i}'}\n" for i in range(VOCAB)))
    return Tokenizer(wordpiece_from_vocab(vocab))


def convert(directory, tok: Tokenizer | None = None) -> GPT:
    architecture, hf_config, state = read_hf_dir(directory)
    ids = None
    if tok is not None:
        ids = tok.model_config_ids()
        del ids["vocab_size"]
    model = from_hf(architecture, (hf_config, state), special_ids=ids)
    assert isinstance(model, GPT)
    return model


def right_padded():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (3, 13), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 9:] = 0
    attn[2, 4:] = 0
    return ids.masked_fill(attn == 0, 0), attn


def left_padded():
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, VOCAB, (3, 9), generator=g)
    attn = torch.ones_like(ids)
    attn[1, :3] = 0
    attn[2, :6] = 0
    return ids.masked_fill(attn == 0, 0), attn


def check_parity(hf, model, tok: Tokenizer) -> None:
    """Logits (fp32, 1e-5), sentence scores against a naive HuggingFace loop (1e-4 nats), greedy generation."""
    ids, attn = right_padded()
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=attn).logits
        got = model(ids, attention_mask=attn.bool()).logits
    real = attn.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)

    scores = Scorer(model, tok, batch_size=3).score(SENTENCES)
    for sentence, score in zip(SENTENCES, scores, strict=True):
        row = [tok.special.sos, *score.token_ids]  # the pieces, after [SOS]
        with torch.no_grad():
            log_probs = hf(input_ids=torch.tensor([row])).logits[0].log_softmax(-1)
        naive = sum(log_probs[i - 1, row[i]].item() for i in range(1, len(row)))
        assert score.log_prob == pytest.approx(naive, abs=1e-4), sentence

    ids, attn = left_padded()
    with torch.no_grad():
        greedy = hf.generate(input_ids=ids, attention_mask=attn, max_new_tokens=6, do_sample=False, pad_token_id=0,
                             eos_token_id=None)[:, ids.shape[1]:]
    assert [g.token_ids for g in model.generate(ids, attention_mask=attn.bool(), max_new_tokens=6, stop_ids=[])] \
        == greedy.tolist()


@pytest.mark.parametrize("architecture", CASES)
def test_parity_with_huggingface(architecture, tmp_path):
    hf = saved(build(architecture), tmp_path / "hf")
    tok = tokenizer(tmp_path)
    check_parity(hf, convert(tmp_path / "hf", tok), tok)


# ---- GPT-2 ----------------------------------------------------------------------------------------------------


def test_gpt2_maps_onto_the_causal_switches(tmp_path):
    saved(build("GPT2LMHeadModel"), tmp_path / "hf")
    config = convert(tmp_path / "hf").config
    assert (config.norm_placement, config.gelu_tanh, config.embedding_norm, config.lm_head) == ("pre", True, False,
                                                                                                "tied")
    assert (config.sos_token_id, config.eos_token_id, config.pad_token_id) == (2, 3, 3)  # pad: none, the end token


def test_gpt2_bare_model_keys_and_mask_buffers_are_read(tmp_path):
    """The hub's gpt2 checkpoint is a GPT2Model's (no `transformer.` prefix, no lm_head) with the causal mask's
    buffers (h.N.attn.bias); an unknown weight is an error naming it."""
    hf = saved(build("GPT2LMHeadModel"), tmp_path / "hf")
    architecture, hf_config, state = read_hf_dir(tmp_path / "hf")
    bare = {k.removeprefix("transformer."): v for k, v in state.items() if k != "lm_head.weight"}
    bare["h.0.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
    model = from_hf(architecture, (hf_config, bare))
    ids, _ = right_padded()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, hf(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"no maskplay counterpart: \['h.0.attn.rotary.weight'\]"):
        from_hf(architecture, (hf_config, {**bare, "h.0.attn.rotary.weight": torch.zeros(2)}))
    del bare["h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match=r"missing weights.*encoder.layers.1.ffn.up.bias"):
        from_hf(architecture, (hf_config, bare))


# ---- the command line -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", CASES)
def test_cli_converts_from_hf_and_refuses_to_hf(architecture, tmp_path, capsys):
    hf = saved(build(architecture), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del config["architectures"]  # told by model_type
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mp")]) == 0
    assert f"gpt (a {architecture})" in capsys.readouterr().out
    model = MaskplayModel.from_pretrained(tmp_path / "mp").eval()
    ids, attn = right_padded()
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=attn).logits[attn.bool()]
        torch.testing.assert_close(model(ids, attention_mask=attn.bool()).logits[attn.bool()], want, atol=1e-5,
                                   rtol=1e-5)
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "back")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no HuggingFace gpt counterpart" in err and "Traceback" not in err
    assert not (tmp_path / "back").exists()


# ---- GPT-NeoX -------------------------------------------------------------------------------------------------


def test_gpt_neox_maps_onto_the_causal_switches(tmp_path):
    saved(build("GPTNeoXForCausalLM"), tmp_path / "hf")
    config = convert(tmp_path / "hf").config
    assert (config.positions, config.rotary_fraction, config.rotary_base, config.parallel_residual) == \
        ("rotary", 0.5, 500.0, True)
    assert (config.lm_head, config.embedding_norm, config.norm_placement) == ("untied", False, "pre")


def test_gpt_neox_sequential_residual_and_tied_head(tmp_path):
    """use_parallel_residual = false is the plain pre-norm block; tie_word_embeddings a tied head."""
    hf = saved(build("GPTNeoXForCausalLM", use_parallel_residual=False, tie_word_embeddings=True), tmp_path / "hf")
    model = convert(tmp_path / "hf")
    assert not model.config.parallel_residual and model.config.lm_head == "tied"
    ids, attn = right_padded()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=attn.bool()).logits[attn.bool()],
                                   hf(input_ids=ids, attention_mask=attn).logits[attn.bool()], atol=1e-5, rtol=1e-5)


# ---- LLaMA and Qwen2 ------------------------------------------------------------------------------------------


def test_llama_maps_onto_the_causal_switches(tmp_path):
    saved(build("LlamaForCausalLM"), tmp_path / "hf")
    model = convert(tmp_path / "hf")
    config = model.config
    assert (config.num_kv_heads, config.rotary_base, config.norm, config.ffn, config.lm_head) == \
        (2, 500.0, "rmsnorm", "swiglu", "untied")
    assert config.ffn_width == 80 and not config.attention_bias and not config.ffn_bias
    cache, _ = model.prefill(torch.tensor([[2, 10, 11]]))
    assert cache.keys[0].shape[1] == 2  # the cache holds the key/value heads


def test_smollm_shaped_llama_tied_with_biases(tmp_path):
    """SmolLM2's tied head, and LLaMA's optional attention and MLP biases."""
    hf = saved(build("LlamaForCausalLM", tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                     intermediate_size=81), tmp_path / "hf")
    tok = tokenizer(tmp_path)
    model = convert(tmp_path / "hf", tok)
    assert model.config.lm_head == "tied" and model.config.ffn_width == 81
    check_parity(hf, model, tok)


def test_qwen2_has_query_key_value_biases_and_no_output_bias(tmp_path):
    saved(build("Qwen2ForCausalLM"), tmp_path / "hf")
    model = convert(tmp_path / "hf")
    attn = model.encoder.layers[0].attn
    assert attn.query.bias.abs().sum() > 0 and not attn.out.bias.any() and model.config.num_kv_heads == 1


@pytest.mark.parametrize("architecture, fields, message", [
    ("LlamaForCausalLM", dict(hidden_act="gelu"), "only 'silu'"),
    ("LlamaForCausalLM", dict(head_dim=16), "head_dim 16"),
    ("LlamaForCausalLM", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "RoPE scaling 'linear'"),
    ("Qwen2ForCausalLM", dict(use_sliding_window=True, sliding_window=8), "use_sliding_window"),
])
def test_unsupported_configs_are_one_line_errors(tmp_path, architecture, fields, message):
    saved(build(architecture), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **fields}))
    with pytest.raises(ValueError, match=message) as err:
        convert(tmp_path / "hf")
    assert "\n" not in str(err.value)


# ---- OPT ------------------------------------------------------------------------------------------------------


def test_opt_drops_the_position_offset_rows(tmp_path):
    hf = saved(build("OPTForCausalLM"), tmp_path / "hf")
    model = convert(tmp_path / "hf")
    assert (model.config.ffn, model.config.norm_placement, model.config.pad_token_id) == ("relu", "pre", 1)
    table = hf.model.decoder.embed_positions.weight
    assert model.config.max_position == 64 and torch.equal(model.embeddings.position.weight, table[2:])


def test_opt_post_norm(tmp_path):
    """do_layer_norm_before = false: post-norm blocks and no final norm."""
    hf = saved(build("OPTForCausalLM", do_layer_norm_before=False), tmp_path / "hf")
    model = convert(tmp_path / "hf")
    assert model.config.norm_placement == "post" and model.encoder.final_norm is None
    ids, attn = right_padded()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=attn.bool()).logits[attn.bool()],
                                   hf(input_ids=ids, attention_mask=attn).logits[attn.bool()], atol=1e-5, rtol=1e-5)


def test_opt_with_projected_embeddings_is_refused(tmp_path):
    saved(build("OPTForCausalLM", word_embed_proj_dim=32), tmp_path / "hf")
    with pytest.raises(ValueError, match="word_embed_proj_dim 32 differs from hidden_size 48"):
        convert(tmp_path / "hf")


def test_a_list_of_end_tokens_takes_the_first(tmp_path):
    """LLaMA 3's config.json lists its end tokens; a list of anything else is still refused by name."""
    saved(build("LlamaForCausalLM"), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "eos_token_id": [4, 3]}))
    assert convert(tmp_path / "hf").config.eos_token_id == 4
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "eos_token_id": ["4"]}))
    with pytest.raises(ValueError, match="eos_token_id"):
        convert(tmp_path / "hf")


def test_convert_then_maskplay_score_on_the_command_line(tmp_path, capsys):
    """A HuggingFace directory with a tokenizer.json: converted, its special tokens are the tokenizer's, and `maskplay
    score` (method causal, the gpt family's own) gives the naive HuggingFace loop's sentence log-likelihoods."""
    hf = saved(build("LlamaForCausalLM", tie_word_embeddings=True), tmp_path / "hf")
    tok = tokenizer(tmp_path)
    tok.save(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mp")]) == 0
    assert "copied tokenizer.json" in capsys.readouterr().out
    assert main(["score", str(tmp_path / "mp"), *SENTENCES[:2], "--format", "jsonl", "--precision", "fp32"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["method"] for r in rows] == ["causal", "causal"]
    for sentence, row in zip(SENTENCES, rows, strict=False):
        ids = [tok.special.sos, *tok.encode(sentence)[1:-1]]
        with torch.no_grad():
            log_probs = hf(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
        assert row["log_prob"] == pytest.approx(sum(log_probs[i - 1, ids[i]].item() for i in range(1, len(ids))),
                                                abs=1e-4)


def test_gpt_neox_config_of_older_transformers(tmp_path):
    """Pythia's config.json on the hub predates rope_parameters: rotary_pct and rotary_emb_base say the same."""
    hf = saved(build("GPTNeoXForCausalLM"), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del config["rope_parameters"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "rotary_pct": 0.5, "rotary_emb_base": 500}))
    model = convert(tmp_path / "hf")
    assert (model.config.rotary_fraction, model.config.rotary_base) == (0.5, 500.0)
    ids, _ = right_padded()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, hf(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


def test_a_tied_head_that_differs_from_the_word_embeddings_is_refused():
    from maskplay.families.hf.causal import without_tied_head

    word = torch.randn(5, 3)
    state = {"wte.weight": word, "lm_head.weight": word.clone()}
    assert set(without_tied_head(state, "lm_head.weight", "wte.weight", True)) == {"wte.weight"}
    assert set(without_tied_head(state, "lm_head.weight", "wte.weight", False)) == {"wte.weight", "lm_head.weight"}
    state["lm_head.weight"] = word + 1
    with pytest.raises(ValueError, match="lm_head.weight differs from the word embeddings"):
        without_tied_head(state, "lm_head.weight", "wte.weight", True)
