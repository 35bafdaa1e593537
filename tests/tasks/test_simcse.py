"""Unsupervised SimCSE (maskplay.tasks.simcse, `maskplay simcse`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from maskplay.cli import main
from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import MaskplayModel
from maskplay.tasks.score.embed import Embedder
from maskplay.tasks.simcse import (
    SimcseOptions,
    budgeted_learning_rate,
    encode_batch,
    sentence_embeddings,
    set_dropout,
    simcse_batch_loss,
    simcse_loss,
    train_simcse,
)
from tests.conftest import shared_path
from tests.tasks.score.test_score_support import one_thread, save_model_dir, tiny  # noqa: F401 (autouse fixture)

SENTENCES = ["the cat sat on the mat .", "a dog ran far away .", "it rained all day in the city .",
             "she plays the piano well .", "the old man walked slowly home .", "birds sing in the morning .",
             "we ate dinner at a small table .", "the river flows to the sea ."]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(shared_path("tta-vocab"))


def naive_loss(z1: torch.Tensor, z2: torch.Tensor, t: float) -> float:
    """The SimCSE objective written out pair by pair."""
    total = 0.0
    for i in range(len(z1)):
        sims = [float(torch.dot(z1[i], z2[j]) / (z1[i].norm() * z2[j].norm())) / t for j in range(len(z2))]
        total += -(sims[i] - math.log(sum(math.exp(s) for s in sims)))
    return total / len(z1)


def test_loss_equals_the_pairwise_reference():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    for t in (0.05, 1.0):
        assert float(simcse_loss(z1, z2, t)) == pytest.approx(naive_loss(z1, z2, t), rel=1e-5)
    assert float(simcse_loss(z1, z1 * 3.0, 0.05)) < float(simcse_loss(z1, z2, 0.05))  # cosine: scale-free
    with pytest.raises(ValueError, match="one shape"):
        simcse_loss(z1, z2[:3])


@pytest.mark.parametrize("family", ["tta", "bert", "electra", "gpt"])
def test_batch_loss_on_a_tiny_model(tok, family):
    model = tiny(family, tok, hidden_dropout=0.1, attention_dropout=0.1).train()
    ids, mask = encode_batch(tok, SENTENCES, model.config, 16)
    torch.manual_seed(1)
    loss = simcse_batch_loss(model, ids, mask)
    # the same two views by hand: the reference on the model's own embeddings (same dropout draws)
    torch.manual_seed(1)
    z = sentence_embeddings(model, ids.repeat(2, 1), mask.repeat(2, 1))
    assert float(loss.detach()) == pytest.approx(naive_loss(*z.detach().chunk(2), 0.05), rel=1e-4)
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    encoder = [name for name in grads if name.startswith("encoder.")]
    assert encoder and all(grads[n] is not None and grads[n].abs().sum() > 0 for n in encoder)
    assert grads["embeddings.word.weight"].abs().sum() > 0
    # the LM / replaced-token head takes no part
    assert all(g is None for n, g in grads.items() if n.startswith("head."))


def test_dropout_is_the_noise(tok):
    model = tiny("bert", tok, hidden_dropout=0.1, attention_dropout=0.1).train()
    ids, mask = encode_batch(tok, SENTENCES, model.config, 16)
    z1, z2 = sentence_embeddings(model, ids.repeat(2, 1), mask.repeat(2, 1)).detach().chunk(2)
    positive = F.cosine_similarity(z1, z2)
    assert (positive < 1 - 1e-4).all()  # each copy of a sentence got its own dropout masks
    with_dropout = float(simcse_loss(z1, z2))
    set_dropout(model, 0.0)
    z1, z2 = sentence_embeddings(model, ids.repeat(2, 1), mask.repeat(2, 1)).detach().chunk(2)
    torch.testing.assert_close(z1, z2)  # no dropout: the two views are one
    assert F.cosine_similarity(z1, z2) == pytest.approx(torch.ones(len(z1)), abs=1e-5)
    assert float(simcse_loss(z1, z2)) == pytest.approx(naive_loss(z1, z2, 0.05), rel=1e-4)
    assert float(simcse_loss(z1, z2)) < with_dropout  # the positives are no longer noisy
    with pytest.raises(ValueError, match="dropout"):
        set_dropout(model, 1.0)


@pytest.mark.parametrize("family,pooling,diagonal", [("tta", "mean", True), ("tta", "first", False),
                                                     ("bert", "last", True), ("electra", "mean", True)])
def test_training_embedding_is_the_one_embed_reads(tok, family, pooling, diagonal):
    """What SimCSE trains (eval mode) is what Embedder.encode returns, for every pooling and T-TA mask."""
    model = tiny(family, tok)
    ids, mask = encode_batch(tok, SENTENCES, model.config, 128)
    with torch.no_grad():
        ours = sentence_embeddings(model.eval(), ids, mask, pooling, diagonal)
    theirs = Embedder(model, tok).encode(SENTENCES, pooling=pooling, diagonal_mask=diagonal)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-4, atol=1e-5)


def test_learning_rate_schedule():
    options = SimcseOptions(lr=1.0, warmup_steps=2)
    assert budgeted_learning_rate(0, 0.0, options, 12) == 0.5 and budgeted_learning_rate(1, 0.0, options, 12) == 1.0
    assert budgeted_learning_rate(7, 0.0, options, 12) == pytest.approx(0.5)
    timed = SimcseOptions(lr=1.0, minutes=1.0)
    assert budgeted_learning_rate(5, 45.0, timed, None) == pytest.approx(0.25)  # decays with the time budget
    assert budgeted_learning_rate(5, 45.0, timed, 10) == pytest.approx(0.25)  # the nearer end wins
    assert budgeted_learning_rate(8, 0.0, timed, 10) == pytest.approx(0.2)


def test_train_simcse_changes_the_encoder_and_only_it(tok):
    model = tiny("tta", tok, hidden_dropout=0.1, attention_dropout=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = train_simcse(model, tok, SENTENCES * 4, SimcseOptions(lr=1e-3, batch_size=8, max_steps=3, log_every=1),
                          progress=False)
    assert result.steps == 3 and result.sentences_seen == 24 and len(result.history) == 3
    after = model.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in after if k.startswith("encoder.") and k.endswith("weight"))
    assert all(torch.equal(before[k], after[k]) for k in after if k.startswith("head."))
    assert model.config.hidden_dropout == 0.1 and not model.training


def test_cli_end_to_end(tok, tmp_path, capsys):
    source = save_model_dir(tmp_path / "tta", tiny("tta", tok), tok)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(s.capitalize() for s in SENTENCES * 3) + "\n")
    out = tmp_path / "out"
    assert main(["simcse", str(source), "--out", str(out), "--data", str(corpus), "--max-steps", "4",
                 "--batch-size", "4", "--lr", "1e-3", "--precision", "fp32", "--save-every", "2", "--min-words", "3",
                 "--pooling", "cls"]) == 0
    printed = capsys.readouterr()
    assert "evaluate with: maskplay eval sts" in printed.out and "--pooling first" in printed.out
    record = json.loads((out / "simcse.json").read_text())
    assert record["steps"] == 4 and record["family"] == "tta" and record["options"]["pooling"] == "first"
    assert not record["data"][0].startswith("/") and not record["source_model"].startswith("/")  # no machine paths
    assert (out / "ckpt-000002" / "model.safetensors").is_file() and (out / "ckpt-000004" / "config.json").is_file()
    trained = MaskplayModel.from_pretrained(out)
    assert not torch.equal(trained.state_dict()["embeddings.word.weight"],
                           MaskplayModel.from_pretrained(source).state_dict()["embeddings.word.weight"])
    # the output is a model directory that embed and eval sts load
    (tmp_path / "in.txt").write_text("a dog ran far away .\n")
    assert main(["embed", str(out), "--file", str(tmp_path / "in.txt"), "--out", str(tmp_path / "e.npy"),
                 "--pooling", "first"]) == 0
    assert np.load(tmp_path / "e.npy").shape == (1, trained.config.hidden_size)
    sts = tmp_path / "sts.tsv"
    rows = [f"{a}\t{b}\t{k}\n" for k, (a, b) in enumerate(zip(SENTENCES[:-1], SENTENCES[1:], strict=True))]
    sts.write_text("sentence1\tsentence2\tscore\n" + "".join(rows))
    assert main(["eval", "sts", str(out), "--file", str(sts), "--pooling", "first", "--out", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()
    # a second run into the same directory is refused, --overwrite allows it
    args = ["simcse", str(source), "--out", str(out), "--data", str(corpus), "--max-steps", "1", "--batch-size", "4",
            "--precision", "fp32", "--min-words", "3"]
    assert main(args) == 2 and "already holds a model" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0


@pytest.mark.parametrize("extra,message", [
    (["--batch-size", "1"], "--batch-size must be at least 2"),
    (["--lr", "0"], "argument --lr: 0 is not a positive number"),
    (["--temperature", "-1"], "argument --temperature: -1 is not a positive number"),
    (["--max-steps", "0"], "argument --max-steps: 0 is not a positive integer"),
    (["--minutes", "nan"], "argument --minutes: nan is not a finite number"),
    (["--dropout", "1.5"], "argument --dropout: 1.5 is not in [0, 1)"),
    (["--max-length", "2"], "--max-length must be at least 3"),
    (["--max-length", "4096"], "exceeds the model's"),
    (["--sentences", "3"], "fewer than one batch"),
    (["--data", "no/such/corpus"], "--data no/such/corpus not found"),
    (["--precision", "int8"], "invalid choice"),
])
def test_bad_arguments_are_one_line_errors(tok, tmp_path, capsys, extra, message):
    source = save_model_dir(tmp_path / "m", tiny("bert", tok), tok)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    args = ["simcse", str(source), "--out", str(tmp_path / "o"), "--data", str(corpus), "--max-steps", "1"]
    try:
        code = main([*args, *extra])
    except SystemExit as exit_:  # refused while parsing (an option's range, a choice): the same one line
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "model.safetensors").exists()


def test_other_bad_inputs(tok, tmp_path, capsys):
    bert = save_model_dir(tmp_path / "bert", tiny("bert", tok), tok)
    corpus = tmp_path / "c.txt"
    corpus.write_text("Short one.\n")
    base = ["--max-steps", "1", "--batch-size", "2", "--precision", "fp32"]
    cases = [
        (["simcse", str(bert), "--out", str(tmp_path / "o"), "--no-diagonal-mask", "--data", str(corpus), *base],
         "applies to T-TA only"),
        (["simcse", str(bert), "--out", str(tmp_path / "o"), "--data", str(corpus), *base], "SimCSE needs at least 2"),
        (["simcse", str(bert), "--out", str(bert), "--data", str(corpus), "--overwrite", *base],
         "is the model directory being trained"),
        (["simcse", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--data", str(corpus), *base], "not found"),
        (["simcse", str(bert), "--out", str(corpus), "--data", str(corpus), *base], "is a file"),
    ]
    for args, message in cases:
        code = main(args)
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)
