"""XLNet: two-stream masks against a brute-force reference, partial prediction, the leak tests of its two scores,
segment recurrence, HuggingFace parity both ways, and one-line errors."""

import math

import pytest
import torch

from maskplay import preset
from maskplay.families import XLNet
from maskplay.families.xlnet import XlnetConfig
from maskplay.nn import masks
from tests.conftest import padded_batch


def make(**overrides) -> XLNet:
    torch.manual_seed(0)
    config = preset("tiny", family="xlnet", hidden_dropout=0.0, attention_dropout=0.0, **overrides)
    return XLNet(config).eval()


def _capture(into: list):
    def hook(module, inputs, output):
        output.retain_grad()
        into.append(output)

    return hook


def probe(x: torch.Tensor) -> torch.Tensor:
    """A fixed random read-out of hidden states (a plain sum of a LayerNorm output has no gradient at all)."""
    weights = torch.randn(x.shape[-1], generator=torch.Generator().manual_seed(7))
    return (x * weights).sum()


def random_orders(attention_mask: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    noise = torch.rand(attention_mask.shape, generator=g).masked_fill(~attention_mask, 2.0)
    return noise.argsort(dim=1)


# ---- masks -------------------------------------------------------------------------------------------------


def test_stream_masks_match_a_reference_built_from_the_order():
    ids, attn = padded_batch([6, 4, 5])
    order = random_orders(attn, 1)
    rank = masks.rank_from_order(order)
    query = masks.materialize(masks.and_masks(masks.permutation_query(rank), masks.padding(attn)), 3, 6)[:, 0]
    content = masks.materialize(masks.and_masks(masks.or_masks(masks.permutation_query(rank), masks.diagonal()),
                                                masks.padding(attn)), 3, 6)[:, 0]
    for b in range(3):
        steps = order[b].tolist()
        for i in range(6):
            for j in range(6):
                before = steps.index(j) < steps.index(i)
                assert bool(query[b, i, j]) == (before and bool(attn[b, j]))
                assert bool(content[b, i, j]) == ((before or i == j) and bool(attn[b, j]))


def test_query_stream_depends_exactly_on_the_tokens_earlier_in_the_order():
    """At every depth, the query output at a target has gradient from token j iff j comes earlier in its order."""
    for layers in (1, 2, 3):
        model = make(num_layers=layers)
        ids, attn = padded_batch([7, 5])
        order = random_orders(attn, layers)
        rank = masks.rank_from_order(order)
        targets = torch.tensor([[int(order[0, 6]), int(order[0, 3])], [int(order[1, 4]), int(order[1, 2])]])
        captured = []
        hook = model.embeddings.register_forward_hook(_capture(captured))
        out = model(ids, attn, order=order, target_positions=targets)
        hook.remove()
        for b in range(2):
            for t in range(2):
                captured[0].grad = None
                probe(out.last_hidden_state[b, t]).backward(retain_graph=True)
                depends = captured[0].grad[b].abs().sum(-1) > 0
                position = int(targets[b, t])
                want = (rank[b] < rank[b, position]) & attn[b]
                assert depends.tolist() == want.tolist(), (layers, b, t)


def test_partial_prediction_selects_the_last_ceil_n_over_k_of_each_order():
    for k in (1, 2, 3, 6, 7):
        for seed in range(4):
            ids, attn = padded_batch([9, 4, 1, 6], seed=seed)
            order = random_orders(attn, seed)
            positions, valid = masks.partial_targets(masks.rank_from_order(order), attn, k)
            for b in range(4):
                n = int(attn[b].sum())
                steps = [p for p in order[b].tolist() if attn[b, p]]
                want = sorted(steps[n - math.ceil(n / k):])
                assert positions[b][valid[b]].tolist() == want


def test_training_batch_targets_and_loss():
    model = make()
    ids, attn = padded_batch([10, 7, 3])
    batch = model.training_batch(ids, attn, torch.Generator().manual_seed(0))
    labels = batch["labels"]
    assert int((labels != -100).sum()) == sum(math.ceil(n / 6) for n in (10, 7, 3))
    assert torch.equal(labels[labels != -100], ids.gather(1, batch["target_positions"])[labels != -100])
    model.train()
    out = model(**batch)
    assert out.loss.isfinite() and out.last_hidden_state.shape == (3, 2, 32)
    out.loss.backward()
    assert model.query_start.grad.abs().sum() > 0


# ---- scoring views and their leaks ----------------------------------------------------------------------


def _gradient_from_each_token(model: XLNet, run) -> torch.Tensor:
    captured = []
    hook = model.embeddings.register_forward_hook(_capture(captured))
    value = run()
    hook.remove()
    value.backward()
    return captured[0].grad.abs().sum(-1)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_pll_score_has_no_gradient_from_its_own_token_at_any_depth(layers):
    model = make(num_layers=layers)
    ids, attn = padded_batch([8])
    for position in range(8):
        grad = _gradient_from_each_token(model, lambda p=position: probe(model.from_others(
            ids, attn, positions=torch.tensor([p])).last_hidden_state))
        assert grad[0, position] == 0
        others = [j for j in range(8) if j != position]
        assert bool((grad[0, others] > 0).all())


def test_one_pass_pll_would_leak_from_layer_two():
    """Why XLNet's PLL needs one pass per token (docs/guides/scoring.md): with every token's query stream run at once over
    content streams that see each other, token i's score reads token i through the other content states."""
    for layers, leaks in ((1, False), (2, True)):
        model = make(num_layers=layers)
        ids, attn = padded_batch([6])
        everywhere = torch.arange(6)[None]
        not_self = lambda b, h, q, kv: q != kv  # noqa: E731
        grad = _gradient_from_each_token(model, lambda m=model, i=ids, a=attn, s=not_self, e=everywhere: probe(
            m.streams(i, a, s, e, need_content=False)[1][0, 2]))
        assert bool(grad[0, 2] > 0) is leaks


def test_left_to_right_is_causal_and_exact():
    model = make(num_layers=3)
    ids, attn = padded_batch([7])
    for position in range(7):
        grad = _gradient_from_each_token(model, lambda p=position: probe(model.left_to_right(ids, attn)
                                                                               .last_hidden_state[0, p]))
        assert (grad[0, position:] == 0).all() and bool((grad[0, :position] > 0).all())
    # the first token attends to nothing: zeros from attention, never NaN
    assert model.left_to_right(ids, attn).last_hidden_state.isfinite().all()


def test_segments_with_memory_equal_one_pass_over_the_whole_document():
    model = make(num_layers=2)
    ids, attn = padded_batch([30, 30])
    with torch.no_grad():
        whole = model.left_to_right(ids, attn).last_hidden_state
        mems, parts = None, []
        for start in range(0, 30, 10):
            out = model.left_to_right(ids[:, start:start + 10], attn[:, start:start + 10], mems=mems)
            parts.append(out.last_hidden_state)
            mems = out.mems
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=1e-5)
    assert mems[0].shape == (2, 30, 32)  # each layer's input over every segment so far, for the next one
    limited = make(num_layers=2, xlnet=XlnetConfig(mem_len=5))
    with torch.no_grad():
        out = limited.left_to_right(ids[:, :10], attn[:, :10])
    assert [m.shape[1] for m in out.mems] == [5, 5]


