"""maskplay grow: a bigger model whose logits equal the smaller one's within 1e-5 (fp32, before training) where the
construction is exact (width by duplication and scaling under every norm placement; depth under pre-LN), and an
honest "not exact" with the reason where it is not (depth under post-LN / DeepNorm, width under sinusoidal /
ALiBi positions)."""

from __future__ import annotations

import pytest
import torch

from maskplay import preset
from maskplay.cli import main
from maskplay.families import MaskplayModel, build_model
from maskplay.tasks.grow import grow, largest_difference
from tests.conftest import padded_batch

EXACT_SWITCHES = [
    {},
    dict(norm_placement="pre"),
    dict(norm_placement="deepnorm", ffn="swiglu"),
    dict(talking_heads=True, positions="t5", norm="rmsnorm"),
    dict(key_size=6, positions="rotary", share_layers=True),
    dict(attention="synthesizer-dense", ffn="geglu", ffn_bias=False),
    dict(attention="synthesizer-random", positions="none"),
]


def model_of(family: str, seed: int = 0, **overrides) -> MaskplayModel:
    """Large random weights, norm gains and biases too, so that any unit out of place shows in the logits."""
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, **overrides))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.25)
            else:
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def logits_difference(small: MaskplayModel, big: MaskplayModel) -> float:
    ids, mask = padded_batch([9, 5, 7])
    with torch.no_grad():
        a = small(ids, attention_mask=mask).logits
        b = big.eval()(ids, attention_mask=mask).logits
    return float((a - b)[mask].abs().max())


@pytest.mark.parametrize("switches", EXACT_SWITCHES, ids=lambda s: "+".join(f"{k}={v}" for k, v in s.items()) or "default")
@pytest.mark.parametrize("family", ["bert", "gpt", "unilm", "tta"])
def test_width_growth_is_exact(family, switches):
    small = model_of(family, **switches)
    grown = grow(small, hidden=64)  # 32 -> 64: two copies of every unit, 4 -> 8 heads
    assert grown.exact and grown.reasons == []
    cfg = grown.model.config
    assert (cfg.hidden_size, cfg.num_heads, cfg.head_dim) == (64, 8, small.config.head_dim)
    assert logits_difference(small, grown.model) < 1e-5


def test_width_growth_by_three_and_depth_growth_under_pre_ln_are_exact():
    small = model_of("tta", norm_placement="pre")
    grown = grow(small, layers=4, hidden=96)
    assert grown.exact
    assert (grown.model.config.num_layers, grown.model.config.intermediate_size) == (4, 3 * 64)
    assert logits_difference(small, grown.model) < 1e-5
    new = grown.model.encoder.layers[3]
    assert new.attn.out.weight.abs().sum() == 0 and new.ffn.down.weight.abs().sum() == 0
    assert new.attn.query.weight.abs().sum() > 0  # the rest of a new block is a fresh initialisation


@pytest.mark.parametrize("placement", ["post", "deepnorm"])
def test_depth_growth_under_post_ln_says_it_is_not_exact(placement):
    small = model_of("bert", norm_placement=placement)
    grown = grow(small, layers=3)
    assert not grown.exact and "pre-LN" in grown.reasons[0]
    assert logits_difference(small, grown.model) > 1e-3  # and indeed it is not: the exact tests above can fail


@pytest.mark.parametrize("positions", ["sinusoidal", "alibi"])
def test_width_growth_says_where_a_fixed_part_depends_on_the_width(positions):
    small = model_of("gpt", positions=positions)
    grown = grow(small, hidden=64)
    assert not grown.exact and positions in grown.reasons[0]
    assert logits_difference(small, grown.model) > 1e-4


def test_a_grown_model_trains():
    grown = grow(model_of("bert", norm_placement="pre"), layers=3, hidden=64).model.train()
    ids, mask = padded_batch([6, 4])
    out = grown(**grown.training_batch(ids, mask, torch.Generator().manual_seed(0)))
    out.loss.backward()
    assert grown.encoder.layers[2].attn.out.weight.grad.abs().sum() > 0  # the zero branches learn


@pytest.mark.parametrize("kwargs, overrides, message", [
    (dict(hidden=48), {}, "multiple of the model's 32"),
    (dict(hidden=64, heads=4), {}, "--heads must grow by the width's factor 2"),
    (dict(layers=1), {}, "grow only grows"),
    (dict(layers=3), dict(share_layers=True), "share_layers"),
    (dict(hidden=64), dict(embedding_size=16), "embedding_size"),
])
def test_what_cannot_grow_is_a_one_line_error(kwargs, overrides, message):
    with pytest.raises(ValueError, match=message) as err:
        grow(model_of("bert", **overrides), **kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("family", ["electra", "xlnet"])
def test_families_grow_does_not_build_are_named(family):
    with pytest.raises(ValueError, match="grow is built for"):
        grow(build_model(preset("tiny", family=family)), hidden=64)


def test_cli_grows_a_model_directory(tmp_path, capsys):
    small = model_of("gpt", norm_placement="pre")
    small.save_pretrained(tmp_path / "small")
    assert main(["grow", str(tmp_path / "small"), "--layers", "3", "--hidden", "64", "--out", str(tmp_path / "big")]) == 0
    out = capsys.readouterr().out
    assert "2 x 32 (4 heads) -> 3 x 64 (8 heads)" in out and "exact;" in out
    big = MaskplayModel.from_pretrained(tmp_path / "big")
    assert logits_difference(small, big) < 1e-5
    assert largest_difference(small, big) < 1e-5
    assert main(["grow", str(tmp_path / "small"), "--hidden", "64", "--out", str(tmp_path / "big")]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and err.count("\n") == 1
