"""The architecture switches of docs/guides/switches.md other than positions (tests/nn/test_positions.py): each against
a formula written out here, and every switch through every family's paths (training step, packed inference,
PLL's last-layer rows, the key/value cache, save/load, bf16, T-TA's no-leak rule at every depth)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from maskplay import preset
from maskplay.config import ModelConfig
from maskplay.families import MaskplayModel, build_model
from maskplay.nn.attention.inputs import PassInputs
from maskplay.nn.pass_modes import LastLayerRows
from maskplay.runtime.precision import forward_in
from maskplay.tasks.train.config import ModelSection
from tests.conftest import padded_batch
from tests.test_leak import assert_tta_reads_all_but_itself, jacobian_norms

SINGLE_STREAM = ("bert", "gpt", "unilm", "electra", "tta")

# one entry per switch (and a few combinations): the fields set away from the default
SWITCHES = {
    "key_size=4": dict(key_size=4),
    "key_size=12+rotary": dict(key_size=12, positions="rotary"),
    "talking_heads": dict(talking_heads=True),
    "talking_heads+alibi": dict(talking_heads=True, positions="alibi"),
    "pre": dict(norm_placement="pre"),
    "deepnorm": dict(norm_placement="deepnorm"),
    "rmsnorm": dict(norm="rmsnorm"),
    "pre+rmsnorm+rotary": dict(norm_placement="pre", norm="rmsnorm", positions="rotary"),
    "geglu": dict(ffn="geglu"),
    "swiglu+no_ffn_bias": dict(ffn="swiglu", ffn_bias=False),
    "no_ffn_bias": dict(ffn_bias=False),
    "share_layers": dict(share_layers=True),
    "share_layers+deepnorm+embedding_size": dict(share_layers=True, norm_placement="deepnorm", embedding_size=16),
    "synthesizer-random": dict(attention="synthesizer-random"),
    "synthesizer-dense": dict(attention="synthesizer-dense"),
    "synthesizer-dense+alibi+pre+shared": dict(attention="synthesizer-dense", positions="alibi", norm_placement="pre",
                                               share_layers=True),
    "lsra": dict(attention="lsra"),
    "lsra+alibi+pre+kernel3": dict(attention="lsra", positions="alibi", norm_placement="pre", lsra_kernel=3),
    "lsra+rotary+talking_heads+deepnorm": dict(attention="lsra", positions="rotary", talking_heads=True,
                                               norm_placement="deepnorm", lsra_kernel=5),
    # GPT-BERT's (tests/families/test_gpt_bert_switches.py has their formulas)
    "disentangled+key_size+denseformer": dict(positions="disentangled", key_size=6, denseformer=True),
    "norm_affine+ffn_inner_norm+gelu_tanh+head_norm": dict(norm_affine=False, ffn_inner_norm=True, gelu_tanh=True,
                                                           head_norm=True),
    "gpt-bert": dict(positions="disentangled", norm_placement="pre", norm_affine=False, attention_output_norm=True,
                     value_gate=True, ffn="geglu", ffn_bias=False, gelu_tanh=True, ffn_inner_norm=True,
                     denseformer=True, weight_init="truncated-depth-scaled"),
    "value_gate+attention_output_norm+denseformer+shared": dict(value_gate=True, attention_output_norm=True,
                                                                denseformer=True, share_layers=True),
    # RevNet's reversible residual (tests/nn/test_reversible.py has its gradients against a naive loop)
    "reversible": dict(norm_placement="pre", reversible=True),
    "reversible+t5+shared+rmsnorm": dict(norm_placement="pre", reversible=True, positions="t5", share_layers=True,
                                         norm="rmsnorm"),
    # HuggingFace causal LMs' (tests/nn/test_causal_switches.py has their formulas)
    "llama": dict(num_kv_heads=2, positions="rotary", norm_placement="pre", norm="rmsnorm", ffn="swiglu",
                  ffn_bias=False, embedding_norm=False, rotary_base=500.0),
    "neox+relu": dict(norm_placement="pre", parallel_residual=True, positions="rotary", rotary_fraction=0.5,
                      embedding_norm=False, ffn="relu"),
    "multi-query+alibi+talking_heads": dict(num_kv_heads=1, positions="alibi", talking_heads=True),
}


def xlnet_takes(fields: dict) -> bool:
    """XLNet keeps its own positions and dot-product attention, has no pre-LN (its streams project keys/values
    outside the blocks) and no embedding projection."""
    return ("positions" not in fields and "embedding_size" not in fields and "attention" not in fields
            and fields.get("norm_placement") != "pre" and not fields.get("denseformer")
            and "num_kv_heads" not in fields)


def model_of(family: str, seed: int = 0, **overrides) -> MaskplayModel:
    """A tiny model with large random weights (peaked attention, so that every token visibly matters)."""
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, **overrides))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.25)
    return model.eval()


# ---- every switch through every path ---------------------------------------------------------------------------


@pytest.mark.parametrize("switch", SWITCHES)
def test_every_family_trains_a_step(switch):
    for family in (*SINGLE_STREAM, "xlnet"):
        fields = SWITCHES[switch]
        if family == "xlnet" and not xlnet_takes(fields):
            with pytest.raises(ValueError):
                preset("tiny", family=family, **fields)
            continue
        model = model_of(family, **fields).train()
        if family == "unilm":
            model.config.unilm.objective = "mixed"
        ids, mask = padded_batch([6, 4])
        out = model(**model.training_batch(ids, mask, torch.Generator().manual_seed(0)))
        out.loss.backward()
        assert math.isfinite(out.loss.item()), (family, switch)
        assert [n for n, p in model.named_parameters() if p.grad is None] == [], (family, switch)


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("family", SINGLE_STREAM)
def test_packed_inference_equals_the_padded_layout(family, switch):
    model = model_of(family, **SWITCHES[switch])
    ids, mask = padded_batch([7, 3, 6, 2, 5])
    a = model(ids, attention_mask=mask).last_hidden_state
    with torch.inference_mode():
        b = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a[mask], b[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("family", ["bert", "tta"])
def test_last_layer_query_rows_equal_the_full_pass(family, switch):
    model = model_of(family, **SWITCHES[switch])
    ids, mask = padded_batch([7, 4, 6])
    rows = torch.tensor([5, 0, 3])
    with torch.no_grad():
        full = model(ids, attention_mask=mask).last_hidden_state
        one = model(ids, attention_mask=mask, last_layer_rows=LastLayerRows(rows)).last_hidden_state[:, 0]
    torch.testing.assert_close(one, full[torch.arange(3), rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("switch", SWITCHES)
def test_gpt_cache_equals_the_full_forward(switch):
    model = model_of("gpt", **SWITCHES[switch])
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(7, 90, (n,), generator=g).tolist() for n in (6, 3)]
    extra = torch.randint(7, 90, (2, 2), generator=g)
    ids = torch.zeros(2, 6, dtype=torch.long)
    for k, p in enumerate(prompts):
        ids[k, 6 - len(p):] = torch.tensor(p)  # left padding
    with torch.no_grad():
        cache, logits = model.prefill(ids, ids != 0)
        got = [logits, model.step(extra[:, :1], cache), model.step(extra[:, 1:], cache)]
        for k, p in enumerate(prompts):
            want = model(torch.tensor([p + extra[k].tolist()])).logits[0, len(p) - 1:]
            torch.testing.assert_close(torch.stack([x[k] for x in got]), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("switch", SWITCHES)
def test_tta_output_i_never_sees_token_i(switch):
    model = model_of("tta", **SWITCHES[switch])
    ids, mask = padded_batch([6, 4])
    norms = jacobian_norms(model, ids, mask)
    assert_tta_reads_all_but_itself(norms, mask, switch)


@pytest.mark.parametrize("switch", SWITCHES)
def test_the_training_path_equals_eval_without_dropout(switch):
    """Training mode (the explicit softmax with attention dropout) at a vanishing dropout rate equals eval."""
    model = model_of("tta", hidden_dropout=0.0, attention_dropout=1e-12, **SWITCHES[switch])
    ids, mask = padded_batch([6, 4])
    want = model(ids, attention_mask=mask).last_hidden_state
    got = model.train()(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("switch", SWITCHES)
def test_save_load_and_bf16(tmp_path, switch):
    model = model_of("bert", **SWITCHES[switch])
    model.save_pretrained(tmp_path)
    loaded = MaskplayModel.from_pretrained(tmp_path).eval()
    for name, value in SWITCHES[switch].items():
        assert getattr(loaded.config, name) == value
    ids, mask = padded_batch([5, 3])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(loaded(ids, attention_mask=mask).last_hidden_state, want)
        got = forward_in(model, "bf16", ids, attention_mask=mask).last_hidden_state
    assert got.dtype == torch.bfloat16
    error = (got.float() - want)[mask].norm() / want[mask].norm()
    assert error < 0.05, f"bf16 relative error {error:.3f}"  # large random weights: about 0.01-0.03


@pytest.mark.parametrize("switch", SWITCHES)
def test_the_switch_through_set_and_toml(tmp_path, switch):
    from maskplay.config import apply_overrides
    from maskplay.tasks.train.config import TrainConfig, load_train_config

    sets = [f"model.{name}={str(value).lower() if isinstance(value, bool) else value}"
            for name, value in SWITCHES[switch].items()]
    cfg = apply_overrides(TrainConfig(model=ModelSection(family="bert", preset="tiny")), sets)
    built = cfg.model.build({"vocab_size": 100})
    for name, value in SWITCHES[switch].items():
        assert getattr(built, name) == value
    path = tmp_path / "run.toml"
    path.write_text(cfg.to_toml())
    assert load_train_config(path).model.build({"vocab_size": 100}) == built


# ---- key_size -------------------------------------------------------------------------------------------------


def test_key_size_sets_the_query_key_width_only():
    model = model_of("bert", key_size=3)
    cfg = model.config
    attn = model.encoder.layers[0].attn
    H, nh = cfg.hidden_size, cfg.num_heads
    assert attn.query.weight.shape == attn.key.weight.shape == (nh * 3, H)
    assert attn.value.weight.shape == attn.out.weight.shape == (H, H)
    default = build_model(preset("tiny", family="bert"))
    per_layer = 2 * (H * nh * 3 + nh * 3) - 2 * (H * H + H)
    assert model.num_parameters() - default.num_parameters() == cfg.num_layers * per_layer


def test_key_size_attention_is_the_formula():
    """softmax(q k^T / sqrt(key_size)) v per head, q and k of width key_size, v of width hidden / heads."""
    model = model_of("bert", key_size=5)
    attn = model.encoder.layers[0].attn
    B, L, H, nh = 2, 6, 32, 4
    x = torch.randn(B, L, H)
    mask = torch.ones(B, 1, L, L, dtype=torch.bool)
    mask[0, :, :, 5:] = False
    q = attn.query(x).view(B, L, nh, 5).transpose(1, 2)
    k = attn.key(x).view(B, L, nh, 5).transpose(1, 2)
    v = attn.value(x).view(B, L, nh, H // nh).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(5)).masked_fill(~mask, float("-inf"))
    want = attn.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H))
    torch.testing.assert_close(attn(x, PassInputs(mask)), want, atol=1e-6, rtol=1e-6)


def test_key_size_equal_to_the_head_width_is_the_default():
    torch.manual_seed(0)
    a = build_model(preset("tiny", family="tta")).eval()
    torch.manual_seed(0)
    b = build_model(preset("tiny", family="tta", key_size=8)).eval()
    ids, mask = padded_batch([5, 3])
    assert a.state_dict().keys() == b.state_dict().keys()
    with torch.no_grad():
        torch.testing.assert_close(a(ids, attention_mask=mask).last_hidden_state,
                                   b(ids, attention_mask=mask).last_hidden_state, atol=0, rtol=0)


# ---- talking heads -----------------------------------------------------------------------------------------------


def talking_heads_paper(x, attn, P_l, P_w, mask):
    """Shazeer et al. 2020, section 4's pseudo-code in einsum form (h_k = h = h_v heads):
    Q = X W_q, K = X W_k, V = X W_v;  J = einsum(Q, K);  L = einsum(J, P_l);  W = softmax(L + mask);
    U = einsum(W, P_w);  O = einsum(U, V); out = O W_o."""
    B, L, H = x.shape
    h = P_l.shape[0]
    Q = attn.query(x).view(B, L, h, -1)
    K = attn.key(x).view(B, L, h, -1)
    V = attn.value(x).view(B, L, h, -1)
    J = torch.einsum("bnhk,bmhk->bnmh", Q, K) / math.sqrt(Q.shape[-1])
    logits = torch.einsum("bnmh,hg->bnmg", J, P_l)
    logits = logits.masked_fill(~mask[:, 0, :, :, None], float("-inf"))
    W = logits.softmax(dim=2)
    U = torch.einsum("bnmh,hg->bnmg", W, P_w)
    O = torch.einsum("bnmh,bmhv->bnhv", U, V)
    return attn.out(O.reshape(B, L, H))


def test_talking_heads_is_the_papers_formula():
    model = model_of("bert", talking_heads=True)
    attn = model.encoder.layers[0].attn
    x = torch.randn(2, 6, 32)
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    mask[1, :, :, 3:] = False
    mask[0] &= ~torch.eye(6, dtype=torch.bool)  # T-TA's diagonal
    want = talking_heads_paper(x, attn, attn.kernel.logits_mix, attn.kernel.weights_mix, mask)
    assert not torch.allclose(attn.kernel.logits_mix, torch.eye(4))  # model_of randomised the mixing
    torch.testing.assert_close(attn(x, PassInputs(mask)), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["tta", "gpt", "xlnet"])
def test_talking_heads_with_identity_mixing_is_plain_attention(family):
    """A fresh talking-heads model (both matrices the identity) computes what the same weights compute without."""
    torch.manual_seed(0)
    talking = build_model(preset("tiny", family=family, talking_heads=True)).eval()
    plain = build_model(preset("tiny", family=family)).eval()
    state = {k: v for k, v in talking.state_dict().items() if "_mix" not in k}
    plain.load_strict(state)
    ids, mask = padded_batch([6, 4])
    with torch.no_grad():
        torch.testing.assert_close(talking(ids, attention_mask=mask).last_hidden_state,
                                   plain(ids, attention_mask=mask).last_hidden_state, atol=1e-5, rtol=1e-5)


def test_talking_heads_adds_two_mixing_matrices_per_layer():
    cfg = preset("tiny", family="bert")
    more = build_model(preset("tiny", family="bert", talking_heads=True)).num_parameters()
    assert more - build_model(cfg).num_parameters() == cfg.num_layers * 2 * cfg.num_heads ** 2


# ---- norms ---------------------------------------------------------------------------------------------------


def block_input(model, L=6):
    torch.manual_seed(1)
    x = torch.randn(2, L, model.config.hidden_size)
    mask = torch.ones(2, 1, L, L, dtype=torch.bool)
    mask[1, :, :, 4:] = False
    return x, mask


def test_pre_ln_block_and_final_norm():
    """h + Attn(LN1(h)), then + FFN(LN2(.)); the encoder's output goes through one more norm."""
    model = model_of("bert", norm_placement="pre", hidden_dropout=0.0)
    block = model.encoder.layers[0]
    x, mask = block_input(model)
    h = x + block.attn(block.attn_norm(x), PassInputs(mask))
    want = h + block.ffn(block.ffn_norm(h))
    torch.testing.assert_close(block(x, PassInputs(mask)), want)
    layers = model.encoder.layers
    out, states = model.encoder(x, mask, output_hidden_states=True)
    last = layers[1](layers[0](x, PassInputs(mask)), PassInputs(mask))
    torch.testing.assert_close(out, model.encoder.final_norm(last))
    torch.testing.assert_close(states[-1], out)
    assert type(model.encoder.final_norm) is torch.nn.LayerNorm


