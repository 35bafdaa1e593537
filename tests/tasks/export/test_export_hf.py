"""`maskplay export --to-hf`: every family out as HuggingFace custom code (or its twin). The oracle is maskplay
itself: a tiny random model of each family, with the switches the families and the bundled models use, exported and
loaded with transformers' Auto classes (trust_remote_code=True) gives maskplay's logits to 1e-5 (fp32) and its greedy
tokens; AutoTokenizer on the export gives maskplay's ids, specials included; the custom code loads in a Python that
cannot import maskplay; a switch the standalone file lacks is refused in one line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay import preset  # noqa: E402
from maskplay.cli import main  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import MaskplayModel, build_model  # noqa: E402
from maskplay.runtime.model_dir import resolve_model_dir  # noqa: E402
from maskplay.tasks.decoding import generate  # noqa: E402
from maskplay.tasks.export import export_to_hf  # noqa: E402
from maskplay.tasks.export.card import dev_results  # noqa: E402

TOKENIZER = resolve_model_dir("tta-mini-wiki") / "tokenizer.json"
SENTENCES = ["the cat sat on the mat .", "a dog", "history of the city of rome and its empire"]
GPT_BERT_RECIPE = dict(positions="disentangled", norm_placement="pre", norm_affine=False, attention_output_norm=True,
                       value_gate=True, ffn="geglu", ffn_bias=False, gelu_tanh=True, ffn_inner_norm=True,
                       denseformer=True, weight_init="truncated-depth-scaled", layer_norm_eps=1e-5)
TWO_HOUR = dict(positions="rotary", norm_placement="pre", ffn="swiglu")
CASES = {
    "tta": ("tta", {}),
    "tta-two-hour-switches": ("tta", TWO_HOUR),
    "tta-t5-deepnorm-rms": ("tta", dict(positions="t5", norm_placement="deepnorm", norm="rmsnorm", ffn="geglu")),
    "gpt": ("gpt", {}),
    "gpt-two-hour-switches": ("gpt", TWO_HOUR),
    "gpt-alibi-nobias-keysize": ("gpt", dict(positions="alibi", attention_bias=False, ffn_bias=False, key_size=4,
                                             gelu_tanh=True, head_norm=True)),
    "gpt-t5-sinusoidal-shared": ("gpt", dict(positions="t5", share_layers=True, embedding_size=16)),
    "bert": ("bert", dict(type_vocab_size=2)),
    "bert-sinusoidal": ("bert", dict(positions="sinusoidal", norm="rmsnorm", norm_placement="pre")),
    "unilm": ("unilm", {}),
    "gpt-bert": ("gpt-bert", {}),
    "gpt-bert-recipe": ("gpt-bert", GPT_BERT_RECIPE),
    "gpt-bert-none": ("gpt-bert", dict(positions="none")),
}


def tiny(family: str, seed: int = 0, **switches) -> MaskplayModel:
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(TOKENIZER)
    config = preset("tiny", family=family, max_position=64, **tokenizer.model_config_ids(), **switches)
    model = build_model(config).eval()
    with torch.no_grad():  # activations of order 1 (not BERT's small init) and random norms, biases and DenseFormer
        for p in model.parameters():  # weights, so that a missed or approximated piece shows
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return model


def saved(model: MaskplayModel, path: Path) -> Path:
    model.save_pretrained(path)
    (path / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    return path


def batch(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [tokenizer.encode(s) for s in SENTENCES]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    return ids, (ids != 0).long()


def maskplay_logits(model: MaskplayModel, ids, attn, causal: bool) -> torch.Tensor:
    kwargs = {"causal": True} if causal and "causal" in model.forward.__code__.co_varnames else {}
    with torch.no_grad():
        return model(ids, attention_mask=attn, **kwargs).logits


@pytest.mark.parametrize("case", list(CASES))
def test_custom_code_logits_equal_maskplay(case, tmp_path):
    family, switches = CASES[case]
    model = tiny(family, **switches)
    export_to_hf(saved(model, tmp_path / "mp"), tmp_path / "hf", custom_code=True)
    auto = json.loads((tmp_path / "hf" / "config.json").read_text())["auto_map"]
    ids, attn = batch(load_tokenizer(TOKENIZER))
    real = attn.bool()
    checked = 0
    for name, causal in (("AutoModelForMaskedLM", False), ("AutoModelForCausalLM", True)):
        if name not in auto:
            continue
        hf = getattr(transformers, name).from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
        with torch.no_grad():
            theirs = hf(input_ids=ids, attention_mask=attn).logits
        ours = maskplay_logits(model, ids, attn, causal)
        torch.testing.assert_close(theirs[real], ours[real], atol=1e-5, rtol=1e-5)
        checked += 1
    assert checked == (2 if family in ("unilm", "gpt-bert") else 1)
    base = transformers.AutoModel.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    kwargs = model.embedding_kwargs()
    with torch.no_grad():
        hidden = base(input_ids=ids, attention_mask=attn).last_hidden_state
        ours = model(ids, attention_mask=attn, **kwargs).last_hidden_state
    torch.testing.assert_close(hidden[real], ours[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["gpt", "gpt-bert", "unilm"])
def test_generate_equals_maskplay_greedy(family, tmp_path):
    model = tiny(family, seed=3, **(TWO_HOUR if family == "gpt" else {}))
    export_to_hf(saved(model, tmp_path / "mp"), tmp_path / "hf", custom_code=True)
    tokenizer = load_tokenizer(TOKENIZER)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    hf.generation_config.eos_token_id = None  # maskplay's stop_ids=[] below: both run the whole length
    prefix, suffix = model.generation_frame(tokenizer)
    prompts = [prefix + tokenizer.backend.encode(text, add_special_tokens=False).ids + suffix for text in SENTENCES]
    ours = [g.token_ids for g in generate(model, prompts, max_new_tokens=10, stop_ids=[])]
    for prompt, tokens in zip(prompts, ours, strict=True):
        assert hf.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False)[0, len(prompt):].tolist() == tokens
    width = max(map(len, prompts))  # a left-padded batch: positions count from each row's first real token
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    out = hf.generate(ids, attention_mask=(ids != 0).long(), max_new_tokens=10, do_sample=False)
    assert out[:, width:].tolist() == ours


@pytest.mark.parametrize("case", ["gpt-two-hour-switches", "gpt-alibi-nobias-keysize", "gpt-t5-sinusoidal-shared",
                                  "gpt-bert-recipe"])
def test_key_value_cache_gives_the_whole_passs_logits_and_greedy_tokens(case, tmp_path):
    """A prefix run with use_cache=True, then the rest fed with its cache, gives the logits of one pass over the
    whole padded batch (1e-5); generate() then runs one token per step and gives maskplay's greedy tokens."""
    family, switches = CASES[case]
    model = tiny(family, seed=3, **switches)
    export_to_hf(saved(model, tmp_path / "mp"), tmp_path / "hf", custom_code=True)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    tokenizer = load_tokenizer(TOKENIZER)
    rows = [tokenizer.encode(s) for s in SENTENCES]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])  # left-padded, as generate() batches
    attn = (ids != 0).long()
    cut = width - 3
    with torch.no_grad():
        whole = hf(input_ids=ids, attention_mask=attn).logits
        first = hf(input_ids=ids[:, :cut], attention_mask=attn[:, :cut], use_cache=True)
        cache = first.cache if "cache" in first else first.past_key_values
        assert cache is not None and cache.get_seq_length() == cut
        rest = hf(input_ids=ids[:, cut:], attention_mask=attn, cache=cache).logits
    real = attn.bool()
    torch.testing.assert_close(torch.cat([first.logits, rest], 1)[real], whole[real], atol=1e-5, rtol=1e-5)
    lengths = []
    hf.register_forward_pre_hook(lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
                                 with_kwargs=True)
    hf.generation_config.eos_token_id = None
    prompt = rows[0][:-1]
    ours = generate(model, [prompt], max_new_tokens=6, stop_ids=[])[0].token_ids
    assert hf.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist() == ours
    assert lengths == [len(prompt)] + [1] * 5  # the prompt once, then one token a step: the cache is used


