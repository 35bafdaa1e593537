"""FlexAttention for attention under a materialised mask (nn/attention/flex.py, run.flex_attention): the same values
as SDPA with the mask (and, for disentangled attention, the gathered position bias), for a bare call and for every
family's training loss under its own mask. Without gradients on this CPU (torch's CPU FlexAttention has none);
the gradients: tests/test_gpu.py on a GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from maskplay.config import ModelConfig
from maskplay.families import build_model
from maskplay.nn.attention import disentangled, flex

SMALL = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position=32,
             hidden_dropout=0.0, attention_dropout=0.0)
RECIPE = dict(positions="disentangled", norm_placement="pre", ffn="geglu", denseformer=True)


def random_mask(B: int, L: int) -> torch.Tensor:
    """A random mask per row, every query seeing key 0; row 2's query 5 sees key 3 only."""
    mask = torch.rand(B, 1, L, L, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[..., 0] = True
    mask[2, 0, 5] = False
    mask[2, 0, 5, 3] = True
    return mask


def test_flex_is_sdpa_under_the_mask_and_with_disentangled_terms():
    """flex.attend against SDPA with the boolean mask, and with disentangled.position_terms against SDPA with the
    gathered bias (a shared and a per-row index); a shifted index changes the result."""
    torch.manual_seed(0)
    B, heads, L, R, d = 3, 2, 16, 7, 8
    q, k, v = (torch.randn(B, heads, L, d) for _ in range(3))
    mask = random_mask(B, L)
    torch.testing.assert_close(flex.attend(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               rtol=1e-5, atol=1e-5)
    # one block mask for the layers of a pass (the same tensor), another for the same tensor written in place: a
    # stale one would skip the mask in blocks it had found all True (a GPU's kernels do; this CPU's eager one
    # evaluates the mask everywhere, so the check is on the block mask kept)
    block = flex._last_block_mask[2]
    flex.attend(q, k, v, mask)
    assert flex._last_block_mask[2] is block
    mask[0, 0, 7, 2:] = False
    torch.testing.assert_close(flex.attend(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               rtol=1e-5, atol=1e-5)
    assert flex._last_block_mask[2] is not block
    c2p, p2c = torch.randn(B, heads, L, R), torch.randn(B, heads, L, R)
    scale = (3 * d) ** -0.5
    for index in (torch.randint(0, R, (1, L, L)), torch.randint(0, R, (B, L, L))):
        full = index.expand(B, L, L)[:, None].expand(B, heads, L, L)
        bias = (c2p.gather(-1, full) + p2c.gather(-1, full.transpose(-1, -2)).transpose(-1, -2)) * scale
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")),
                                                  scale=scale)
        got = flex.attend(q, k, v, mask, disentangled.position_terms(c2p, p2c, index, scale), scale)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        shifted = flex.attend(q, k, v, mask, disentangled.position_terms(c2p, p2c, (index + 1) % R, scale), scale)
        assert not torch.allclose(shifted, expected, atol=1e-3)


@pytest.mark.parametrize("segments", [False, True])
def test_flex_is_sdpa_with_transformer_xls_relative_term(segments):
    """positions.RelativePositions.score_terms (Transformer-XL's distances, XLNet's segments) against the gathered
    term added to SDPA's scores, on XLNet's shapes: more queries (both streams) than keys, a per-row index, memory
    keys before the segment; a segment term taken the wrong way round changes the result."""
    from maskplay.nn.positions import RelativePositions, attend_with_term, relative_frame

    torch.manual_seed(0)
    B, L, T, M = 3, 12, 4, 3  # content rows, query-stream rows, memory keys
    config = ModelConfig(family="xlnet", **SMALL)
    relative = RelativePositions(config, segments=segments)
    with torch.no_grad():
        for p in relative.parameters():
            p.normal_()  # not the init's small values: the term must matter for the comparison to mean anything
    rows = torch.cat([torch.arange(L).expand(B, L), torch.randint(0, L, (B, T))], dim=1)
    types = (torch.arange(L) >= 5).long().expand(B, L)
    segs = (types.gather(1, rows), torch.cat([types.new_zeros(B, M), types], dim=1)) if segments else (None, None)
    frame = relative_frame(rows, torch.arange(-M, L), config.hidden_size, 5, *segs)
    heads, d = config.num_heads, config.key_width
    q, k, v = torch.randn(B, heads, L + T, d), torch.randn(B, heads, M + L, d), torch.randn(B, heads, M + L, d)
    mask = torch.rand(B, 1, L + T, M + L, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[..., 0] = True
    with torch.no_grad():
        content, term = relative(q, frame)
        expected = attend_with_term(content, k, v, mask, term)
        content, by_distance, seg = relative.tables(q, frame)
        got = flex.attend(content, k, v, mask, relative.score_terms(by_distance, seg, frame))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        if segments:
            flipped = relative.score_terms(by_distance, seg.flip(-1), frame)
            assert not torch.allclose(flex.attend(content, k, v, mask, flipped), expected, atol=1e-3)
        shifted = relative.score_terms(by_distance.roll(1, -1), seg, frame)
        assert not torch.allclose(flex.attend(content, k, v, mask, shifted), expected, atol=1e-3)


@pytest.mark.parametrize(("family", "switches"), [("gpt-bert", RECIPE), ("tta", RECIPE), ("bert", RECIPE),
                                                  ("gpt", RECIPE), ("tta", {}), ("gpt-bert", {}), ("bert", {}),
                                                  ("xlnet", {}), ("gpt", {"positions": "transformer-xl"})])
def test_a_familys_training_loss_is_the_same_through_flex(monkeypatch, family, switches):
    """Every family's mask (GPT-BERT's causal rows beside masked ones, T-TA's no-diagonal mask, BERT's and GPT's,
    XLNet's two streams), with padding, with the recipes' disentangled positions, Transformer-XL's and XLNet's
    relative terms (and XLNet's segment term) and without them: the training loss through FlexAttention
    equals SDPA's, and every layer's attention went through FlexAttention."""
    ids = torch.randint(7, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(4, 16, dtype=torch.bool)
    mask[1, 11:] = False
    mask[3, 5:] = False
    torch.manual_seed(0)
    model = build_model(ModelConfig(family=family, **SMALL, **switches)).train()
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(2))
    if family == "gpt-bert":  # both modes in the batch, whatever the draw gave
        batch["causal_rows"] = torch.tensor([True, False, True, False])
    if family == "xlnet":  # two segments a row, for the relative segment term
        batch["token_type_ids"] = (torch.arange(16) >= 6).long().expand(4, 16)
    attend, calls = flex.attend, []
    monkeypatch.setattr(flex, "attend", lambda *a: calls.append(1) or attend(*a))
    losses = {}
    with torch.no_grad():
        for on in (False, True):
            with flex.using(on):
                losses[on] = model(**batch).loss
    assert len(calls) == SMALL["num_layers"]
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-5, atol=1e-5)


def test_flex_trains_on_a_gpu_only_and_is_switched_for_a_block():
    model = build_model(ModelConfig(family="bert", **SMALL, **RECIPE)).train()
    ids = torch.randint(7, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    batch = model.training_batch(ids, torch.ones(2, 8, dtype=torch.bool), generator=torch.Generator().manual_seed(0))
    with flex.using(True):
        assert flex.enabled
        with pytest.raises(ValueError, match="FlexAttention trains on a CUDA device only"):
            model(**batch)
    assert not flex.enabled


@pytest.mark.parametrize(("B", "H", "Lq", "Lk"), [(3, 1, 16, 16), (1, 2, 300, 200), (2, 1, 256, 384)])
def test_the_block_mask_from_the_mask_is_create_block_masks(B, H, Lq, Lk):
    """flex.block_mask_of against torch's create_block_mask (which evaluates the mask_mod at every pair): the same
    blocks listed, the same ones full, over masks with empty, full and partial blocks, lengths off the block size
    and a batch or head dimension of one; and FlexAttention under it equals SDPA's, full blocks included."""
    from torch.nn.attention.flex_attention import create_block_mask

    mask = torch.rand(B, H, Lq, Lk, generator=torch.Generator().manual_seed(5)) > 0.4
    blocks = Lq > 128  # more than one block: one full, one empty, a row that sees nothing in a partial one
    if blocks:
        mask[..., :128, :128] = True
        mask[..., :128, 128:256] = False
    mask[..., 0] = True
    if blocks:
        mask[..., 130, :] = False

    def mod(b, h, i, j):
        return mask[b, h, i, j]

    ours = flex.block_mask_of(mask)
    theirs = create_block_mask(mod, B, H, Lq, Lk, device="cpu")
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    assert torch.equal(ours.kv_num_blocks, theirs.kv_num_blocks)
    assert torch.equal(ours.full_kv_num_blocks, theirs.full_kv_num_blocks)
    assert int(ours.kv_num_blocks.sum()) > 0 and (int(ours.full_kv_num_blocks.sum()) > 0) == blocks
    q, k, v = torch.randn(B, 2, Lq, 8), torch.randn(B, 2, Lk, 8), torch.randn(B, 2, Lk, 8)
    with torch.no_grad():
        got = flex.attend(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)  # SDPA: nan where none seen
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.heavy
@pytest.mark.slow  # traces four forwards a scope: about 25 s in all on a 2-core machine
@pytest.mark.parametrize("scope", ["step", "layers", "nested"])
def test_flex_inside_a_compiled_forward_is_one_graph_with_the_eager_loss(scope):
    """run.flex_attention with run.compile (train/stepping.compile_forward, every scope), for T-TA's and GPT-BERT's
    recipe models: the block mask made inside the graph (flex.block_mask_of), so the step is one graph (nested: with
    FlexAttention inside the blocks' regions; the layers scope: its two block codes) with no graph break, and a
    second batch with another mask runs it again without a recompile; both losses equal eager SDPA's. Traced by
    dynamo and AOTAutograd ("aot_eager"): this CPU's inductor cannot lower FlexAttention reading a mask computed in
    the graph (torch 2.13 takes its captured buffers' dtypes before it realises them: NoValidChoicesError), and its
    FlexAttention has no backward; a GPU's inductor and the gradients: tests/test_gpu.py. Before
    flex.block_mask_of, create_block_mask and its cache broke the step's graph at every layer (19 graphs for T-TA's
    step)."""
    import torch._dynamo
    from torch._dynamo.utils import counters, guard_failures

    from maskplay.tasks.train.stepping import compile_forward

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(7, 64, (2, 4, 16), generator=gen)
    mask = torch.ones(2, 4, 16, dtype=torch.bool)
    mask[0, 1, 11:] = False
    mask[1, 2, 6:] = False
    for family in ("tta", "gpt-bert"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(family=family, **SMALL, **RECIPE)).train()
        batches = [model.training_batch(ids[n], mask[n], generator=torch.Generator().manual_seed(2 + n))
                   for n in range(2)]
        if family == "gpt-bert":
            batches[0]["causal_rows"] = torch.tensor([True, False, True, False])
            batches[1]["causal_rows"] = torch.tensor([False, True, True, False])
        torch._dynamo.reset()
        counters.clear()
        compiled = compile_forward(model.__call__, model, scope, backend="aot_eager")
        with torch.no_grad():
            for batch in batches:
                want = model(**batch).loss
                with flex.using(True):
                    got = compiled(**batch).loss
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=family)
        assert not counters["graph_break"], (family, dict(counters["graph_break"]))
        assert counters["stats"]["unique_graphs"] == (2 if scope == "layers" else 1), family
        assert not guard_failures, (family, dict(guard_failures))
