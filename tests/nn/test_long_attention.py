"""[model.long] wired into the families (long_attention.py): the dense path (pattern ANDed into the mask) equals
the banded kernel, forward and gradient, for every single-stream family, position scheme and pattern; the
receptive field is the window's; T-TA's output i never depends on token i under any pattern and either path; GPT
generation with a key/value cache under a window equals the uncached forward; adaptive span's penalty reaches
the spans in training and the spans are written; the config switch round-trips and refuses what it cannot do."""

from __future__ import annotations

import json

import pytest
import torch

from maskplay import MaskplayModel, preset
from maskplay.config import LongAttentionConfig, ModelConfig, apply_overrides
from maskplay.families import build_model
from maskplay.families.hf import to_hf
from maskplay.nn.attention.long_attention import LongAttention, clamp_spans, learned_spans, span_penalty
from maskplay.nn.pass_modes import LastLayerRows
from maskplay.tasks.train import load_train_config, train
from maskplay.tasks.train.config import ModelSection, TrainConfig
from tests.conftest import padded_batch
from tests.tasks.train.test_train import make_data, small_config
from tests.test_leak import jacobian_norms

SINGLE_STREAM = ("tta", "bert", "gpt", "unilm", "electra")
PATTERNS = {
    "window": dict(window=3),
    "globals": dict(window=2, global_tokens=2),
    "dilated": dict(window=2, dilation=2),
    "span": dict(adaptive_span=True, max_span=12, span_ramp=3),
}


def long_model(family: str, pattern: str, positions: str = "learned", seed: int = 0) -> MaskplayModel:
    """A tiny model with large random weights (peaked attention) and, under adaptive span, random spans."""
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, positions=positions,
                               long=LongAttentionConfig(**PATTERNS[pattern])))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.25)
        for name, p in model.named_parameters():
            if name.endswith("span_fraction"):
                p.uniform_(0.0, 1.0)
    return model.eval()


def banded(model: MaskplayModel, on: bool) -> None:
    """Route every pass through the banded kernel (on) or dense SDPA (off), whatever its length."""
    model.config.long.banded_from = 1 if on else 10**6


