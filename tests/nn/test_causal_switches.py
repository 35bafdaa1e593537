"""The switches HuggingFace's causal LMs need (docs/guides/switches.md): grouped-query attention (num_kv_heads), the
parallel residual, partial rotary and its base, no embedding norm, the plain LM heads and the ReLU feed-forward,
each against a formula written out here; their defaults leave a model as it was; the key/value cache (plain and
static) holds the key/value heads only. tests/nn/test_arch_switches.py runs them through every family's paths."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from maskplay import preset
from maskplay.config import CAUSAL_LM_SWITCHES, ModelConfig
from maskplay.families import build_model
from maskplay.nn.attention.inputs import PassInputs
from maskplay.nn.positions import rotary_angles, rotate_half
from maskplay.tasks.decoding import generate
from tests.nn.test_arch_switches import model_of


def tiny(family: str = "gpt", seed: int = 0, **overrides):
    return model_of(family, seed, **overrides)


def causal_mask(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None]


# ---- defaults -------------------------------------------------------------------------------------------------


def test_defaults_leave_the_model_and_its_config_json_as_they_were():
    for family in ("gpt", "bert", "tta"):
        config = preset("tiny", family=family)
        assert all(getattr(config, name) == value for name, value in CAUSAL_LM_SWITCHES.items())
        assert not set(CAUSAL_LM_SWITCHES) & set(config.to_dict())  # config.json as before the switches existed
        keys = set(build_model(config).state_dict())
        assert "embeddings.norm.weight" in keys and "head.dense.weight" in keys and "head.decoder.weight" not in keys
    changed = preset("tiny", family="gpt", num_kv_heads=2, lm_head="tied").to_dict()
    assert changed["num_kv_heads"] == 2 and changed["lm_head"] == "tied"


def test_num_kv_heads_equal_to_num_heads_is_the_default_bitwise():
    a, b = tiny(), tiny(num_kv_heads=4)
    b.load_state_dict(a.state_dict())
    ids = torch.randint(7, 90, (2, 9))
    assert torch.equal(a(ids).logits, b(ids).logits)


# ---- grouped-query attention ----------------------------------------------------------------------------------


def test_grouped_query_attention_is_the_formula():
    model = tiny(num_kv_heads=2)
    attn = model.encoder.layers[0].attn
    H, heads, kv, d = 32, 4, 2, 8
    assert attn.query.weight.shape == (H, H) and attn.key.weight.shape == attn.value.weight.shape == (kv * d, H)
    x = torch.randn(2, 5, H)
    q = attn.query(x).view(2, 5, heads, d).transpose(1, 2)
    k = attn.key(x).view(2, 5, kv, d).transpose(1, 2)
    v = attn.value(x).view(2, 5, kv, d).transpose(1, 2)
    outs = []
    for head in range(heads):  # query head i reads key/value head i // (heads / kv)
        scores = q[:, head] @ k[:, head // 2].transpose(-1, -2) / math.sqrt(d)
        outs.append(scores.masked_fill(~causal_mask(5)[0], float("-inf")).softmax(-1) @ v[:, head // 2])
    want = attn.out(torch.stack(outs, 1).transpose(1, 2).reshape(2, 5, H))
    torch.testing.assert_close(attn(x, PassInputs(causal_mask(5))), want, atol=1e-5, rtol=1e-5)


def test_the_cache_holds_the_key_value_heads_only():
    model = tiny(num_kv_heads=1)
    ids = torch.randint(7, 90, (2, 6))
    cache, _ = model.prefill(ids)
    assert cache.keys[0].shape[1] == 1 and cache.values[1].shape[1] == 1


def test_static_decode_with_grouped_query_attention(monkeypatch):
    """generate(compile=True)'s static cache (torch.compile as the identity: its bookkeeping, not the compiler)
    gives the plain cached path's tokens and logits."""
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)
    model = tiny(num_kv_heads=2, positions="rotary", norm_placement="pre", rotary_fraction=0.5)
    prompts = [[3, 10, 11, 12], [3, 20]]
    plain = generate(model, prompts, max_new_tokens=6, output_logits=True, stop_ids=[])
    fast = generate(model, prompts, max_new_tokens=6, output_logits=True, stop_ids=[], compile=True)
    assert [g.token_ids for g in fast] == [g.token_ids for g in plain]
    for f, p in zip(fast, plain, strict=True):
        torch.testing.assert_close(f.logits, p.logits, atol=1e-5, rtol=1e-5)


# ---- the block and its positions ------------------------------------------------------------------------------