@pytest.mark.parametrize("name", ["gpt-two-hour", "tta-two-hour"])
def test_bundled_model_exports_by_name(name, tmp_path):
    """The bundled model by its name, logits equal; the tokenizer under AutoTokenizer frames as maskplay does."""
    lines = export_to_hf(name, tmp_path / "hf")
    assert "custom code" in lines[0]
    model = MaskplayModel.from_pretrained(name).eval()
    tokenizer = load_tokenizer(resolve_model_dir(name))
    theirs_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    enc = theirs_tok(SENTENCES, padding=True, return_tensors="pt")
    for k, s in enumerate(SENTENCES):
        assert enc["input_ids"][k][enc["attention_mask"][k].bool()].tolist() == tokenizer.encode(s)
    ids, attn = enc["input_ids"], enc["attention_mask"]
    auto = transformers.AutoModelForCausalLM if model.causal else transformers.AutoModelForMaskedLM
    hf = auto.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=attn).logits
    ours = maskplay_logits(model, ids, attn, causal=False)
    torch.testing.assert_close(theirs[attn.bool()], ours[attn.bool()], atol=1e-5, rtol=1e-5)
    card = (tmp_path / "hf" / "README.md").read_text()
    results = dev_results((resolve_model_dir(name) / "README.md").read_text())
    assert card.startswith("---\nlibrary_name: transformers\n") and "- custom_code" in card and results
    assert all(f"value: {value}" in card for _, value in results) and "## maskplay's model card" in card
    meta = pytest.importorskip("yaml").safe_load(card.split("---\n")[1])  # the Hub's YAML front matter
    metrics = meta["model-index"][0]["results"][0]["metrics"]
    assert meta["library_name"] == "transformers" and [(m["name"], m["value"]) for m in metrics] == results