def forward_both(model: MaskplayModel, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    outs = []
    for on in (False, True):
        banded(model, on)
        outs.append(model(ids, attention_mask=mask).last_hidden_state)
    return outs


# ---- dense and banded are the same attention ----------------------------------------------------------------


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
@pytest.mark.parametrize("family", SINGLE_STREAM)
def test_banded_equals_dense_for_every_family_and_pattern(family, pattern):
    model = long_model(family, pattern)
    ids, mask = padded_batch([23, 15])
    dense, band = forward_both(model, ids, mask)
    torch.testing.assert_close(band[mask], dense[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["learned", "rotary", "t5", "alibi"])
@pytest.mark.parametrize("family,pattern", [("gpt", "globals"), ("tta", "span"), ("bert", "dilated")])
def test_banded_equals_dense_under_every_position_scheme_with_gradients(family, pattern, positions):
    model = long_model(family, pattern, positions)  # eval mode: no dropout, whose draws differ between the paths
    ids, mask = padded_batch([21, 12], seed=1)
    direction = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    results = []
    for on in (False, True):
        banded(model, on)
        model.zero_grad()
        out = model(ids, attention_mask=mask).last_hidden_state
        (out[mask] @ direction).sum().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (dense, g_dense), (band, g_band) = results
    torch.testing.assert_close(band[mask], dense[mask], atol=1e-5, rtol=1e-5)
    assert g_dense.keys() == g_band.keys()
    for name in g_dense:
        torch.testing.assert_close(g_band[name], g_dense[name], atol=1e-4, rtol=1e-4, msg=name)
    if pattern == "span":
        assert any("span_fraction" in n and g.abs().sum() > 0 for n, g in g_band.items())


def test_the_dense_mask_is_the_brute_force_pattern():
    """LongAttention.prepare against Python loops: (|i - j| <= w d and d | i - j) or i < G or j < G, AND the mask."""
    L, w, d, G = 13, 2, 3, 2
    config = preset("tiny", family="bert", long=LongAttentionConfig(window=w, dilation=d, global_tokens=G))
    family = torch.rand(1, 1, L, L, generator=torch.Generator().manual_seed(0)) > 0.2
    columns = torch.arange(L)[None]
    got = LongAttention(config).prepare(family, columns, columns, banded_ok=False, scheme=None)
    want = torch.zeros(1, 1, L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(L):
            pattern = (abs(i - j) <= w * d and (i - j) % d == 0) or i < G or j < G
            want[0, 0, i, j] = pattern and bool(family[0, 0, i, j])
    assert torch.equal(got, want)


@pytest.mark.parametrize("on", [False, True], ids=["dense", "banded"])
def test_gpt_receptive_field_is_the_window_times_the_depth(on):
    """Output i of layer d depends on token j exactly when 0 <= i - j <= d * w: the window is real, GPT stays causal."""
    model = long_model("gpt", "window")
    banded(model, on)
    w, L = model.config.long.window, 14
    ids, mask = padded_batch([L])
    norms = jacobian_norms(model, ids, mask)  # (depth incl. logits, B, L, L)
    for depth in range(norms.shape[0]):
        reach = min(depth + 1, model.config.num_layers) * w
        i = torch.arange(L)[:, None]
        j = torch.arange(L)[None]
        inside = (i - j >= 0) & (i - j <= reach)
        assert torch.all(norms[depth, 0][inside] > 0), depth
        assert torch.all(norms[depth, 0][~inside] == 0), depth


@pytest.mark.parametrize("on", [False, True], ids=["dense", "banded"])
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_tta_output_i_never_sees_token_i_under_long_attention(pattern, on):
    model = long_model("tta", pattern)
    banded(model, on)
    ids, mask = padded_batch([11, 7])
    norms = jacobian_norms(model, ids, mask)  # every depth, logits included
    assert torch.all(torch.diagonal(norms, dim1=2, dim2=3) == 0), f"T-TA leaks token i into output i ({pattern})"
    for b, n in enumerate(mask.sum(1).tolist()):
        assert torch.all(norms[:, b, :, n:] == 0), "padding leaks into real outputs"
        assert torch.all(norms[-1, b, :n, :n].sum(1) > 0)  # not vacuous: every output reads some other token


@pytest.mark.parametrize("pattern", ["span", "globals"])
def test_pll_one_query_last_layer_equals_the_full_forward(pattern):
    """PLL's last layer at one position per row (last_layer_rows) reads the same pattern as the full pass."""
    model = long_model("bert", pattern)
    ids, _ = padded_batch([20, 20, 20])
    rows, at = torch.arange(3), torch.tensor([2, 10, 19])
    with torch.no_grad():
        full = model(ids).last_hidden_state[rows, at]
        one = model(ids, last_layer_rows=LastLayerRows(at)).last_hidden_state[:, 0]
    torch.testing.assert_close(one, full, atol=1e-5, rtol=1e-5)


# ---- generation with a key/value cache -----------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["window", "globals", "span"])
def test_gpt_cached_steps_under_a_window_equal_the_full_forward(pattern):
    """Prompts right-padded, then tokens one step at a time past the window: every next-token logit equals the
    uncached forward's (keys older than the window are ignored in both)."""
    gpt = long_model("gpt", pattern, positions="alibi")
    g = torch.Generator().manual_seed(1)
    prompts = [[3, *torch.randint(7, 60, (n,), generator=g).tolist()] for n in (9, 4)]
    extra = torch.randint(7, 60, (2, 6), generator=g)
    ids = torch.zeros(2, 10, dtype=torch.long)
    for k, p in enumerate(prompts):
        ids[k, :len(p)] = torch.tensor(p)
    with torch.no_grad():
        cache, logits = gpt.prefill(ids, ids != 0)
        got = [logits] + [gpt.step(extra[:, t:t + 1], cache) for t in range(6)]
        for k, p in enumerate(prompts):
            want = gpt(torch.tensor([p + extra[k].tolist()])).logits[0, len(p) - 1:]
            torch.testing.assert_close(torch.stack([s[k] for s in got]), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_generation_with_and_without_cache_agree_under_a_window(padding_side):
    from maskplay.tasks.decoding import generate

    gpt = long_model("gpt", "globals", positions="alibi")
    g = torch.Generator().manual_seed(0)
    prompts = [[3, *torch.randint(7, 60, (n - 1,), generator=g).tolist()] for n in (9, 2, 5)]
    runs = [generate(gpt, prompts, max_new_tokens=8, padding_side=padding_side, output_logits=True, use_cache=cache)
            for cache in (True, False)]
    for cached, uncached in zip(*runs, strict=True):
        assert cached.token_ids == uncached.token_ids
        n = len(cached.token_ids)  # a finished row's later logits are not its own
        torch.testing.assert_close(cached.logits[:n], uncached.logits[:n], atol=1e-4, rtol=1e-4)


# ---- adaptive span in training ---------------------------------------------------------------------------------


def test_span_penalty_clamp_and_report():
    model = long_model("bert", "span")
    spans = learned_spans(model)
    assert len(spans) == model.config.num_layers and all(len(s) == model.config.num_heads for s in spans)
    want = model.config.long.span_penalty * sum(sum(s) / len(s) for s in spans)
    assert float(span_penalty(model).detach()) == pytest.approx(want, rel=1e-4)
    span_penalty(model).backward()
    assert all(p.grad is not None and bool((p.grad > 0).all())
               for n, p in model.named_parameters() if n.endswith("span_fraction"))
    with torch.no_grad():
        model.encoder.layers[0].attn.span.span_fraction.fill_(1.7)
    clamp_spans(model)
    assert learned_spans(model)[0] == [12.0] * model.config.num_heads
    assert span_penalty(long_model("bert", "window")) == 0.0
    from maskplay.tasks.train.schedule import parameter_groups

    decayed, undecayed = ({name for name, _ in group["params"]} for group in parameter_groups(model, 0.01))
    spans = {n for n, _ in model.named_parameters() if n.endswith("span_fraction")}
    assert spans and spans <= undecayed and not spans & decayed  # the L1 penalty, not weight decay


def test_training_adds_the_span_penalty_and_writes_the_spans(tmp_path):
    """A large penalty shrinks every span from its start within a few steps; the spans land in the metrics and in
    RUN/adaptive_spans.json."""
    data = make_data(tmp_path / "data")
    long = ["model.long.adaptive_span=true", "model.long.max_span=16", "model.long.span_ramp=4",
            "model.long.span_init=0.5"]
    result = train(small_config(data, tmp_path / "run", *long, "model.long.span_penalty=10", family="bert"))
    written = json.loads((result.run_dir / "adaptive_spans.json").read_text())
    assert len(written["spans"]) == 2 and all(len(s) == 4 for s in written["spans"])
    assert all(z < 8.0 for layer in written["spans"] for z in layer)  # started at 0.5 * 16
    assert written["spans"] == learned_spans(MaskplayModel.from_pretrained(result.final_dir))
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("span_mean" in m for m in metrics)


def test_pretraining_runs_through_the_banded_kernel_with_dropout(tmp_path):
    """A whole training run on the banded path (banded_from below every batch's length), attention dropout on:
    finite losses, a final model, and dropout really applied in the kernel (two training passes differ)."""
    data = make_data(tmp_path / "data")
    long = ["model.positions=alibi", "model.long.window=4", "model.long.global_tokens=1", "model.long.banded_from=8",
            "model.hidden_dropout=0"]  # attention dropout (0.1) alone makes the two training passes differ
    result = train(small_config(data, tmp_path / "run", *long, family="gpt"))
    assert result.status == "finished" and result.eval_loss is not None and result.eval_loss < 10
    model = MaskplayModel.from_pretrained(result.final_dir).train()
    ids, mask = padded_batch([20, 12])
    a, b = (model(ids, attention_mask=mask).last_hidden_state for _ in range(2))
    assert torch.isfinite(a).all() and not torch.allclose(a, b)
    model.eval()
    torch.testing.assert_close(model(ids, attention_mask=mask).last_hidden_state,
                               model(ids, attention_mask=mask).last_hidden_state)


# ---- the config switch ----------------------------------------------------------------------------------------


def test_config_round_trips_and_default_config_json_is_unchanged(tmp_path):
    assert "long" not in preset("tiny", family="gpt").to_dict()  # off: config.json as before the switch
    model = long_model("gpt", "globals", positions="alibi")
    model.save_pretrained(tmp_path / "m")
    loaded = MaskplayModel.from_pretrained(tmp_path / "m").eval()
    assert loaded.config.long == model.config.long
    ids, mask = padded_batch([20])
    torch.testing.assert_close(loaded(ids).last_hidden_state, model(ids).last_hidden_state)
    toml = tmp_path / "c.toml"
    toml.write_text('[model]\nfamily = "tta"\npositions = "alibi"\nmax_position = 4096\n'
                    '[model.long]\nwindow = 128\nglobal_tokens = 1\n')
    section = load_train_config(toml).model
    assert section.long == LongAttentionConfig(window=128, global_tokens=1)
    config = apply_overrides(TrainConfig(model=ModelSection(family="gpt")), ["model.long.adaptive_span=true",
                                                                               "model.long.max_span=256"])
    assert config.model.build({"vocab_size": 100}).long.max_span == 256


@pytest.mark.parametrize("overrides,words", [
    (dict(family="xlnet"), "family xlnet"),
    (dict(attention="synthesizer-random"), "synthesizer-random"),
    (dict(talking_heads=True), "talking_heads"),
])
def test_incompatible_architectures_are_one_line_errors(overrides, words):
    with pytest.raises(ValueError, match=words) as err:
        ModelConfig(**{**dict(family="bert"), **overrides}, long=LongAttentionConfig(window=8))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("fields", [dict(adaptive_span=True, window=8), dict(dilation=2), dict(global_tokens=1),
                                    dict(window=0), dict(span_init=2.0), dict(adaptive_span=True, span_ramp=0)])
def test_bad_long_fields_are_one_line_errors(fields):
    with pytest.raises(ValueError, match="long") as err:
        LongAttentionConfig(**fields)
    assert "\n" not in str(err.value)


def test_conversion_to_huggingface_refuses_long_attention():
    with pytest.raises(ValueError, match="long = ") as err:
        to_hf(long_model("bert", "window"))
    assert "\n" not in str(err.value)


# ---- scoring and embedding long texts with a long-attention model --------------------------------------------


@pytest.mark.parametrize("family", ["gpt", "tta"])
def test_max_length_windows_equal_a_model_of_that_many_positions(tmp_path, family):
    """Scorer/Embedder(max_length=N, overflow='window') on a model of 64 positions score and embed exactly as the
    same weights built with max_position = N (ALiBi: no position parameters), and a text within max_position is
    one pass."""
    import dataclasses

    from maskplay.tasks.score import Scorer
    from maskplay.tasks.score.embed import Embedder
    from tests.tasks.score.test_score_support import small_tokenizer, tiny

    tok = small_tokenizer(tmp_path)
    model = tiny(family, tok, positions="alibi", long=LongAttentionConfig(window=4)).eval()
    short = build_model(dataclasses.replace(model.config, max_position=16)).eval()
    short.load_state_dict(model.state_dict())
    text = " ".join(["the cat sat on the mat and the dog ran to the old tree"] * 2)
    assert 16 < len(tok.encode(text)) <= 64
    got = Scorer(model, tok, overflow="window", max_length=16).score([text])[0]
    want = Scorer(short, tok, overflow="window").score([text])[0]
    assert got.windows == want.windows > 1
    assert got.token_log_probs == pytest.approx(want.token_log_probs, abs=1e-5)
    assert Scorer(model, tok, overflow="window").score([text])[0].windows == 1
    e_got = Embedder(model, tok).encode([text], overflow="window", max_length=16)
    e_want = Embedder(short, tok).encode([text], overflow="window")
    assert e_got == pytest.approx(e_want, abs=1e-5)
    with pytest.raises(ValueError, match="max_length must be 3..64") as err:
        Scorer(model, tok, max_length=65)
    assert "\n" not in str(err.value)
