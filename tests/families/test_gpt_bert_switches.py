"""GPT-BERT's architecture switches (docs/guides/switches.md; Charpentier & Samuel 2024, ltgoslo/gpt-bert model_extra.py):
disentangled attention against HuggingFace DebertaV2's DisentangledSelfAttention and, where GPT-BERT's bucketing
differs, against a per-pair loop; DenseFormer at its identity start against the plain residual stream and away from
it against the weighted sums written out; every switch against its formula; the whole GPT-BERT architecture against
the authors' forward pass written out here; the leak tests of T-TA and GPT and cached generation under each switch.
The paths every switch shares (packing, PLL's rows, the cache, save/load, bf16, --set/TOML) are in
tests/nn/test_arch_switches.py."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from maskplay import preset
from maskplay.config import ModelConfig
from maskplay.families import build_model
from maskplay.nn.attention.disentangled import DisentangledAttention
from maskplay.nn.attention.inputs import PassInputs
from maskplay.nn.pass_modes import LastLayerRows
from maskplay.nn.positions import Disentangled, PassPositions, log_bucket
from maskplay.tasks.train.config import ModelSection
from tests.conftest import padded_batch
from tests.test_leak import assert_tta_reads_all_but_itself, jacobian_norms

# GPT-BERT's architecture as the gpt-bert family sets it (layer_norm_eps 1e-5 as the authors' small.json)
GPT_BERT = dict(positions="disentangled", norm_placement="pre", norm_affine=False, attention_output_norm=True,
                value_gate=True, ffn="geglu", ffn_bias=False, gelu_tanh=True, ffn_inner_norm=True, denseformer=True,
                weight_init="truncated-depth-scaled", layer_norm_eps=1e-5)

SWITCHES = {
    "disentangled": dict(positions="disentangled"),
    "disentangled+key_size": dict(positions="disentangled", key_size=6),
    "norm_affine=false": dict(norm_affine=False),
    "attention_output_norm": dict(attention_output_norm=True),
    "value_gate": dict(value_gate=True),
    "ffn_inner_norm+gelu_tanh": dict(ffn_inner_norm=True, gelu_tanh=True),
    "denseformer": dict(denseformer=True),
    "head_norm": dict(head_norm=True),
    "weight_init=truncated-depth-scaled": dict(weight_init="truncated-depth-scaled"),
    "gpt-bert": GPT_BERT,
}


def switched(family: str, seed: int = 0, **fields) -> torch.nn.Module:
    """A tiny model with large random weights; DenseFormer's weights moved away from the identity too (so that a
    path that skips them shows)."""
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, **fields))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.25)
            elif "alphas" in name:
                p.add_(torch.randn_like(p) * 0.3)
            elif "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


# ---- disentangled attention ------------------------------------------------------------------------------------


def gpt_bert_bucket(r: int, bucket_size: int, max_distance: int) -> int:
    """GPT-BERT's make_log_bucket_position for one distance, in Python floats."""
    mid = bucket_size // 2
    if abs(r) <= mid:
        return r
    large = mid + math.ceil(math.log(min(abs(r), max_distance - 1) / mid) / math.log((max_distance - 1) / mid) * (mid - 1))
    return int(math.copysign(large, r))


@pytest.mark.parametrize("bucket_size,max_distance", [(32, 512), (256, 512), (8, 64), (4, 8)])
def test_log_buckets_are_gpt_berts_per_distance(bucket_size, max_distance):
    r = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    want = torch.tensor([gpt_bert_bucket(x, bucket_size, max_distance) for x in r.tolist()])
    assert torch.equal(log_bucket(r, bucket_size, max_distance), want)
    assert want.abs().max() == bucket_size - 1  # 2 bucket_size - 1 rows: 63 for GPT-BERT's 32


def test_log_buckets_are_debertas_within_the_maximum_distance():
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    r = torch.arange(-511, 512)
    assert torch.equal(log_bucket(r, 32, 512), make_log_bucket_position(r, 32, 512).long())


def layer_and_table(bucket_size: int = 32, max_distance: int = 512, key_size: int | None = None, seed: int = 0):
    torch.manual_seed(seed)
    config = preset("tiny", family="bert", positions="disentangled", attention_dropout=0.0, key_size=key_size)
    layer = DisentangledAttention(config).eval()
    relative = Disentangled(config, bucket_size, max_distance)
    with torch.no_grad():
        for module in (layer, relative):
            for p in module.parameters():
                p.normal_(0.0, 0.3)
        layer.out.weight.copy_(torch.eye(config.hidden_size))  # the heads' output as it is: DeBERTa's context
        layer.out.bias.zero_()
    return config, layer, relative