@pytest.mark.parametrize("family", ["tta", "gpt", "bert", "unilm", "gpt-bert"])
def test_auto_tokenizer_gives_maskplay_ids(family, tmp_path):
    """Twin or custom code, AutoTokenizer frames every sentence as maskplay does ([SOS] ... [EOS]), and config.json
    carries the ids generate() and lm-eval read."""
    export_to_hf(saved(tiny(family), tmp_path / "mp"), tmp_path / "hf")
    tokenizer = load_tokenizer(TOKENIZER)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    for s in SENTENCES:
        assert theirs(s)["input_ids"] == tokenizer.encode(s)
    pair = theirs("a dog", "the cat")["input_ids"]
    sp = tokenizer.special
    assert pair == [sp.sos, *tokenizer.backend.encode("a dog", add_special_tokens=False).ids, sp.sep,
                    *tokenizer.backend.encode("the cat", add_special_tokens=False).ids, sp.eos]
    assert (theirs.bos_token_id, theirs.eos_token_id, theirs.pad_token_id, theirs.mask_token_id) == \
        (sp.sos, sp.eos, sp.pad, sp.mask)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (sp.sos, sp.eos, sp.pad)


def test_byte_level_bpe_tokenizer_frames_as_maskplay(tmp_path):
    """GPT-BERT's cased byte-level BPE: AutoTokenizer on the export gives maskplay's ids and decodes back."""
    from maskplay.data.tokenizer import train_byte_bpe

    tokenizer = train_byte_bpe(SENTENCES * 20 + ["The Cat, the cat; THE CAT!"] * 5, vocab_size=300)
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="gpt-bert", max_position=64, **tokenizer.model_config_ids()))
    model.save_pretrained(tmp_path / "mp")
    tokenizer.save(tmp_path / "mp")
    export_to_hf(tmp_path / "mp", tmp_path / "hf")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    for text in [*SENTENCES, "The Cat, the cat; THE CAT!", "  spaces  and ünïcode"]:
        ids = theirs(text)["input_ids"]
        assert ids == tokenizer.encode(text)
        assert theirs.decode(ids, skip_special_tokens=True) == tokenizer.decode(ids)