def test_deepnorm_block_residual_scale_and_init():
    model = model_of("bert", norm_placement="deepnorm", num_layers=3)
    block = model.encoder.layers[0]
    alpha, beta = (2 * 3) ** 0.25, (8 * 3) ** -0.25
    assert block.alpha == pytest.approx(alpha)
    x, mask = block_input(model)
    h = block.attn_norm(alpha * x + block.attn(x, PassInputs(mask)))
    want = block.ffn_norm(alpha * h + block.ffn(h))
    torch.testing.assert_close(block(x, PassInputs(mask)), want)
    assert model.encoder.final_norm is None
    # beta scales the value, output and FFN weights at initialisation; queries and keys keep initializer_range
    torch.manual_seed(0)
    fresh = build_model(preset("mini", family="bert", norm_placement="deepnorm", num_layers=3, vocab_size=100))
    std = fresh.config.initializer_range
    attn, ffn = fresh.encoder.layers[2].attn, fresh.encoder.layers[2].ffn
    for linear in (attn.query, attn.key):
        assert linear.weight.std().item() == pytest.approx(std, rel=0.02)
    for linear in (attn.value, attn.out, ffn.up, ffn.down):
        assert linear.weight.std().item() == pytest.approx(std * beta, rel=0.02)


def test_rmsnorm_everywhere_in_the_backbone():
    model = model_of("tta", norm="rmsnorm", norm_placement="pre")
    backbone = [m for part in (model.embeddings, model.encoder) for m in part.modules()]
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in backbone)
    norms = [m for m in backbone if isinstance(m, torch.nn.RMSNorm)]
    assert len(norms) == 1 + 2 * model.config.num_layers + 1  # embeddings, two per block, final
    norm = norms[1]
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 5, model.config.hidden_size)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + model.config.layer_norm_eps) * norm.weight
    torch.testing.assert_close(norm(x), want)
    # as many parameters as LayerNorm's gains alone
    ln = build_model(preset("tiny", family="tta", norm_placement="pre"))
    assert ln.num_parameters() - model.num_parameters() == len(norms) * model.config.hidden_size


