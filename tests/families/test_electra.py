"""ELECTRA: the corruption, the fused sampler, where gradients go, the switches the paper ablates, checkpoints,
standalone towers, and a tiny pretrain -> resume -> export -> score run through the command line."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from maskplay import MaskplayModel, preset
from maskplay.cli import main as cli_main
from maskplay.families import BertMLM, Electra, build_model
from maskplay.families.electra import ElectraConfig, corrupt, generator_config
from maskplay.nn.heads import linear_cross_entropy, linear_cross_entropy_and_sample, sample_rows
from maskplay.nn.modeling import IGNORE_INDEX
from tests.conftest import padded_batch


def electra(**options) -> Electra:
    torch.manual_seed(0)
    return build_model(preset("tiny", family="electra", electra=ElectraConfig(**options)))


# ---- the corruption ------------------------------------------------------------------------------------

def test_corruption_selects_the_configured_share_of_real_non_special_tokens():
    model = electra(mask_prob=0.25)
    ids, mask = padded_batch([60] * 200 + [30] * 200, vocab=100, seed=1)
    ids[:, 0] = 3  # [SOS]: never selected
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    selected = batch["labels"] != IGNORE_INDEX
    eligible = mask.clone()
    eligible[:, 0] = False
    assert not (selected & ~eligible).any()  # no padding, no special token
    share = selected.sum() / eligible.sum()
    assert abs(float(share) - 0.25) < 0.01
    shown = batch["input_ids"][selected]
    masked_share = float((shown == model.config.mask_token_id).float().mean())
    assert abs(masked_share - 0.85) < 0.02  # the rest shown as themselves, none random
    assert torch.equal(shown[shown != model.config.mask_token_id], ids[selected][shown != model.config.mask_token_id])
    assert torch.equal(batch["input_ids"][~selected], ids[~selected])
    assert torch.equal(batch["labels"][selected], ids[selected])
    assert torch.equal(batch["original_ids"], ids)
    u = batch["sample_uniforms"]
    assert u.shape == ids.shape and float(u.min()) >= 0 and float(u.max()) < 1


def test_a_sample_equal_to_the_original_is_labelled_original():
    original = torch.tensor([[7, 8, 9, 10], [11, 12, 13, 0]])
    selected = torch.tensor([[True, False, True, True], [False, True, False, False]])
    sampled = torch.tensor([7, 20, 10, 30])  # the first and the last draw give the original back
    corrupted, replaced = corrupt(original, selected, sampled)
    assert corrupted.tolist() == [[7, 8, 20, 10], [11, 30, 13, 0]]
    assert replaced.tolist() == [[False, False, True, False], [False, True, False, False]]


def test_forward_labels_samples_equal_to_the_original_as_original(monkeypatch):
    """Force every generator sample to be the original: the discriminator's targets are then all 0, and its loss
    is the BCE of its logits on the clean text against 0."""
    model = electra()
    ids, mask = padded_batch([12, 9, 5], vocab=100)
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    head = model.generator.head
    real = head.loss_and_sample
    monkeypatch.setattr(head, "loss_and_sample", lambda h, w, t, u: (real(h, w, t, u)[0], t.clone()))
    model.eval()  # no dropout, so the two discriminator passes agree
    out = model(**batch)
    assert float(out.parts["replaced"]) == 0.0
    logits = model.head(model.discriminate(ids, mask)[0][mask])
    want = F.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits))
    torch.testing.assert_close(out.parts["disc_loss"], want)
    torch.testing.assert_close(out.loss, out.parts["gen_loss"] + 50.0 * want)


# ---- the sampler ---------------------------------------------------------------------------------------

def test_inverse_cdf_sampling_matches_a_float64_reference_and_the_distribution():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=g) * 3
    probs = logits.softmax(-1)
    u = torch.rand(64, generator=g)
    cdf = probs.double().cumsum(-1)
    want = torch.searchsorted(cdf, (u.double() * cdf[:, -1])[:, None], right=True)[:, 0]
    assert (sample_rows(probs, u) == want).float().mean() > 0.95  # ties at a boundary may round either way
    # many draws from one row follow its probabilities
    row = probs[:1].expand(200_000, -1)
    draws = sample_rows(row, torch.rand(200_000, generator=g))
    freq = torch.bincount(draws, minlength=50).double() / 200_000
    assert (freq - probs[0].double()).abs().max() < 0.01
    zero = torch.tensor([[0.0, 0.5, 0.0, 0.5]])  # a token of probability 0 is never drawn
    drawn = sample_rows(zero.expand(1000, -1), torch.rand(1000, generator=g))
    assert set(drawn.tolist()) <= {1, 3}


@pytest.mark.parametrize("grad", [True, False])
def test_the_fused_loss_and_sample_equal_the_loss_alone_and_a_plain_sample(grad):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 16, generator=g, requires_grad=grad)
    w = torch.randn(97, 16, generator=g, requires_grad=grad)
    b = torch.randn(97, generator=g, requires_grad=grad)
    t = torch.randint(97, (300,), generator=g)
    u = torch.rand(300, generator=g)
    with torch.set_grad_enabled(grad):
        loss, samples = linear_cross_entropy_and_sample(x, w, b, t, u, chunk_bytes=4 * 97 * 7)
        alone = linear_cross_entropy(x, w, b, t)
    torch.testing.assert_close(loss, alone)
    plain = sample_rows(F.linear(x, w, b).detach().softmax(-1), u)
    assert (samples == plain).float().mean() > 0.98 and samples.dtype == torch.long
    if grad:
        gx, gw = torch.autograd.grad(loss, (x, w))
        want = torch.autograd.grad(F.cross_entropy(F.linear(x, w, b), t), (x, w))
        torch.testing.assert_close(gx, want[0], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(gw, want[1], rtol=1e-4, atol=1e-6)


# ---- where the gradients go ----------------------------------------------------------------------------

def _grads(loss: torch.Tensor, named: dict[str, torch.nn.Parameter]) -> dict[str, torch.Tensor | None]:
    values = torch.autograd.grad(loss, list(named.values()), allow_unused=True, retain_graph=True)
    return dict(zip(named, values, strict=True))


def test_the_discriminator_loss_reaches_the_generator_only_through_the_shared_embeddings():
    model = electra()
    ids, mask = padded_batch([12, 9, 5], vocab=100)
    out = model(**model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0)))
    named = dict(model.named_parameters())  # shared tensors appear once, under embeddings.*
    grads = _grads(out.parts["disc_loss"], named)
    generator_only = {k for k in named if k.startswith("generator.")}
    assert generator_only and all(grads[k] is None or not grads[k].any() for k in generator_only)
    assert grads["embeddings.word.weight"] is not None and grads["embeddings.word.weight"].any()
    assert grads["encoder.layers.0.attn.query.weight"].any()
    # and the generator's loss does reach the generator (the test can fail)
    gen = _grads(out.parts["gen_loss"], named)
    assert gen["generator.encoder.layers.0.attn.query.weight"].any()
    assert gen["encoder.layers.0.attn.query.weight"] is None


def test_untied_embeddings_keep_the_towers_apart():
    model = electra(tie_embeddings=False)
    assert model.generator.embeddings is not model.embeddings
    assert any(k.startswith("generator.embeddings.") for k in model.state_dict())
    ids, mask = padded_batch([12, 9], vocab=100)
    out = model(**model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0)))
    named = dict(model.named_parameters())
    grads = _grads(out.parts["disc_loss"], named)
    assert all(grads[k] is None or not grads[k].any() for k in named if k.startswith("generator."))


# ---- switches ------------------------------------------------------------------------------------------

def test_generator_size_follows_the_fraction_and_a_larger_generator_is_refused():
    for fraction, hidden in ((0.25, 8), (0.5, 16), (1.0, 32)):
        model = electra(generator_hidden_fraction=fraction)
        cfg = model.generator.config
        assert (cfg.hidden_size, cfg.num_layers, cfg.embedding_width) == (hidden, 2, 32)
        assert cfg.hidden_size // cfg.num_heads == 8  # heads keep their width
        assert (model.generator.embeddings_project is None) == (hidden == 32)
    with pytest.raises(ValueError, match="generator_hidden_fraction"):
        ElectraConfig(generator_hidden_fraction=1.5)
    with pytest.raises(ValueError, match="generator_hidden_fraction"):
        preset("tiny", family="electra", electra=ElectraConfig(generator_hidden_fraction=0.4))  # 13 wide, 2 heads
    with pytest.raises(ValueError, match="mask_prob"):
        ElectraConfig(mask_prob=0.0)
    with pytest.raises(ValueError, match="disc_weight"):
        ElectraConfig(disc_weight=math.nan)
    with pytest.raises(ValueError, match="embedding_size"):
        preset("tiny", family="electra", embedding_size=0)


def test_disc_weight_and_mask_prob_change_the_loss_as_configured():
    ids, mask = padded_batch([20, 15, 9], vocab=100)
    outs = {}
    for weight in (50.0, 1.0):
        model = electra(disc_weight=weight).eval()
        outs[weight] = model(**model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0)))
    for weight, out in outs.items():
        torch.testing.assert_close(out.loss, out.parts["gen_loss"] + weight * out.parts["disc_loss"])
    model = electra(mask_prob=0.5)
    labels = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))["labels"]
    assert (labels != IGNORE_INDEX).sum() > 0.35 * mask.sum()


def test_all_tokens_mlm_is_the_copy_mechanism_over_every_token():
    model = electra(all_tokens_mlm=True).eval()
    ids, mask = padded_batch([12, 9], vocab=100)
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    out = model(**batch)
    assert "all_tokens_loss" in out.parts and "disc_loss" not in out.parts
    torch.testing.assert_close(out.loss, out.parts["gen_loss"] + out.parts["all_tokens_loss"])
    # naive: p(original) = D [input == original] + (1 - D) softmax(original), D = sigmoid(-z)
    selected = batch["labels"] != IGNORE_INDEX
    sampled = model.generator(batch["input_ids"], mask).last_hidden_state  # the same draws again
    _, draws = model.generator.head.loss_and_sample(sampled[selected], model.embeddings.word.weight,
                                                    batch["labels"][selected], batch["sample_uniforms"][selected])
    corrupted, _ = corrupt(ids, selected, draws)
    h = model.discriminate(corrupted, mask)[0][mask]
    d = torch.sigmoid(-model.head(h))
    probs = model.mlm_head(h, model.embeddings.word.weight).softmax(-1).gather(1, ids[mask][:, None])[:, 0]
    p = d * (corrupted[mask] == ids[mask]).float() + (1 - d) * probs
    torch.testing.assert_close(out.parts["all_tokens_loss"], -p.log().mean(), rtol=1e-5, atol=1e-6)
    out.loss.backward()
    assert model.mlm_head.dense.weight.grad.any()


@pytest.mark.parametrize("family", ["bert", "tta", "gpt"])
def test_narrow_embeddings_project_to_the_hidden_size_in_every_family(family):
    model = build_model(preset("tiny", family=family, embedding_size=16))
    assert model.embeddings.word.weight.shape == (100, 16) and model.embeddings_project.in_features == 16
    assert model.head.dense.out_features == 16
    ids, mask = padded_batch([10, 6], vocab=100)
    out = model(**model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0)))
    out.loss.backward()
    assert model.embeddings_project.weight.grad.any()


# ---- checkpoints and towers ----------------------------------------------------------------------------

def test_checkpoint_holds_the_shared_embeddings_once_and_round_trips(tmp_path):
    from safetensors.torch import load_file

    model = electra().eval()
    model.save_pretrained(tmp_path / "m")
    keys = set(load_file(str(tmp_path / "m" / "model.safetensors")))
    assert "embeddings.word.weight" in keys and not any(k.startswith("generator.embeddings.") for k in keys)
    loaded = MaskplayModel.from_pretrained(tmp_path / "m").eval()
    assert isinstance(loaded, Electra) and loaded.generator.embeddings is loaded.embeddings
    ids, mask = padded_batch([10, 6], vocab=100)
    torch.testing.assert_close(loaded(ids, mask).logits, model(ids, mask).logits)
    with pytest.raises(ValueError, match="family='bert'.*'electra'"):
        BertMLM.from_pretrained(tmp_path / "m")


def test_standalone_towers_compute_what_they_computed_inside():
    model = electra().eval()
    ids, mask = padded_batch([10, 6], vocab=100)
    disc = model.standalone("discriminator").eval()
    assert disc.generator is None and disc.config.electra.generator is False
    torch.testing.assert_close(disc(ids, mask).logits, model(ids, mask).logits)
    gen = model.standalone("generator")
    assert isinstance(gen, BertMLM) and "embeddings.word.weight" in gen.state_dict()
    torch.testing.assert_close(gen(ids, mask).logits, model.generator(ids, mask).logits)
    with pytest.raises(ValueError, match="discriminator alone"):
        disc.training_batch(ids, mask)
    with pytest.raises(ValueError, match="'discriminator' or 'generator'"):
        model.standalone("both")
    assert generator_config(model.config).family == "bert"


def test_mixed_precision_training_forward_runs_in_bf16_and_autocast():
    from maskplay.runtime.precision import forward_in

    model = electra()
    ids, mask = padded_batch([12, 9], vocab=100)
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    for precision in ("bf16", "bf16-autocast"):
        out = forward_in(model, precision, **batch)
        out.loss.backward()
        assert math.isfinite(float(out.loss.detach()))
        # every parameter is back in place: the shared embeddings included (registered twice, functional_call
        # would leave the bf16 copies in the module)
        for name, p in model.named_parameters(remove_duplicate=False):
            assert isinstance(p, torch.nn.Parameter) and p.dtype == torch.float32, name
        assert model.embeddings.word.weight.grad.any()
        assert model.generator.encoder.layers[0].attn.query.weight.grad.any()
        model.zero_grad()


# ---- end to end ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_pretrain_resume_export_and_score_through_the_cli(tmp_path, capsys):
    from tests.tasks.train.test_train import SMALL, make_data

    data = make_data(tmp_path / "data")
    run = tmp_path / "run"
    base = ["pretrain", "--family", "electra", "--data", str(data), "--out", str(run), "--precision", "bf16",
            *[a for item in SMALL for a in ("--set", item)], "--set", "run.progress=false"]
    assert cli_main([*base, "--max-steps", "4"]) == 0
    assert cli_main([*base, "--max-steps", "8", "--resume", "--export", "discriminator"]) == 0
    assert (run / "final-discriminator" / "tokenizer.json").is_file()
    assert MaskplayModel.from_pretrained(run / "final-discriminator").generator is None
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r][-1] == 8
    assert all("gen_loss" in r and "disc_loss" in r for r in records if "loss" in r)
    assert any("eval_disc_accuracy" in r for r in records)
    final = run / "final"
    for part in ("discriminator", "generator"):
        assert cli_main(["export", str(final), "--export", part, "--out", str(tmp_path / part)]) == 0
    assert cli_main(["export", str(final), "--export", "generator", "--out", str(tmp_path / "generator")]) == 2
    assert cli_main(["export", str(tmp_path / "generator"), "--export", "generator", "--out", str(tmp_path / "x")]) == 2
    sentences = ["w10 w11 w12 w13", "w40 w41 w90"]
    capsys.readouterr()
    for model_dir, method in ((final, "discriminator"), (final, "pll"), (tmp_path / "discriminator", "auto"),
                              (tmp_path / "generator", "pll")):
        assert cli_main(["score", str(model_dir), *sentences, "--format", "jsonl", "--method", method]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(rows) == 2 and all(math.isfinite(r["log_prob"]) and r["log_prob"] < 0 for r in rows)
        if method in ("discriminator", "auto"):
            for r in rows:
                assert all(0 < p < 1 for p in r["token_replaced_probs"])
                want = [-math.expm1(v) for v in r["token_log_probs"]]
                assert r["token_replaced_probs"] == pytest.approx(want)
    assert cli_main(["score", str(final), *sentences, "--explain", "--color", "never"]) == 0
    shown = capsys.readouterr().out
    assert "P(replaced)" in shown and "most likely replaced" in shown and "(p=0." in shown
    assert cli_main(["score", str(tmp_path / "discriminator"), *sentences, "--method", "pll"]) == 2
    assert "discriminator alone" in capsys.readouterr().err
    (tmp_path / "s.txt").write_text("\n".join(sentences) + "\n")
    assert cli_main(["embed", str(final), "--file", str(tmp_path / "s.txt"), "--out", str(tmp_path / "e.npy")]) == 0
    assert np.load(tmp_path / "e.npy").shape == (2, 32)


def test_method_names_for_electra():
    from maskplay.tasks.score.scorer import Method, resolve_method

    assert resolve_method("electra", "auto") is Method.DISCRIMINATOR
    assert resolve_method("electra", "pll") is Method.PLL
    with pytest.raises(ValueError, match="discriminator"):
        resolve_method("bert", "discriminator")
    with pytest.raises(ValueError, match="one-pass"):
        resolve_method("electra", "one-pass")
    assert dataclasses.is_dataclass(ElectraConfig)


@pytest.mark.parametrize("override, field", [
    ("model.electra.generator_hidden_fraction=2", "generator_hidden_fraction"),
    ("model.electra.generator_hidden_fraction=0.7", "generator_hidden_fraction"),  # 179 wide, 3 heads
    ("model.embedding_size=0", "embedding_size"),
    ("model.electra.disc_weight=nan", "disc_weight"),
])
def test_a_bad_electra_config_is_one_line_naming_the_field_and_writes_nothing(tmp_path, capsys, override, field):
    run = tmp_path / "run"
    code = cli_main(["pretrain", "--family", "electra", "--data", str(tmp_path / "none"), "--out", str(run),
                     "--set", override])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and field in err, err
    assert not run.exists()


def test_every_evaluation_reads_the_discriminator(tmp_path, capsys):
    """embed is covered above; sts, nbest, pairs, spelling and cola on the real data with a tiny ELECTRA."""
    from maskplay.data.tokenizer import load_tokenizer
    from tests.conftest import shared_path
    from tests.tasks.score.test_score_support import save_model_dir, tiny

    tok = load_tokenizer(shared_path("tta-vocab"))
    model_dir = str(save_model_dir(tmp_path / "electra", tiny("electra", tok), tok))
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    (blimp / "agreement.jsonl").write_text(json.dumps({"sentence_good": "the cats sleep .",
                                                       "sentence_bad": "the cats sleeps ."}) + "\n")
    commands = {"sts": ["--limit", "6", "--data", str(shared_path())], "nbest": ["--limit", "1", "--weights", "0.5"],
                "pairs": ["--data", str(blimp)], "spelling": ["--limit", "3"],
                "cola": ["--limit", "6", "--train-limit", "10"]}
    for task, extra in commands.items():
        out = tmp_path / f"{task}.json"
        assert cli_main(["eval", task, model_dir, *extra, "--out", str(out)]) == 0, task
        result = json.loads(out.read_text())
        if task == "sts":
            assert result["family"] == "electra"
        else:
            assert result["method"] == "discriminator", task
    capsys.readouterr()
