"""GPT-BERT (families/gpt_bert.py) against oracles: its causal mode is GPT on the same weights, its masked mode with
the shift off is BERT's MLM loss, no leak in either mode (gradients), MNTP's span masking as specified, the MNTP PLL
and the causal score against naive loops, fused = their sum, cached generation = uncached, and the real training loop
with an exact resume."""

from __future__ import annotations

import math

import pytest
import torch

from maskplay import GPT, BertMLM
from maskplay.families.gpt_bert import GPTBert, span_mask
from maskplay.nn.modeling import IGNORE_INDEX
from maskplay.tasks.decoding import generate
from maskplay.tasks.score import Scorer
from tests.tasks.score.test_score_support import one_thread, small_tokenizer, tiny  # noqa: F401 (autouse fixture)
from tests.test_leak import jacobian_norms

ATOL = 1e-5


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def model(tok):
    return tiny("gpt-bert", tok, hidden_dropout=0.0, attention_dropout=0.0)


def batch_of(tok, texts):
    rows = [tok.encode(t) for t in texts]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, :len(r)] = torch.tensor(r)
    return ids, ids != 0


def test_causal_mode_is_gpt_on_the_same_weights(model, tok):
    gpt = GPT(model.config.__class__(**{**model.config.to_dict(), "family": "gpt"})).eval()
    gpt.load_strict(model.state_dict())
    ids, mask = batch_of(tok, ["the cat sat on the mat", "a dog"])
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, causal=True).last_hidden_state
        theirs = gpt(ids, attention_mask=mask).last_hidden_state
    assert torch.allclose(ours[mask], theirs[mask], atol=ATOL)


def test_masked_mode_with_the_shift_off_is_berts_mlm_loss(model, tok):
    bert = BertMLM(model.config.__class__(**{**model.config.to_dict(), "family": "bert"})).eval()
    bert.load_strict(model.state_dict())
    ids, mask = batch_of(tok, ["the cat sat on the mat", "a dog ran"])
    g = torch.Generator().manual_seed(1)
    corrupted, labels = bert.training_batch(ids, mask, generator=g)["input_ids"], None
    labels = bert.training_batch(ids, mask, generator=torch.Generator().manual_seed(1))["labels"]
    model.config.gpt_bert.z_loss, before = 0.0, model.config.gpt_bert.z_loss
    try:
        with torch.no_grad():
            ours = model(corrupted, attention_mask=mask, labels=labels,
                         causal_rows=torch.zeros(2, dtype=torch.bool)).loss
            theirs = bert(corrupted, attention_mask=mask, labels=labels).loss
    finally:
        model.config.gpt_bert.z_loss = before
    assert torch.allclose(ours, theirs, atol=ATOL)


@pytest.mark.parametrize("z_loss", [0.0, 1e-4])
@pytest.mark.parametrize("rows", [(False, True), (True, True), (False, False)])
def test_the_loss_is_each_modes_mean_weighed_by_its_share(model, tok, z_loss, rows):
    """Naive: each mode's mean cross-entropy over its own targets, weighted by the shares when the batch has both
    modes and by 1 when it has one, plus z_loss times the mean squared log Z over all targets; parts give each mode's
    mean, nan for a mode the batch lacks (the read-free z-loss path and the fused head's path alike)."""
    ids, mask = batch_of(tok, ["the cat sat on the mat", "a dog ran to the cat"])
    causal_rows = torch.tensor(rows)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = ids[:, 1:]
    targets = mask[:, 1:].clone()
    targets[~causal_rows, ::2] = False  # a masked row's targets: some of its positions
    labels[:, :-1] = labels[:, :-1].masked_fill(~targets, IGNORE_INDEX)
    model.config.gpt_bert.z_loss, before = z_loss, model.config.gpt_bert.z_loss
    try:
        with torch.no_grad():
            out = model(ids, attention_mask=mask, labels=labels, causal_rows=causal_rows)
            logits = model.logits(out.last_hidden_state).float()
    finally:
        model.config.gpt_bert.z_loss = before
    at = labels != IGNORE_INDEX
    share = model.config.gpt_bert.causal_share
    means, expected = {}, torch.zeros(())
    for name, causal, weight in (("masked_loss", False, 1 - share), ("causal_loss", True, share)):
        sel = at & (causal_rows[:, None] == causal)
        if sel.any():
            means[name] = torch.nn.functional.cross_entropy(logits[sel], labels[sel])
            expected = expected + means[name] * (weight if len(set(rows)) == 2 else 1.0)
    expected = expected + z_loss * torch.logsumexp(logits[at], -1).pow(2).mean()
    assert torch.allclose(out.loss, expected, atol=ATOL), (out.loss, expected)
    for name in ("masked_loss", "causal_loss"):
        if name in means:
            assert torch.allclose(out.parts[name], means[name], atol=ATOL)
        else:
            assert out.parts[name].isnan()