# ---- feed-forward ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ffn, act", [("geglu", F.gelu), ("swiglu", F.silu)])
def test_gated_ffn_is_shazeers_formula(ffn, act):
    """FFN(x) = (act(x W + b) * (x V + c)) W_2 + d, W and V the two halves of `up`."""
    model = model_of("bert", ffn=ffn)
    layer = model.encoder.layers[0].ffn
    width = model.config.ffn_width
    W, V = layer.up.weight[:width], layer.up.weight[width:]
    b, c = layer.up.bias[:width], layer.up.bias[width:]
    x = torch.randn(3, 5, model.config.hidden_size)
    want = (act(x @ W.T + b) * (x @ V.T + c)) @ layer.down.weight.T + layer.down.bias
    torch.testing.assert_close(layer(x), want, atol=1e-5, rtol=1e-5)


def ffn_parameters(model):
    return sum(p.numel() for n, p in model.named_parameters() if ".ffn." in n)


@pytest.mark.parametrize("ffn", ["geglu", "swiglu"])
def test_gated_ffn_keeps_the_parameter_count(ffn):
    """Hidden width 2/3 of intermediate_size: exactly the GELU layer's weights when it divides by 3 (without
    biases); otherwise within the rounding of one hidden unit per matrix, biases included."""
    sizes = dict(hidden_size=32, intermediate_size=96, ffn_bias=False)
    assert ffn_parameters(build_model(preset("tiny", family="bert", ffn=ffn, **sizes))) == \
        ffn_parameters(build_model(preset("tiny", family="bert", **sizes)))
    mini = dict(vocab_size=100)
    gated = build_model(preset("mini", family="bert", ffn=ffn, **mini))
    gelu = build_model(preset("mini", family="bert", **mini))
    cfg = gated.config
    assert cfg.ffn_width == 683  # round(2 x 1024 / 3)
    assert abs(ffn_parameters(gated) - ffn_parameters(gelu)) <= cfg.num_layers * (3 * cfg.hidden_size + 3)
    assert abs(gated.num_parameters() / gelu.num_parameters() - 1) < 1e-3


