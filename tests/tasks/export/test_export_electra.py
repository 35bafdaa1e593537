"""`maskplay export --to-hf` on an ELECTRA model writes both towers without a split first: the discriminator
(AutoModel: maskplay's hidden states) and the generator (AutoModelForMaskedLM: the logits of maskplay's own
generator, `maskplay export --export generator`), as the twins where the switches allow and as custom code where
they do not. XLNet is refused as custom code in one line naming why."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay.cli import main  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from tests.tasks.export.test_export_hf import TOKENIZER, TWO_HOUR, batch, saved, tiny  # noqa: E402


@pytest.mark.parametrize("switches", [{}, TWO_HOUR], ids=["twin", "custom-code"])
def test_electra_exports_discriminator_and_generator(switches, tmp_path, capsys):
    model = tiny("electra", **switches)
    out = tmp_path / "hf"
    assert main(["export", "--to-hf", str(saved(model, tmp_path / "mp")), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the discriminator" in printed and "the generator" in printed
    disc_arch = json.loads((out / "config.json").read_text())["architectures"][0]
    gen_arch = json.loads((out / "generator" / "config.json").read_text())["architectures"][0]
    assert (disc_arch, gen_arch) == (("ElectraForPreTraining", "ElectraForMaskedLM") if not switches
                                     else ("MaskplayModel", "MaskplayForMaskedLM"))
    ids, attn = batch(load_tokenizer(TOKENIZER))
    real = attn.bool()
    base = transformers.AutoModel.from_pretrained(out, trust_remote_code=True).eval()
    gen = transformers.AutoModelForMaskedLM.from_pretrained(out, subfolder="generator", trust_remote_code=True).eval()
    generator = model.standalone("generator").eval()
    with torch.no_grad():
        hidden = base(input_ids=ids, attention_mask=attn).last_hidden_state
        ours = model(ids, attention_mask=attn, **model.embedding_kwargs()).last_hidden_state
        torch.testing.assert_close(hidden[real], ours[real], atol=1e-5, rtol=1e-5)
        logits = gen(input_ids=ids, attention_mask=attn).logits
        torch.testing.assert_close(logits[real], generator(ids, attention_mask=attn).logits[real], atol=1e-5, rtol=1e-5)
    assert (out / "generator" / "tokenizer.json").is_file()


def test_electra_generator_out_and_refusals(tmp_path, capsys):
    source = saved(tiny("electra"), tmp_path / "mp")
    gen_out = tmp_path / "gen"
    assert main(["export", "--to-hf", str(source), "--out", str(tmp_path / "d"), "--generator-out", str(gen_out)]) == 0
    assert json.loads((gen_out / "config.json").read_text())["architectures"] == ["ElectraForMaskedLM"]
    assert not (tmp_path / "d" / "generator").exists()
    capsys.readouterr()
    bert = saved(tiny("bert"), tmp_path / "bert")
    assert main(["export", "--to-hf", str(bert), "--out", str(tmp_path / "b"), "--generator-out", str(tmp_path / "g")]) != 0
    assert "--generator-out goes with an ELECTRA model" in capsys.readouterr().err


def test_xlnet_custom_code_is_refused_naming_two_streams(tmp_path, capsys):
    source = saved(tiny("xlnet"), tmp_path / "mp")
    assert main(["export", "--to-hf", str(source), "--custom-code", "--out", str(tmp_path / "x")]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "two attention streams" in err and "XLNetLMHeadModel" in err
    assert not (tmp_path / "x").exists()