def run_layer(layer, relative, h, mask, queries=None, keys=None):
    L = h.shape[1]
    queries = torch.arange(L)[None] if queries is None else queries
    keys = queries if keys is None else keys
    positions = PassPositions(queries, keys, relative=relative.prepare(queries, keys))
    with torch.no_grad():
        return layer(h, PassInputs(mask, positions=positions))


@pytest.mark.parametrize("bucket_size", [32, 256])
def test_disentangled_attention_is_debertas(bucket_size):
    """HuggingFace DebertaV2's DisentangledSelfAttention (share_att_key, c2p|p2c, log buckets) with the same weights,
    fp32, to 1e-5: the relative table is DeBERTa's rows 1..2 bucket_size - 1 (its row 0 is a bucket GPT-BERT lacks,
    read only beyond the maximum distance), the sequence 300 long (log buckets on both sides)."""
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    config, ours, relative = layer_and_table(bucket_size)
    theirs = DisentangledSelfAttention(DebertaV2Config(
        hidden_size=config.hidden_size, num_attention_heads=config.num_heads, relative_attention=True,
        pos_att_type=["c2p", "p2c"], share_att_key=True, position_buckets=bucket_size, max_relative_positions=512,
        max_position_embeddings=512, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)).eval()
    with torch.no_grad():
        for mine, hf in ((ours.query, theirs.query_proj), (ours.key, theirs.key_proj), (ours.value, theirs.value_proj)):
            hf.weight.copy_(mine.weight)
            hf.bias.copy_(mine.bias)
        table = relative.norm(relative.table)
        rel_embeddings = torch.cat([torch.randn(1, config.hidden_size), table])
    g = torch.Generator().manual_seed(1)
    B, L = 2, 300
    h = torch.randn(B, L, config.hidden_size, generator=g)
    mask = (torch.rand(B, 1, L, L, generator=g) < 0.7) | torch.eye(L, dtype=torch.bool)  # every row sees a key
    want, _ = theirs(h, mask, rel_embeddings=rel_embeddings)
    torch.testing.assert_close(run_layer(ours, relative, h, mask), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("key_size", [None, 6])
def test_disentangled_scores_per_pair_beyond_the_maximum_distance(key_size):
    """softmax over j of (q_i . k_j + q_i . K_r[b(i - j)] + k_j . Q_r[b(i - j)]) / sqrt(3 d) then v, written pair
    by pair, with 4 buckets up to distance 8 (GPT-BERT's clamp, where DeBERTa's table lookup differs) and query and
    key positions that are not 0..L-1 (a cache's)."""
    config, layer, relative = layer_and_table(4, 8, key_size=key_size)
    g = torch.Generator().manual_seed(2)
    B, Lq, Lk, nh = 2, 5, 20, config.num_heads
    h_q = torch.randn(B, Lq, config.hidden_size, generator=g)
    kv = torch.randn(B, Lk, config.hidden_size, generator=g)
    queries = torch.tensor([[15, 16, 17, 18, 19], [3, 9, 12, 18, 19]])
    keys = torch.arange(Lk)[None].expand(B, -1)
    mask = torch.rand(B, 1, Lq, Lk, generator=g) < 0.6
    mask[..., 0] = True
    positions = PassPositions(queries, keys, relative=relative.prepare(queries, keys))
    with torch.no_grad():
        got = layer(h_q, PassInputs(mask, kv=kv, positions=positions))
        table = relative.norm(relative.table)
        q, k, v = layer.query(h_q), layer.key(kv), layer.value(kv)
        pos_q, pos_k = layer.query(table), layer.key(table)
    d, dv = q.shape[-1] // nh, v.shape[-1] // nh
    want = torch.zeros(B, Lq, nh * dv)
    for b in range(B):
        for head in range(nh):
            qs, ks = slice(head * d, (head + 1) * d), slice(head * dv, (head + 1) * dv)
            for i in range(Lq):
                scores = torch.full((Lk,), float("-inf"))
                for j in range(Lk):
                    if mask[b, 0, i, j]:
                        row = gpt_bert_bucket(int(queries[b, i] - keys[b, j]), 4, 8) + 3
                        scores[j] = (q[b, i, qs] @ k[b, j, qs] + q[b, i, qs] @ pos_k[row, qs]
                                     + k[b, j, qs] @ pos_q[row, qs]) / math.sqrt(3 * d)
                want[b, i, ks] = scores.softmax(0) @ v[b, :, ks]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_disentangled_adds_only_the_shared_table():
    plain = build_model(preset("tiny", family="bert", positions="none"))
    model = build_model(preset("tiny", family="bert", positions="disentangled"))
    H = model.config.hidden_size
    assert model.num_parameters() - plain.num_parameters() == 63 * H + 2 * H  # the table and its LayerNorm
    assert model.embeddings.position is None


# ---- DenseFormer ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "gpt", "tta"])
@pytest.mark.parametrize("placement", ["post", "pre"])
def test_denseformer_at_its_identity_start_is_the_plain_residual_stream(family, placement):
    torch.manual_seed(0)
    plain = build_model(preset("tiny", family=family, norm_placement=placement)).eval()
    torch.manual_seed(0)
    dense = build_model(preset("tiny", family=family, norm_placement=placement, denseformer=True)).eval()
    dense.load_state_dict(plain.state_dict(), strict=False)
    ids, mask = padded_batch([6, 4])
    with torch.no_grad():
        a = plain(ids, attention_mask=mask, output_hidden_states=True)
        b = dense(ids, attention_mask=mask, output_hidden_states=True)
    assert all(torch.equal(x, y) for x, y in zip(a.hidden_states, b.hidden_states, strict=True))
    assert torch.equal(a.logits, b.logits)


def test_denseformer_is_the_weighted_sum_of_every_earlier_sublayer_output():
    model = switched("bert", denseformer=True, norm_placement="pre")
    ids, mask = padded_batch([6, 4])
    with torch.no_grad():
        got = model(ids, attention_mask=mask).last_hidden_state
        x = model.embed(ids)
        from maskplay.nn.masks import and_masks, bidirectional, materialize, padding

        full = materialize(and_masks(bidirectional(), padding(mask)), *ids.shape)
        inputs = PassInputs(full)
        outputs, alphas = [x], list(model.encoder.dense.alphas)
        for index, block in enumerate(model.encoder.layers):
            for part in range(2):
                outputs.append(block.attend(x, inputs, index) if part == 0 else block.feed_forward(x))
                alpha = alphas[2 * index + part]
                assert alpha.shape == (len(outputs),)
                x = sum(a * y for a, y in zip(alpha, outputs, strict=True))
        want = model.encoder.final_norm(x)
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=1e-5)