def test_no_leak_in_either_mode(model):
    ids = torch.randint(7, model.config.vocab_size, (2, 7))
    mask = torch.ones_like(ids, dtype=torch.bool)
    norms = jacobian_norms(model, ids, mask, causal=True)
    later = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    assert norms[:, :, later].max() == 0  # causal: output i never reads a later token
    assert norms[-1, :, ~later].min() > 0
    bidirectional = jacobian_norms(model, ids, mask)
    assert bidirectional[-1].min() > 0  # masked mode reads every token


def test_masked_targets_are_hidden_from_the_outputs_that_predict_them(model, tok):
    """With random_share = keep_share = 0 every selected token is [MASK] in the input, and output k is scored against
    token k + 1 exactly where k + 1 was selected."""
    ids, mask = batch_of(tok, ["the cat sat on the mat and the dog ran", "a b c d e f g h i j"] * 8)
    options = model.config.gpt_bert
    saved = (options.random_share, options.keep_share, options.causal_share)
    options.random_share = options.keep_share = options.causal_share = 0.0
    try:
        out = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    finally:
        options.random_share, options.keep_share, options.causal_share = saved
    scored = out["labels"] != IGNORE_INDEX
    assert scored.any() and not out["causal_rows"].any()
    nxt = torch.zeros_like(scored)
    nxt[:, 1:] = scored[:, :-1]  # the positions whose tokens are predicted
    assert (out["input_ids"][nxt] == model.config.mask_token_id).all()
    assert (out["labels"][:, :-1][scored[:, :-1]] == ids[:, 1:][scored[:, :-1]]).all()
    assert (out["input_ids"][~nxt] == ids[~nxt]).all()


def test_span_masking_as_specified(model):
    torch.manual_seed(0)
    ids = torch.randint(7, 100, (64, 40))
    ids[:, 0], ids[:, -1] = 3, 1
    mask = torch.ones_like(ids, dtype=torch.bool)
    options = model.config.gpt_bert
    for rate in (0.3, 0.15):
        selected, corrupted = span_mask(ids, mask, list(range(7)), 4, 100, rate, options,
                                        torch.Generator().manual_seed(3))
        assert not selected[:, 0].any() and not selected[:, -1].any()  # special tokens never
        n = 38
        counts = selected.sum(1).float()
        assert ((counts - n * rate).abs() <= 1).all()  # floor(n rate + u) per row
        share_mask = (corrupted[selected] == 4).float().mean()
        assert 0.65 < share_mask < 0.95  # 80 % [MASK] (per span)
    runs = [len(r) for row in selected for r in "".join("x" if s else "." for s in row.tolist()).split(".") if r]
    assert max(runs) >= 2  # whole spans go together


def test_the_mask_rate_falls_with_training_progress(model):
    model.set_training_progress(0.0)
    assert model.mask_rate() == pytest.approx(0.30)
    model.set_training_progress(1.0)
    assert model.mask_rate() == pytest.approx(0.15)
    model.set_training_progress(0.0)


def naive_log_probs(model, ids, causal):
    """Per piece (between [SOS] and [EOS]) log p: causal from the output to its left; MNTP from the output to its
    left with the piece masked."""
    out = []
    with torch.no_grad():
        for i in range(1, ids.shape[1] - 1):
            x = ids.clone()
            if not causal:
                x[0, i] = model.config.mask_token_id
            logits = model(x, causal=causal).logits
            out.append(float(logits[0, i - 1].log_softmax(-1)[ids[0, i]]))
    return out


@pytest.mark.parametrize("method", ["causal", "pll"])
def test_scores_equal_a_naive_loop(model, tok, method):
    text = "the cat sat on the mat"
    score = Scorer(model, tok, method=method).score([text])[0]
    ids = torch.tensor([tok.encode(text)])
    assert score.token_log_probs == pytest.approx(naive_log_probs(model, ids, method == "causal"), abs=1e-4)


