"""Position schemes (positions.py, docs/guides/switches.md): each against its formula or a published implementation,
wired through every single-stream family (packing, PLL's last-layer query rows, the key/value cache), T-TA's
no-leak rule under each, and the config switch (TOML, --set, config.json, save/load, one-line errors)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from maskplay import preset
from maskplay.config import POSITION_SCHEMES, ModelConfig, apply_overrides
from maskplay.families import MaskplayModel, build_model
from maskplay.nn.attention.inputs import PassInputs
from maskplay.nn.cache import KVCache
from maskplay.nn.pass_modes import LastLayerRows
from maskplay.nn.positions import (
    IN_ATTENTION,
    T5_BUCKETS,
    alibi_slopes,
    apply_rotary,
    rotary_angles,
    sinusoid_table,
    sinusoidal_embedding,
    t5_bucket,
)
from maskplay.runtime.precision import forward_in
from maskplay.tasks.train.config import ModelSection, TrainConfig
from tests.conftest import padded_batch
from tests.test_leak import assert_tta_reads_all_but_itself, jacobian_norms

SCHEMES = ("learned", "sinusoidal", "rotary", "t5", "alibi", "none", "disentangled")  # disentangled: its formulas in
# tests/families/test_gpt_bert_switches.py
SINGLE_STREAM = ("bert", "gpt", "unilm", "electra", "tta")


def model_of(family: str, positions: str, seed: int = 0, **overrides) -> MaskplayModel:
    """A tiny model with large random weights (peaked attention, so that positions visibly matter)."""
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, positions=positions, **overrides))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.25)
    return model.eval()


# ---- the formulas ----------------------------------------------------------------------------------------------


def test_sinusoid_table_is_vaswanis_formula():
    d = 10
    table = sinusoid_table(7, d)
    for p in range(7):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert sinusoid_table(3, 5).shape == (3, 5)  # an odd width ends with a sine column


def test_sinusoidal_embeddings_add_the_fixed_table_and_save_nothing(tmp_path):
    model = model_of("bert", "sinusoidal")
    cfg = model.config
    assert not any("position" in name for name in model.state_dict())
    expected = sinusoid_table(cfg.max_position, cfg.hidden_size) * cfg.initializer_range * math.sqrt(2)
    torch.testing.assert_close(sinusoidal_embedding(cfg), expected)
    # the table has the RMS of a learned table at initialisation
    assert sinusoidal_embedding(cfg).pow(2).mean().sqrt().item() == pytest.approx(cfg.initializer_range, rel=0.05)
    ids = torch.tensor([[9, 9, 9]])
    emb = model.embeddings
    want = emb.norm(emb.word(ids) + expected[:3])
    torch.testing.assert_close(emb(ids), want)
    torch.testing.assert_close(emb(ids, positions=torch.tensor([[5, 6, 7]])), emb.norm(emb.word(ids) + expected[5:8]))


def rope_paper(x: torch.Tensor, position: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's eq. (34) written out: R_{Theta, m} x with 2x2 rotations of the pairs (x_{2i}, x_{2i+1}) by
    m theta_i, theta_i = base^(-2i/d) (the paper's interleaved layout)."""
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(d // 2):
        angle = position * base ** (-2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        out[..., 2 * i] = c * x[..., 2 * i] - s * x[..., 2 * i + 1]
        out[..., 2 * i + 1] = s * x[..., 2 * i] + c * x[..., 2 * i + 1]
    return out


def test_rotary_is_ropes_rotation_in_the_half_split_layout():
    """apply_rotary pairs dimension i with i + d/2; permuting the paper's interleaved pairs into that layout
    (what a query/key projection absorbs) gives the paper's rotation exactly."""
    d, L = 8, 6
    x = torch.randn(2, 3, L, d, dtype=torch.float64)
    cos, sin = rotary_angles(torch.arange(L), d)
    got = apply_rotary(x, cos.double(), sin.double())
    half_to_interleaved = torch.tensor([j for i in range(d // 2) for j in (i, i + d // 2)])
    for m in range(L):
        want = rope_paper(x[:, :, m][..., half_to_interleaved], m)
        torch.testing.assert_close(got[:, :, m][..., half_to_interleaved], want, atol=1e-6, rtol=1e-6)


def test_rotary_matches_huggingface_llama():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    d, L = 16, 9
    q, k = torch.randn(2, 4, L, d), torch.randn(2, 4, L, d)
    cos, sin = rotary_angles(torch.arange(L)[None], d)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)  # cos/sin (1, L, d), unsqueezed at dim 1 there
    torch.testing.assert_close(apply_rotary(q, cos[:, None], sin[:, None]), want_q)
    torch.testing.assert_close(apply_rotary(k, cos[:, None], sin[:, None]), want_k)


def test_rotary_scores_depend_on_the_distance_only():
    d = 16
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        cos, sin = rotary_angles(torch.tensor([m, n]), d)
        rq = apply_rotary(q, cos[0].double(), sin[0].double())
        rk = apply_rotary(k, cos[1].double(), sin[1].double())
        return float(rq @ rk)

    for m, n in [(3, 1), (10, 4), (0, 7)]:
        for shift in (1, 5, 40):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-5)  # fp32 angles
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)  # and it does depend on the distance


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_match_t5s_relative_position_bucket(bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-300, 301)[None, :] + torch.zeros(3, 1, dtype=torch.long)
    want = T5Attention._relative_position_bucket(relative, bidirectional=bidirectional, num_buckets=32,
                                                 max_distance=128)
    assert torch.equal(t5_bucket(relative, bidirectional), want)
    assert int(want.max()) == T5_BUCKETS - 1


def paper_slopes(n: int) -> list[float]:
    """get_slopes from the ALiBi authors' code (ofirpress/attention_with_linear_biases), verbatim in substance."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + paper_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2]


def test_alibi_slopes_are_the_papers():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -k for k in range(1, 9)])
    for n in range(1, 33):
        assert alibi_slopes(n).tolist() == pytest.approx(paper_slopes(n), rel=1e-6)


@pytest.mark.parametrize("positions", ["rotary", "t5", "alibi"])
def test_a_layer_attends_as_the_formula_says(positions):
    """One attention layer of a model against softmax((R_i q_i) . (R_j k_j) / sqrt(d) + b_h(i, j)) v written out,
    with b = -m_h |i - j| (ALiBi) or the shared table at T5's bucket of j - i."""
    model = model_of("bert", positions)
    attn, encoder = model.encoder.layers[0].attn, model.encoder
    B, L, H = 2, 6, model.config.hidden_size
    nh, d = model.config.num_heads, model.config.head_dim
    x = torch.randn(B, L, H)
    mask = torch.ones(B, 1, L, L, dtype=torch.bool)
    mask[1, :, :, 4:] = False  # row 1 has 4 real tokens
    columns = torch.arange(L)[None]
    prepared, passed = encoder._pass_positions(mask, columns, columns, x.dtype)
    got = attn(x, PassInputs(prepared, positions=passed))

    q = attn.query(x).view(B, L, nh, d).transpose(1, 2)
    k = attn.key(x).view(B, L, nh, d).transpose(1, 2)
    v = attn.value(x).view(B, L, nh, d).transpose(1, 2)
    bias = torch.zeros(nh, L, L)
    if positions == "rotary":
        cos, sin = rotary_angles(torch.arange(L), d)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    for h in range(nh):
        for i in range(L):
            for j in range(L):
                if positions == "alibi":
                    bias[h, i, j] = -alibi_slopes(nh)[h] * abs(i - j)
                elif positions == "t5":
                    bias[h, i, j] = encoder.positions.buckets.weight[int(t5_bucket(torch.tensor(j - i))), h]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d) + bias
    scores = scores.masked_fill(~mask, float("-inf"))
    want = attn.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_t5_bias_is_one_table_shared_by_every_layer():
    model = model_of("bert", "t5", num_layers=3)
    tables = [name for name, _ in model.named_parameters() if "buckets" in name]
    assert tables == ["encoder.positions.buckets.weight"]
    assert model.encoder.positions.buckets.weight.shape == (T5_BUCKETS, model.config.num_heads)
    base = build_model(preset("tiny", family="bert", positions="none", num_layers=3))
    assert model.num_parameters() - base.num_parameters() == T5_BUCKETS * model.config.num_heads


def test_gpt_uses_t5s_decoder_buckets():
    assert model_of("gpt", "t5").encoder.positions.bidirectional is False
    assert model_of("bert", "t5").encoder.positions.bidirectional is True


# ---- through the families ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", (*IN_ATTENTION, "disentangled"))
@pytest.mark.parametrize("family", SINGLE_STREAM)
def test_relative_schemes_are_translation_invariant(family, positions):
    """A row shifted right by left padding gives the same outputs at its real tokens: under rotary, t5 and alibi
    positions enter only as the distance between query and key (T-TA: in neither stream's embeddings)."""
    model = model_of(family, positions)
    ids, mask = padded_batch([5])
    shifted = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    shifted_mask = torch.cat([torch.zeros(1, 3, dtype=torch.bool), mask], dim=1)
    with torch.no_grad():
        a = model(ids, attention_mask=mask).last_hidden_state
        b = model(shifted, attention_mask=shifted_mask).last_hidden_state[:, 3:]
    torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_absolute_schemes_are_not_translation_invariant(positions):
    """The test above can fail: absolute positions move with the shift."""
    model = model_of("tta", positions)
    ids, mask = padded_batch([5])
    shifted = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    shifted_mask = torch.cat([torch.zeros(1, 3, dtype=torch.bool), mask], dim=1)
    with torch.no_grad():
        a = model(ids, attention_mask=mask).last_hidden_state
        b = model(shifted, attention_mask=shifted_mask).last_hidden_state[:, 3:]
    assert (a - b).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["bert", "tta"])