def test_denseformer_weights_learn_and_are_not_decayed():
    from maskplay.tasks.train.schedule import parameter_groups

    model = build_model(preset("tiny", family="bert", denseformer=True)).train()
    ids, mask = padded_batch([6, 4])
    model(**model.training_batch(ids, mask, torch.Generator().manual_seed(0))).loss.backward()
    alphas = list(model.encoder.dense.alphas)
    assert [a.shape[0] for a in alphas] == list(range(2, 2 * model.config.num_layers + 2))
    assert all(a.grad is not None and a.grad.abs().sum() > 0 for a in alphas)
    no_decay = {id(p) for _, p in parameter_groups(model, 0.1)[1]["params"]}
    assert all(id(a) in no_decay for a in alphas)


# ---- the other switches against their formulas ------------------------------------------------------------------


def test_norm_affine_off_leaves_only_the_relative_tables_norm_with_parameters():
    model = build_model(preset("tiny", family="bert", positions="disentangled", norm_affine=False,
                               norm_placement="pre", ffn_inner_norm=True, attention_output_norm=True))
    norms = [(n, m) for n, m in model.named_modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]
    assert [n for n, m in norms if m.elementwise_affine] == ["encoder.relative.norm"]
    assert {"embeddings.norm", "head.norm", "encoder.final_norm"} <= {n for n, _ in norms}
    default = build_model(preset("tiny", family="bert"))
    H, N = model.config.hidden_size, model.config.num_layers
    assert default.num_parameters() - build_model(preset("tiny", family="bert", norm_affine=False)).num_parameters() \
        == 2 * H * (2 * N + 2)  # the embeddings', blocks' and head's gains and biases