def test_ffn_bias_off_removes_exactly_the_ffn_biases():
    cfg = preset("tiny", family="bert")
    off = build_model(preset("tiny", family="bert", ffn_bias=False))
    assert all(off.encoder.layers[i].ffn.up.bias is None and off.encoder.layers[i].ffn.down.bias is None
               for i in range(cfg.num_layers))
    assert build_model(cfg).num_parameters() - off.num_parameters() == \
        cfg.num_layers * (cfg.intermediate_size + cfg.hidden_size)


def test_int8_inference_takes_a_gated_ffn():
    from maskplay.runtime.precision import quantize_int8

    model = model_of("bert", ffn="swiglu", ffn_bias=False)
    ids, mask = padded_batch([6, 4])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).last_hidden_state
        got = quantize_int8(model)(ids, attention_mask=mask).last_hidden_state
    error = (got - want)[mask].norm() / want[mask].norm()
    assert error < 0.1, f"int8 relative error {error:.3f}"


# ---- cross-layer sharing ---------------------------------------------------------------------------------------


def test_shared_layers_hold_one_block():
    cfg = preset("tiny", family="tta", num_layers=3)
    shared = build_model(preset("tiny", family="tta", num_layers=3, share_layers=True))
    plain = build_model(cfg)
    block = sum(p.numel() for p in plain.encoder.layers[0].parameters())
    assert plain.num_parameters() - shared.num_parameters() == 2 * block
    assert {k.split(".")[2] for k in shared.state_dict() if k.startswith("encoder.layers.")} == {"0"}
    assert len(shared.encoder.layers) == 3
    assert all(layer is shared.encoder.layers[0] for layer in shared.encoder.layers)


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "xlnet"])
def test_sharing_equals_copies_of_one_block_and_sums_their_gradients(family):
    """A shared model computes what an unshared one whose blocks are copies of its block computes, and its block's
    gradient is the sum of the copies' gradients."""
    shared = model_of(family, share_layers=True, num_layers=3)
    plain = build_model(preset("tiny", family=family, num_layers=3)).eval()
    state = shared.state_dict()
    for index in (1, 2):
        state.update({k.replace("layers.0.", f"layers.{index}."): v for k, v in state.items() if "layers.0." in k})
    plain.load_strict(state)
    ids, mask = padded_batch([6, 4])
    a = shared(ids, attention_mask=mask).last_hidden_state
    b = plain(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    direction = torch.randn_like(a)
    (a * direction).sum().backward()
    (b * direction).sum().backward()
    for name, p in shared.encoder.layers[0].named_parameters():
        grads = [plain.encoder.layers[i].get_parameter(name).grad for i in range(3)]
        if p.grad is None:  # XLNet's segment terms without segments
            assert grads == [None] * 3, name
            continue
        torch.testing.assert_close(p.grad, sum(grads), atol=1e-5, rtol=1e-4)


# ---- synthesizers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["synthesizer-random", "synthesizer-dense"])
def test_synthesizer_is_the_papers_formula(kind):
    """Y_h = softmax(B_h + mask) G_h(X): B_h = R_h[:L, :L] (Random) or F_h(X) = W_2 relu(W_1 X + b_1) + b_2 read at
    the first L key positions (Dense); G the value projection; then the output projection."""
    model = model_of("bert", attention=kind)
    attn, encoder = model.encoder.layers[0].attn, model.encoder
    syn = attn.synthesizer
    assert attn.query is None and attn.key is None
    B, L, H, nh, ell = 2, 6, 32, 4, model.config.max_position
    x = torch.randn(B, L, H)
    mask = torch.ones(B, 1, L, L, dtype=torch.bool)
    mask[1, :, :, 4:] = False
    mask[0] &= ~torch.eye(L, dtype=torch.bool)
    columns = torch.arange(L)[None]
    prepared, passed = encoder._pass_positions(mask, columns, columns, x.dtype)
    got = attn(x, PassInputs(prepared, positions=passed))
    if kind == "synthesizer-random":
        logits = syn.table[None, :, :L, :L]
    else:
        hidden = torch.relu(x @ syn.hidden.weight.T + syn.hidden.bias)
        logits = (hidden @ syn.logits.weight.T + syn.logits.bias).view(B, L, nh, ell).transpose(1, 2)[..., :L]
    weights = logits.masked_fill(~mask, float("-inf")).softmax(-1)
    v = attn.value(x).view(B, L, nh, H // nh).transpose(1, 2)
    want = attn.out((weights @ v).transpose(1, 2).reshape(B, L, H))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_synthesizer_parameters_replace_queries_and_keys():
    cfg = preset("tiny", family="bert")
    H, nh, ell, N = cfg.hidden_size, cfg.num_heads, cfg.max_position, cfg.num_layers
    dot = build_model(cfg).num_parameters()
    qk = 2 * (H * H + H)
    random = build_model(preset("tiny", family="bert", attention="synthesizer-random")).num_parameters()
    dense = build_model(preset("tiny", family="bert", attention="synthesizer-dense")).num_parameters()
    assert random - dot == N * (nh * ell * ell - qk)
    assert dense - dot == N * (H * H + H + H * nh * ell + nh * ell - qk)


def test_random_synthesizer_attends_the_same_whatever_the_tokens():
    """Its attention weights depend on positions only: the output changes with the tokens through the values alone,
    so with the value projection zeroed every input gives the output projection's bias."""
    model = model_of("bert", attention="synthesizer-random")
    attn = model.encoder.layers[0].attn
    with torch.no_grad():
        attn.value.weight.zero_()
        attn.value.bias.normal_()
    x1, x2 = torch.randn(1, 5, 32), torch.randn(1, 5, 32)
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    columns = torch.arange(5)[None]
    _, passed = model.encoder._pass_positions(mask, columns, columns, x1.dtype)
    torch.testing.assert_close(attn(x1, PassInputs(mask, positions=passed)), attn(x2, PassInputs(mask, positions=passed)))


# ---- errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, message", [
    (dict(family="bert", key_size=0), "key_size must be positive"),
    (dict(family="bert", key_size=5, positions="rotary"), "must be even"),
    (dict(family="bert", norm="batchnorm"), "norm must be one of"),
    (dict(family="bert", norm_placement="sandwich"), "norm_placement must be one of"),
    (dict(family="xlnet", norm_placement="pre"), "not built for family xlnet"),
    (dict(family="bert", ffn="tanh"), "ffn must be one of"),
    (dict(family="bert", attention="linear"), "attention must be one of"),
    (dict(family="xlnet", attention="synthesizer-dense"), "not with family xlnet"),
    (dict(family="bert", attention="synthesizer-random", positions="rotary"), "not with positions = 'rotary'"),
    (dict(family="bert", attention="synthesizer-dense", talking_heads=True), "not with talking_heads"),
    (dict(family="bert", attention="synthesizer-dense", key_size=4), "not with key_size"),
    (dict(family="xlnet", attention="lsra"), "not family xlnet"),
    (dict(family="bert", attention="lsra", hidden_size=12, num_heads=4), "must be even, got 3"),
    (dict(family="bert", attention="lsra", lsra_kernel=4), "lsra_kernel must be an odd"),
    (dict(family="bert", attention="lsra", lsra_kernel=0), "lsra_kernel must be an odd"),
])
def test_bad_values_are_one_line_errors(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**fields)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=message):
        ModelSection(preset="tiny", **fields)


def test_a_switched_model_does_not_convert_to_huggingface():
    from maskplay.families.hf import to_hf

    with pytest.raises(ValueError, match="key_size = 4"):
        to_hf(model_of("bert", key_size=4))


def test_sdpa_takes_a_key_width_other_than_the_value_width():
    """What Attention relies on: SDPA with q/k of one width and v of another."""
    q, k, v = torch.randn(1, 2, 3, 5), torch.randn(1, 2, 4, 5), torch.randn(1, 2, 4, 7)
    want = (q @ k.transpose(-1, -2) / math.sqrt(5)).softmax(-1) @ v
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v), want)