def test_no_positions_is_permutation_equivariant(family):
    model = model_of(family, "none")
    ids, _ = padded_batch([6])
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        a = model(ids).last_hidden_state
        b = model(ids[:, order]).last_hidden_state
    torch.testing.assert_close(a[:, order], b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", SCHEMES)
def test_where_positions_enter_tta(positions):
    """T-TA's query stream is [MASK] + position and its keys/values token + position under learned and sinusoidal;
    under every other scheme both streams' embeddings are free of positions."""
    model = model_of("tta", positions)
    ids = torch.tensor([[9, 9, 9, 9]])
    queries = model.embed(torch.full_like(ids, model.config.mask_token_id))
    keys = model.embed(ids)
    absolute = positions in ("learned", "sinusoidal")
    for stream in (queries, keys):
        same = torch.allclose(stream[0, 0], stream[0, 3])
        assert same != absolute


@pytest.mark.parametrize("positions", SCHEMES)
def test_tta_output_i_never_sees_token_i_under_every_scheme(positions):
    model = model_of("tta", positions)
    ids, mask = padded_batch([6, 4])
    norms = jacobian_norms(model, ids, mask)  # every depth, logits included
    assert_tta_reads_all_but_itself(norms, mask, positions)


@pytest.mark.parametrize("positions", [*SCHEMES, "transformer-xl"])
def test_gpt_never_sees_later_tokens_under_every_scheme(positions):
    model = model_of("gpt", positions)
    ids, mask = padded_batch([6])
    norms = jacobian_norms(model, ids, mask)
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    assert torch.all(norms[:, 0][:, future] == 0)
    assert torch.all(norms[:, 0][:, ~future] > 0)


@pytest.mark.parametrize("positions", SCHEMES)
@pytest.mark.parametrize("family", SINGLE_STREAM)
def test_packed_inference_equals_the_padded_layout(family, positions):
    model = model_of(family, positions)
    ids, mask = padded_batch([7, 3, 6, 2, 5])
    a = model(ids, attention_mask=mask).last_hidden_state  # autograd on: the padded layout
    with torch.inference_mode():
        b = model(ids, attention_mask=mask).last_hidden_state  # packed
    torch.testing.assert_close(a[mask], b[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", SCHEMES)
@pytest.mark.parametrize("family", ["bert", "tta"])
def test_last_layer_query_rows_equal_the_full_pass(family, positions):
    """PLL's path: the last block at one position per row equals the full forward at that position."""
    model = model_of(family, positions)
    ids, mask = padded_batch([7, 4, 6])
    rows = torch.tensor([5, 0, 3])
    with torch.no_grad():
        full = model(ids, attention_mask=mask).last_hidden_state
        one = model(ids, attention_mask=mask, last_layer_rows=LastLayerRows(rows)).last_hidden_state[:, 0]
    torch.testing.assert_close(one, full[torch.arange(3), rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", [*SCHEMES, "transformer-xl"])
def test_gpt_cache_continues_the_positions(positions):
    """Prompts left- and right-padded, then tokens one and two at a time: every next-token logit equals GPT.forward's
    on the unpadded sequence, so new tokens sit after the cached ones and rotary/ALiBi/T5 relate them to the
    cached keys' absolute positions."""
    model = model_of("gpt", positions)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(7, 90, (n,), generator=g).tolist() for n in (6, 3, 5)]
    extra = torch.randint(7, 90, (3, 3), generator=g)
    width = max(map(len, prompts))
    for side in ("left", "right"):
        ids = torch.zeros(3, width, dtype=torch.long)
        for k, p in enumerate(prompts):
            if side == "left":
                ids[k, width - len(p):] = torch.tensor(p)
            else:
                ids[k, :len(p)] = torch.tensor(p)
        with torch.no_grad():
            cache, logits = model.prefill(ids, ids != 0)
            got = [logits, model.step(extra[:, :1], cache)]
            got.append(model.step(extra[:, 1:3], cache))  # two new tokens at once: the logit after the second
            for k, p in enumerate(prompts):
                want = model(torch.tensor([p + extra[k].tolist()])).logits
                torch.testing.assert_close(torch.stack([x[k] for x in got]), want[0, [len(p) - 1, len(p), len(p) + 2]],
                                           atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", IN_ATTENTION)
def test_unilm_prefill_and_steps_equal_its_full_forward(positions):
    model = model_of("unilm", positions, type_vocab_size=2)
    sep = model.config.separator_id
    source = torch.tensor([[3, 20, 21, 22, sep]])
    target = torch.tensor([[30, 31]])
    with torch.no_grad():
        cache, first = model.prefill(source)
        second = model.step(target[:, :1], cache)
        third = model.step(target[:, 1:], cache)
        full = model(torch.cat([source, target], 1)).logits
    torch.testing.assert_close(torch.stack([first[0], second[0], third[0]]), full[0, 4:7], atol=1e-5, rtol=1e-5)


def test_the_cache_records_each_columns_position():
    cache = KVCache(1)
    cache.extend(torch.tensor([[False, True, True], [True, True, True]]))
    cache.extend(torch.tensor([[True], [False]]))
    assert cache.key_positions[:, :cache.length].tolist() == [[0, 0, 1, 2], [0, 1, 2, 0]]
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.key_positions[:, :cache.length].tolist() == [[0, 1, 2, 0], [0, 1, 2, 0], [0, 0, 1, 2]]


@pytest.mark.parametrize("positions", SCHEMES)
def test_training_with_attention_dropout_reads_the_bias(positions):
    """The explicit-softmax path (training with attention dropout) adds a float mask as SDPA does: with a
    vanishing dropout rate it equals the eval pass."""
    model = model_of("bert", positions, hidden_dropout=0.0, attention_dropout=1e-12)
    ids, mask = padded_batch([6, 4])
    want = model(ids, attention_mask=mask).last_hidden_state
    got = model.train()(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", SCHEMES)
def test_bf16_runs_close_to_fp32(positions):
    model = model_of("tta", positions)
    ids, mask = padded_batch([6, 4])
    want = model(ids, attention_mask=mask).last_hidden_state
    got = forward_in(model, "bf16", ids, attention_mask=mask).last_hidden_state
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float()[mask], want[mask], atol=0.1, rtol=0.05)


@pytest.mark.parametrize("positions", SCHEMES)
def test_every_family_trains_a_step(positions):
    for family in SINGLE_STREAM:
        model = model_of(family, positions).train()
        ids, mask = padded_batch([6, 4])
        if family == "unilm":
            model.config.unilm.objective = "mixed"
        out = model(**model.training_batch(ids, mask, torch.Generator().manual_seed(0)))
        out.loss.backward()
        assert math.isfinite(out.loss.item())
        if positions == "t5":
            assert model.encoder.positions.buckets.weight.grad.abs().sum() > 0


# ---- the switch -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", SCHEMES)
def test_save_and_load_round_trip(tmp_path, positions):
    model = model_of("tta", positions)
    model.save_pretrained(tmp_path)
    loaded = MaskplayModel.from_pretrained(tmp_path).eval()
    assert loaded.config.positions == positions
    ids, mask = padded_batch([5, 3])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, attention_mask=mask).last_hidden_state,
                                   model(ids, attention_mask=mask).last_hidden_state)


def test_the_switch_in_toml_and_set(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model]\nfamily = "bert"\npreset = "tiny"\npositions = "alibi"\n')
    from maskplay.tasks.train.config import load_train_config

    cfg = load_train_config(path)
    assert cfg.model.build({"vocab_size": 100}).positions == "alibi"
    cfg = apply_overrides(cfg, ["model.positions=rotary"])
    assert cfg.model.build({"vocab_size": 100}).positions == "rotary"
    assert load_train_config(_written(tmp_path, cfg)).model.positions == "rotary"  # to_toml writes it back


def _written(tmp_path, cfg: TrainConfig):
    path = tmp_path / "back.toml"
    path.write_text(cfg.to_toml())
    return path


def test_defaults_are_the_familys_own():
    assert ModelConfig(family="bert").positions == "learned"
    assert ModelConfig(family="xlnet").positions == "transformer-xl"
    assert set(SCHEMES) | {"transformer-xl"} == set(POSITION_SCHEMES)


@pytest.mark.parametrize("fields, message", [
    (dict(family="bert", positions="relative"), "positions must be one of"),
    (dict(family="xlnet", positions="rotary"), "family xlnet needs positions = 'transformer-xl'"),
    (dict(family="bert", positions="transformer-xl"), "built for family gpt / xlnet only"),
    (dict(family="bert", positions="rotary", hidden_size=30, num_heads=2), "must be even"),
])
def test_bad_combinations_are_one_line_errors(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**fields)
    assert "\n" not in str(err.value)
    section = {k: v for k, v in fields.items() if k != "family"}
    with pytest.raises(ValueError, match=message):
        ModelSection(family=fields["family"], preset="tiny", **section)


def test_converting_a_non_default_architecture_to_huggingface_is_an_error():
    from maskplay.families.hf import to_hf

    with pytest.raises(ValueError, match="positions = 'rotary'"):
        to_hf(model_of("bert", "rotary"))
    to_hf(model_of("bert", "learned"))  # the default converts
    assert dataclasses.replace(ModelConfig(family="bert"), positions="learned").architecture_changes() == []