# ---- errors --------------------------------------------------------------------------------------------------


def test_bad_inputs_are_one_line_errors(tmp_path):
    model = make()
    ids, attn = padded_batch([5, 5])
    with pytest.raises(ValueError, match="row 1 is not a permutation"):
        model(ids, attn, order=torch.tensor([[0, 1, 2, 3, 4], [0, 0, 2, 3, 4]]))
    with pytest.raises(ValueError, match="K"):
        make(xlnet=XlnetConfig(partial_prediction=0))
    with pytest.raises(ValueError, match="memory from a batch of another size"):
        model.left_to_right(ids, attn, mems=[torch.zeros(3, 4, 32)] * 2)
    with pytest.raises(ValueError, match="need a factorization order"):
        model(ids, attn, labels=ids)
    from maskplay import BertMLM
    bert = BertMLM(preset("tiny", family="bert"))
    bert.save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="family='xlnet'"):
        XLNet.from_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="transformer-xl"):
        preset("tiny", family="xlnet", positions="learned")


def test_save_and_load_round_trip(tmp_path):
    model = make(xlnet=XlnetConfig(mem_len=7, partial_prediction=4))
    model.save_pretrained(tmp_path / "m")
    loaded = XLNet.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == model.config and loaded.config.attention_bias is False
    ids, attn = padded_batch([6, 3])
    with torch.no_grad():
        torch.testing.assert_close(loaded.left_to_right(ids, attn).last_hidden_state,
                                   model.left_to_right(ids, attn).last_hidden_state)


def test_training_adds_a_segment_term_that_changes_nothing_but_reaches_every_parameter():
    """Without segment ids, training runs the one-segment term (DistributedDataParallel needs every parameter in
    the graph): the loss equals the one computed without it, and the segment weights get a (zero) gradient."""
    model = make()
    ids, attn = padded_batch([9, 6])
    batch = model.training_batch(ids, attn, torch.Generator().manual_seed(3))
    with torch.no_grad():
        without = model(**batch).loss
    model.train()
    with_term = model(**batch).loss
    torch.testing.assert_close(with_term, without, atol=1e-6, rtol=1e-6)
    with_term.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.encoder.layers[0].attn.relative.segment_embed.grad.abs().max() < 1e-5


def test_grouped_inference_equals_one_pass():
    """A padded inference batch of more than one group runs in groups cut to their own length: same outputs."""
    model = make(num_layers=2)
    ids, attn = padded_batch([12, 11, 11, 9, 9, 8, 6, 5, 5, 4, 3, 2], seed=5)
    with torch.no_grad():
        assert model._in_groups(attn, None, None, False)
        grouped = model.left_to_right(ids, attn).last_hidden_state
        for row in range(ids.shape[0]):
            n = int(attn[row].sum())
            alone = model.left_to_right(ids[row:row + 1, :n]).last_hidden_state[0]
            torch.testing.assert_close(grouped[row, :n], alone, atol=1e-5, rtol=1e-5)