def test_fused_is_the_sum_and_temperature_scales_the_logits(model, tok):
    texts = ["the cat sat on the mat", "a dog ran"]
    causal, pll, fused = (Scorer(model, tok, method=m).score(texts) for m in ("causal", "pll", "fused"))
    for c, p, f in zip(causal, pll, fused, strict=True):
        assert f.token_log_probs == pytest.approx([a + b for a, b in zip(c.token_log_probs, p.token_log_probs,
                                                                           strict=True)], abs=1e-5)
    hot = Scorer(model, tok, method="causal", temperature=2.0).score(texts[:1])[0]
    ids = torch.tensor([tok.encode(texts[0])])
    with torch.no_grad():
        logits = model(ids, causal=True).logits[0]
    naive = [float((logits[i - 1] / 2.0).log_softmax(-1)[ids[0, i]]) for i in range(1, ids.shape[1] - 1)]
    assert hot.token_log_probs == pytest.approx(naive, abs=1e-4)
    assert Scorer(model, tok).method.value == "causal"  # auto: the exact log-likelihood


def test_cached_generation_equals_uncached(model):
    prompts = [[3, 10, 11, 12], [3, 20]]
    cached = generate(model, prompts, max_new_tokens=6, stop_ids=[])
    uncached = generate(model, prompts, max_new_tokens=6, stop_ids=[], use_cache=False)
    assert [g.token_ids for g in cached.generations] == [g.token_ids for g in uncached.generations]


def test_pretrains_and_resumes_exactly(tmp_path):
    from maskplay.tasks.train import train
    from tests.tasks.train.test_train import make_data, small_config, weights

    data = make_data(tmp_path / "data")
    whole = train(small_config(data, tmp_path / "whole", family="gpt-bert"))
    assert whole.exit_code == 0 and math.isfinite(whole.eval_loss)
    part = train(small_config(data, tmp_path / "part", "run.stop_at_step=4", family="gpt-bert"))
    assert part.exit_code == 0
    resumed = train(small_config(data, tmp_path / "part", family="gpt-bert"), resume=True)
    assert resumed.exit_code == 0
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "part")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert isinstance(GPTBert, type)


def test_pretrain_command_trains_it_from_its_config(tmp_path):
    """`maskplay pretrain --config configs/mini-gpt-bert.toml`, shrunk to the tiny preset and a few steps."""
    from maskplay.cli import main
    from tests.tasks.train.test_train import REPO, SMALL, make_data

    data = make_data(tmp_path / "data")
    args = ["pretrain", "--config", str(REPO / "configs" / "mini-gpt-bert.toml"), "--data", str(data),
            "--out", str(tmp_path / "run")]
    for override in SMALL:
        args += ["--set", override]
    assert main(args) == 0
    model = GPTBert.from_pretrained(tmp_path / "run" / "final")
    assert model.config.gpt_bert.causal_share == pytest.approx(1 / 16) and model.config.num_layers == 2


def test_the_logs_give_a_mode_only_for_the_steps_that_had_it(tmp_path):
    """At 4 rows a step has a causal row one time in four: a step without one logs no causal_loss (its part is nan,
    skipped), never a null; the masked mode's mean is logged at every step and evaluation."""
    import json

    from maskplay.tasks.train import train
    from tests.tasks.train.test_train import make_data, small_config

    run = train(small_config(make_data(tmp_path / "data"), tmp_path / "run", "data.batch_size=4", family="gpt-bert"))
    assert run.exit_code == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    assert all(math.isfinite(r["masked_loss"]) for r in steps) and all("eval_masked_loss" in r for r in evals)
    with_causal = [r for r in steps if "causal_loss" in r]
    assert 0 < len(with_causal) < len(steps)
    assert all(isinstance(r["causal_loss"], float) and math.isfinite(r["causal_loss"]) for r in with_causal)


def test_log_z_is_logsumexp_in_value_and_gradient():
    from maskplay.families.gpt_bert import log_z

    x = (torch.randn(6, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 40).requires_grad_()
    ours, theirs = log_z(x), torch.logsumexp(x, -1)
    assert torch.allclose(ours, theirs, atol=1e-12)
    g_ours, = torch.autograd.grad(ours.pow(2).sum(), x)
    g_theirs, = torch.autograd.grad(theirs.pow(2).sum(), x)
    assert torch.allclose(g_ours, g_theirs, atol=1e-10)