def test_parallel_residual_is_gpt_neox_block():
    model = tiny(norm_placement="pre", parallel_residual=True)
    block = model.encoder.layers[0]
    x = torch.randn(2, 5, 32)
    inputs = PassInputs(causal_mask(5))
    want = x + block.attn(block.attn_norm(x), inputs) + block.ffn(block.ffn_norm(x))
    torch.testing.assert_close(block(x, inputs), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fraction, base", [(0.5, 10000.0), (0.25, 77.0), (1.0, 500.0)])
def test_partial_rotary_rotates_the_first_dimensions_by_its_base(fraction, base):
    model = tiny(positions="rotary", rotary_fraction=fraction, rotary_base=base)
    attn = model.encoder.layers[0].attn
    d, rot = 8, int(8 * fraction)
    x = torch.randn(1, 5, 32)
    q = attn.query(x).view(1, 5, 4, d).transpose(1, 2)
    k = attn.key(x).view(1, 5, 4, d).transpose(1, 2)
    v = attn.value(x).view(1, 5, 4, d).transpose(1, 2)
    inv = 1.0 / base ** (torch.arange(0, rot, 2).float() / rot)  # GPT-NeoX's inv_freq over the rotated dimensions
    angles = torch.arange(5).float()[:, None] * inv
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rotated(t):
        head = t[..., :rot]
        return torch.cat([head * cos + rotate_half(head) * sin, t[..., rot:]], -1)

    scores = rotated(q) @ rotated(k).transpose(-1, -2) / math.sqrt(d)
    a = scores.masked_fill(~causal_mask(5)[0], float("-inf")).softmax(-1) @ v
    want = attn.out(a.transpose(1, 2).reshape(1, 5, 32))
    columns = torch.arange(5)[None]
    mask, positions = model.encoder._pass_positions(causal_mask(5), columns, columns, x.dtype)
    torch.testing.assert_close(attn(x, PassInputs(mask, positions=positions)), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rotary_angles(columns, rot, base)[0][0], cos)


def test_no_embedding_norm_adds_token_and_position():
    model = tiny(embedding_norm=False)
    assert model.embeddings.norm is None
    ids = torch.tensor([[5, 6, 7]])
    want = model.embeddings.word(ids) + model.embeddings.position.weight[:3]
    torch.testing.assert_close(model.embed(ids), want)


def test_relu_feed_forward():
    ffn = tiny(ffn="relu").encoder.layers[0].ffn
    x = torch.randn(3, 32)
    assert ffn.up.out_features == 64  # not gated: intermediate_size as it is
    torch.testing.assert_close(ffn(x), ffn.down(F.relu(ffn.up(x))))


# ---- the plain LM heads ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt", "bert", "tta"])
@pytest.mark.parametrize("head", ["tied", "untied"])
def test_plain_lm_head_is_a_projection_without_bias(family, head):
    model = tiny(family, lm_head=head)
    names = {n for n, _ in model.named_parameters() if n.startswith("head.")}
    assert names == ({"head.decoder.weight"} if head == "untied" else set())
    weight = model.embeddings.word.weight if head == "tied" else model.head.decoder.weight
    ids = torch.randint(7, 90, (2, 7))
    out = model(ids)
    torch.testing.assert_close(out.logits, out.last_hidden_state @ weight.T)
    hidden, targets = out.last_hidden_state[0], ids[0]
    want = torch.log_softmax(hidden @ weight.T, -1).gather(1, targets[:, None])[:, 0]
    torch.testing.assert_close(model.head.log_probs(hidden, model.embeddings.word.weight, targets), want)
    torch.testing.assert_close(model.head.log_probs(hidden, model.embeddings.word.weight, targets, 2.0),
                               torch.log_softmax(hidden @ weight.T / 2, -1).gather(1, targets[:, None])[:, 0])
    labels = ids.clone()
    loss = model.train()(ids, labels=labels).loss
    loss.backward()
    assert math.isfinite(loss.item()) and weight.grad is not None and weight.grad.abs().sum() > 0


def test_untied_head_saves_and_loads(tmp_path):
    from maskplay.families import MaskplayModel

    model = tiny(lm_head="untied", num_kv_heads=2, embedding_norm=False)
    model.save_pretrained(tmp_path)
    loaded = MaskplayModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(7, 90, (2, 7))
    assert torch.equal(loaded(ids).logits, model(ids).logits)


# ---- errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, message", [
    (dict(family="gpt", num_kv_heads=3), "num_kv_heads must divide num_heads"),
    (dict(family="gpt", num_kv_heads=0), "num_kv_heads must divide num_heads"),
    (dict(family="gpt", num_kv_heads=2, attention="lsra"), "needs q . k attention"),
    (dict(family="gpt", parallel_residual=True), "needs norm_placement = 'pre'"),
    (dict(family="gpt", rotary_fraction=0.5), "need positions = 'rotary'"),
    (dict(family="gpt", positions="rotary", rotary_fraction=0.05), "even number"),
    (dict(family="gpt", positions="rotary", rotary_base=0.0), "rotary_base a finite number"),
    (dict(family="gpt", lm_head="plain"), "lm_head must be one of"),
    (dict(family="gpt", lm_head="tied", embedding_size=16), "not with head_norm or an embedding_size"),
    (dict(family="xlnet", num_kv_heads=2), "single-stream families"),
    (dict(family="electra", lm_head="tied"), "ELECTRA model's heads are its own"),
])
def test_bad_values_are_one_line_errors(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**fields)
    assert "\n" not in str(err.value)


def test_a_switched_model_does_not_convert_to_huggingface_bert():
    from maskplay.families.hf import to_hf

    with pytest.raises(ValueError, match="num_kv_heads = 2"):
        to_hf(tiny(num_kv_heads=2))
    with pytest.raises(ValueError, match="lm_head = 'tied'"):
        to_hf(tiny(lm_head="tied"))


def test_beam_search_reorders_a_grouped_query_cache():
    """Beam search reorders the cache of key/value heads as it follows its beams: the same beams as without a cache."""
    model = tiny(num_kv_heads=2, positions="rotary", norm_placement="pre", parallel_residual=True, lm_head="untied")
    prompts = [[3, 10, 11, 12], [3, 20]]
    cached = generate(model, prompts, max_new_tokens=5, strategy="beam", num_beams=3, stop_ids=[])
    plain = generate(model, prompts, max_new_tokens=5, strategy="beam", num_beams=3, stop_ids=[], use_cache=False)
    assert [g.token_ids for g in cached] == [g.token_ids for g in plain]