def test_every_file_has_a_user_files_mode(tmp_path):
    """0666 less the umask (0644 under the usual 022), model.safetensors included: safetensors writes 0600."""
    mask = os.umask(0o022)
    os.umask(mask)
    export_to_hf(saved(tiny("gpt"), tmp_path / "mp"), tmp_path / "hf")  # the twin (BertLMHeadModel)
    export_to_hf(tmp_path / "mp", tmp_path / "custom", custom_code=True)
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "converted")]) == 0
    files = [p for d in ("hf", "custom", "converted") for p in (tmp_path / d).iterdir()]
    assert any(p.name == "model.safetensors" for p in files)
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


def test_custom_code_loads_without_maskplay(tmp_path):
    """The export's code imports torch and transformers only: a Python that cannot import maskplay (-I -S: no
    PYTHONPATH, no current directory, no .pth files; run from an empty folder) loads it, same logits."""
    model = tiny("tta", **TWO_HOUR)
    export_to_hf(saved(model, tmp_path / "mp"), tmp_path / "hf")
    ids, attn = batch(load_tokenizer(TOKENIZER))
    torch.save({"ids": ids, "attn": attn}, tmp_path / "batch.pt")
    site = [p for p in sys.path if p.endswith("site-packages")]
    # -S: no site processing, so no .pth file (an editable maskplay is one); the packages' folder added by hand
    script = (f"import sys\nsys.path += {site!r}\nimport torch, transformers\n"
              "try:\n    import maskplay\n    sys.exit('maskplay is importable')\nexcept ImportError:\n    pass\n"
              f"b = torch.load({str(tmp_path / 'batch.pt')!r}, weights_only=True)\n"
              f"m = transformers.AutoModelForMaskedLM.from_pretrained({str(tmp_path / 'hf')!r}, trust_remote_code=True)\n"
              "with torch.no_grad():\n    out = m(input_ids=b['ids'], attention_mask=b['attn']).logits\n"
              f"torch.save(out, {str(tmp_path / 'out.pt')!r})\n")
    (tmp_path / "empty").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], cwd=tmp_path / "empty", env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = torch.load(tmp_path / "out.pt", weights_only=True)
    with torch.no_grad():
        ours = model(ids, attention_mask=attn).logits
    torch.testing.assert_close(theirs[attn.bool()], ours[attn.bool()], atol=1e-5, rtol=1e-5)


def test_tta_prediction_ignores_its_own_token(tmp_path):
    """BabyLM's `mlm` backend scores token i on a copy with [MASK] at i: for T-TA that equals the one pass,
    since T-TA never sees the token it predicts. The export's logits at i do not change when token i is masked."""
    export_to_hf(saved(tiny("tta", **TWO_HOUR), tmp_path / "mp"), tmp_path / "hf")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    tokenizer = load_tokenizer(TOKENIZER)
    ids = torch.tensor([tokenizer.encode(SENTENCES[2])])
    with torch.no_grad():
        whole = hf(input_ids=ids).logits[0]
        for i in range(ids.shape[1]):
            masked = ids.clone()
            masked[0, i] = tokenizer.special.mask
            torch.testing.assert_close(hf(input_ids=masked).logits[0, i], whole[i], atol=1e-5, rtol=1e-5)


def test_refusals_are_one_line(tmp_path, capsys):
    talking = saved(tiny("gpt", talking_heads=True), tmp_path / "talking")
    assert main(["export", "--to-hf", str(talking), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "talking_heads = True" in err and "does not implement" in err
    xlnet = saved(tiny("xlnet"), tmp_path / "xlnet")
    assert main(["export", "--to-hf", str(xlnet), "--custom-code", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'xlnet' has no HuggingFace custom-code export" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_twin_export_still_the_twin_and_convert_takes_bundled_names(tmp_path, capsys):
    assert main(["export", "--to-hf", str(saved(tiny("bert"), tmp_path / "mp")), "--out", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    assert main(["convert", "--to-hf", "gpt-mini-wiki", "--out", str(tmp_path / "gpt")]) == 0
    config = json.loads((tmp_path / "gpt" / "config.json").read_text())
    assert config["architectures"] == ["BertLMHeadModel"] and config["bos_token_id"] == 3
    assert (tmp_path / "gpt" / "tokenizer_config.json").is_file()
    card = (tmp_path / "gpt" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n") and "license: other" in card