def test_value_gate_and_attention_output_norm_are_the_formula():
    model = switched("bert", value_gate=True, attention_output_norm=True)
    attn = model.encoder.layers[0].attn
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 5, model.config.hidden_size, generator=g)
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    with torch.no_grad():
        got = attn(h, PassInputs(mask))
        nh, H = model.config.num_heads, model.config.hidden_size
        q, k, v = (x.view(2, 5, nh, -1).transpose(1, 2) for x in (attn.query(h), attn.key(h), attn.value(h)))
        heads = ((q @ k.transpose(-1, -2)) / math.sqrt(H // nh)).softmax(-1) @ v
        context = heads.transpose(1, 2).reshape(2, 5, H) * F.gelu(attn.gate(h))
        want = attn.out(F.layer_norm(context, (H,), attn.out_norm.weight, attn.out_norm.bias, model.config.layer_norm_eps))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("ffn", ["gelu", "geglu"])
def test_ffn_inner_norm_and_gelu_tanh_are_the_formula(ffn):
    model = switched("bert", ffn=ffn, ffn_inner_norm=True, gelu_tanh=True)
    layer = model.encoder.layers[0].ffn
    x = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(4))
    width = model.config.ffn_width
    with torch.no_grad():
        up = x @ layer.up.weight.T + layer.up.bias
        if ffn == "geglu":  # ours: [gate, value]; GPT-BERT's GeGLU: [value, gate], the same layer with rows swapped
            gate, value = up[:, :width], up[:, width:]
            inner = value * 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
        else:
            inner = 0.5 * up * (1 + torch.tanh(math.sqrt(2 / math.pi) * (up + 0.044715 * up ** 3)))
        norm = layer.inner_norm
        inner = (inner - inner.mean(-1, keepdim=True)) / torch.sqrt(inner.var(-1, unbiased=False, keepdim=True) + norm.eps)
        want = (inner * norm.weight + norm.bias) @ layer.down.weight.T + layer.down.bias
        torch.testing.assert_close(layer(x), want, atol=1e-5, rtol=1e-5)


def test_head_norm_is_a_norm_in_front_of_the_heads_dense():
    model = switched("bert", head_norm=True, norm_affine=False)
    head, eps = model.head, model.config.layer_norm_eps
    x = torch.randn(4, model.config.hidden_size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = F.layer_norm(F.gelu(head.dense(F.layer_norm(x, x.shape[-1:], eps=eps))), x.shape[-1:], eps=eps)
        want = want @ model.embeddings.word.weight.T + head.bias
        torch.testing.assert_close(model.logits(x), want, atol=1e-5, rtol=1e-5)


def test_gpt_bert_init_is_truncated_and_scales_the_feed_forward_by_depth():
    torch.manual_seed(0)
    model = build_model(preset("gpt-bert-small", family="bert", num_layers=3, vocab_size=1000, **GPT_BERT))
    std = math.sqrt(2 / (5 * 384))
    for name, p in model.named_parameters():
        if name.endswith("bias") or "alphas" in name or p.dim() < 2:
            continue
        scale = 1.0
        if ".ffn." in name:
            scale = math.sqrt(1 / (2 * (int(name.split(".")[2]) + 1)))
        assert p.abs().max() <= 2 * std * scale + 1e-7, name
        # a normal truncated at +-2 sigma has std 0.880 sigma
        assert abs(p.std().item() / (0.880 * std * scale) - 1) < 0.1, name
    assert all(torch.equal(a, torch.eye(len(a))[-1]) for a in model.encoder.dense.alphas)


def test_gpt_bert_small_has_the_authors_30_million_parameters():
    """The authors' small model (configs/small.json): 29,892,164 parameters, counted from their modules."""
    with torch.device("meta"):  # shapes only: no time spent initialising 30 M weights
        model = build_model(preset("gpt-bert-small", family="bert", **GPT_BERT))
    embeddings, relative = 8192 * 384, 63 * 384 + 2 * 384
    layer = 2 * (384 * 768 + 768) + 384 * 384 + 384 + 384 * 2 * 1280 + 1280 * 384
    dwa = sum(n + 2 for n in range(24))
    head = 384 * 384 + 384 + 8192
    assert model.num_parameters() == embeddings + relative + 12 * layer + dwa + head == 29_892_164


# ---- the whole architecture against the authors' forward pass --------------------------------------------------


def authors_forward(model, ids: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """GPT-BERT's Bert.get_contextualized + MaskClassifier as model_extra.py computes them, written out with this
    model's weights: LN(word) with no parameters; per layer x = DWA(x + Attention(x)), x = DWA(x + FeedForward(x));
    the head LN -> Linear -> GELU -> LN -> tied decoder + bias. `allowed` (B, L, L): True = may attend."""
    cfg, eps = model.config, model.config.layer_norm_eps
    H, nh = cfg.hidden_size, cfg.num_heads
    d = H // nh

    def ln(x):
        return F.layer_norm(x, (x.shape[-1],), eps=eps)

    L = ids.shape[1]
    rel = model.encoder.relative
    table = F.layer_norm(rel.table, (H,), rel.norm.weight, rel.norm.bias, eps)
    index = torch.tensor([[gpt_bert_bucket(i - j, 32, 512) + 31 for j in range(L)] for i in range(L)])
    x = ln(model.embeddings.word.weight[ids])
    outputs = [x]
    alphas = list(model.encoder.dense.alphas)
    for n, block in enumerate(model.encoder.layers):
        a = block.attn
        y = ln(x)
        q, k, v, gate = y @ a.query.weight.T + a.query.bias, y @ a.key.weight.T + a.key.bias, \
            y @ a.value.weight.T + a.value.bias, F.gelu(y @ a.gate.weight.T + a.gate.bias)
        pos_q, pos_k = (table @ a.query.weight.T + a.query.bias)[index], (table @ a.key.weight.T + a.key.bias)[index]
        q, k, v = (t.view(*t.shape[:2], nh, d).transpose(1, 2) for t in (q, k, v))  # (B, h, L, d)
        pos_q, pos_k = pos_q.view(L, L, nh, d), pos_k.view(L, L, nh, d)
        scale = 1 / math.sqrt(3 * d)
        scores = q @ k.transpose(-1, -2) * scale + torch.einsum("bhqd,qkhd->bhqk", q, pos_k * scale) \
            + torch.einsum("bhkd,qkhd->bhqk", k * scale, pos_q)
        probs = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
        context = (probs @ v).transpose(1, 2).reshape(*ids.shape, H) * gate
        x = x + ln(context) @ a.out.weight.T + a.out.bias
        outputs.append(x)
        x = sum(w * s for w, s in zip(alphas[2 * n], outputs, strict=True))
        f = block.ffn
        width = cfg.ffn_width
        up = ln(x) @ f.up.weight.T
        hidden = up[..., width:] * F.gelu(up[..., :width], approximate="tanh")  # x * gelu(gate)
        x = x + ln(hidden) @ f.down.weight.T
        outputs.append(x)
        x = sum(w * s for w, s in zip(alphas[2 * n + 1], outputs, strict=True))
    head = model.head
    z = ln(F.gelu(ln(x) @ head.dense.weight.T + head.dense.bias))
    return z @ model.embeddings.word.weight.T + head.bias


@pytest.mark.parametrize("family", ["bert", "gpt"])
def test_the_switches_together_are_gpt_berts_architecture(family):
    model = switched(family, **GPT_BERT)
    ids, mask = padded_batch([7, 7], seed=3)
    L = ids.shape[1]
    allowed = torch.ones(2, L, L, dtype=torch.bool)
    if family == "gpt":
        allowed = torch.tril(allowed)
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
        want = authors_forward(model, ids, allowed)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


# ---- leaks and generation under every switch --------------------------------------------------------------------


@pytest.mark.parametrize("switch", SWITCHES)
def test_tta_output_i_never_sees_token_i(switch):
    model = switched("tta", **SWITCHES[switch])
    ids, mask = padded_batch([6, 4])
    norms = jacobian_norms(model, ids, mask)
    assert_tta_reads_all_but_itself(norms, mask, switch)


@pytest.mark.parametrize("switch", SWITCHES)
def test_gpt_output_i_never_sees_later_tokens(switch):
    model = switched("gpt", **SWITCHES[switch])
    ids, mask = padded_batch([7, 4])
    norms = jacobian_norms(model, ids, mask)
    future = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    assert torch.all(norms[:, :, future] == 0), switch
    assert torch.all(norms[:, 0][:, ~future] > 0)


@pytest.mark.parametrize("switch", ["denseformer", "gpt-bert"])
@pytest.mark.parametrize("family", ["bert", "tta"])
def test_packing_and_last_layer_rows_with_depth_weights_away_from_the_identity(family, switch):
    model = switched(family, **SWITCHES[switch])
    ids, mask = padded_batch([7, 4, 6])
    rows = torch.tensor([5, 0, 3])
    with torch.no_grad():
        full = model(ids, attention_mask=mask).last_hidden_state
        one = model(ids, attention_mask=mask, last_layer_rows=LastLayerRows(rows)).last_hidden_state[:, 0]
    with torch.inference_mode():
        packed = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(one, full[torch.arange(3), rows], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[mask], full[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("switch", ["disentangled", "denseformer", "gpt-bert"])
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_cached_generation_equals_the_uncached_path(switch, padding_side, tmp_path):
    from maskplay.tasks.decoding import generate
    from tests.tasks.score.test_score_support import small_tokenizer
    from tests.tasks.test_generation import prompts_of

    tok = small_tokenizer(tmp_path)
    model = switched("gpt", **{**tok.model_config_ids(), **SWITCHES[switch]})
    prompts = prompts_of([9, 2, 5, 4], model.config.sos_token_id)
    for strategy in ("greedy", "beam"):
        runs = [generate(model, prompts, max_new_tokens=8, strategy=strategy, num_beams=3, stop_ids=[],
                         padding_side=padding_side, output_logits=True, use_cache=cache) for cache in (True, False)]
        for cached, uncached in zip(*runs, strict=True):
            assert cached.token_ids == uncached.token_ids
            finite = torch.isfinite(cached.logits)
            torch.testing.assert_close(cached.logits[finite], uncached.logits[finite], atol=1e-5, rtol=1e-5)


# ---- config ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields,message", [
    (dict(weight_init="xavier"), "weight_init must be one of"),
    (dict(family="xlnet", denseformer=True), "denseformer weighs the sub-layer outputs of one stream"),
    (dict(head_norm=True, norm_placement="pre"), "normalises twice"),
    (dict(value_gate=True, attention="lsra"), "value_gate acts on the attention output"),
    (dict(positions="disentangled", talking_heads=True), "not with talking_heads"),
    (dict(positions="disentangled", attention="synthesizer-dense"), "not with attention"),
    (dict(family="xlnet", positions="disentangled"), "needs positions = 'transformer-xl'"),
])
def test_bad_combinations_are_one_line_errors(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**fields)
    assert "\n" not in str(err.value)


def test_defaults_leave_config_json_as_it_was_and_switches_round_trip(tmp_path):
    assert not {"norm_affine", "denseformer", "weight_init"} & set(ModelConfig().to_dict())
    config = preset("tiny", family="gpt", **GPT_BERT)
    config.to_json(tmp_path / "config.json")
    assert ModelConfig.from_json(tmp_path / "config.json") == config
    assert any(change.startswith("denseformer") for change in config.architecture_changes())


def test_the_old_name_of_the_truncated_init_is_read_with_a_warning(tmp_path):
    """weight_init = "gpt-bert" (a family's name for an initialisation) is now "truncated-depth-scaled": old
    config.json files and TOML configs still load, to the same model."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**preset("tiny", family="gpt").to_dict(), "weight_init": "gpt-bert"}))
    with pytest.warns(FutureWarning, match="'gpt-bert' is now called 'truncated-depth-scaled'"):
        old = ModelConfig.from_json(path)
    assert old == preset("tiny", family="gpt", weight_init="truncated-depth-scaled")
    with pytest.warns(FutureWarning):
        section = ModelSection(family="gpt", preset="tiny", weight_init="gpt-bert")
    assert section.weight_init == "truncated-depth-scaled"


def test_the_default_model_is_unchanged_by_the_switches_existing():
    """The same seed builds the same default weights, parameter names and outputs as a model without the fields."""
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="bert"))
    names = {n for n, _ in model.named_parameters()}
    assert not any(("gate" in n or "inner_norm" in n or "relative" in n or "dense.alphas" in n or "pre_norm" in n
                    or "out_norm" in n) for n in names)


def test_denseformer_sum_and_its_gradients_are_the_multiply_add_loops():
    """DepthWeights' one-kernel weighted sum (and its hand-written backward) against the plain loop of
    multiply-adds autograd differentiates itself, in float64; gradcheck checks the backward numerically too."""
    from maskplay.nn.denseformer import DepthWeights, _WeightedSum

    torch.manual_seed(0)
    dense = DepthWeights(3).double()
    with torch.no_grad():
        dense.alphas[2].copy_(torch.randn(4, dtype=torch.float64))
    states = [torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True) for _ in range(4)]
    got = dense(states, 2)
    want = sum(a * x for a, x in zip(dense.alphas[2], states, strict=True))
    torch.testing.assert_close(got, want)
    upstream = torch.randn_like(got)
    grads = torch.autograd.grad(got, [dense.alphas[2], *states], upstream)
    oracle = torch.autograd.grad(want, [dense.alphas[2], *states], upstream)
    for g, o in zip(grads, oracle, strict=True):
        torch.testing.assert_close(g, o)
    alpha = dense.alphas[2].detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(_WeightedSum.apply, (alpha, *states))
