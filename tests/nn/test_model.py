import pytest
import torch

from maskplay import BertMLM, MaskplayModel, ModelConfig, preset
from maskplay.families import build_model
from maskplay.nn.pass_modes import LastLayerRows
from tests.conftest import padded_batch

FAMILIES = ["tta", "bert", "gpt"]


def token_logprobs(model, ids, mask):
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
    return logits.log_softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_invariance(tiny_model, family):
    model = tiny_model(family)
    lengths = [9, 3, 6]
    ids, mask = padded_batch(lengths)
    together = token_logprobs(model, ids, mask)
    for row, n in enumerate(lengths):
        alone = token_logprobs(model, ids[row:row + 1, :n], mask[row:row + 1, :n])
        torch.testing.assert_close(together[row, :n], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_load_round_trip(tmp_path, tiny_model, family):
    model = tiny_model(family)
    model.save_pretrained(tmp_path)
    loaded = MaskplayModel.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    ids, mask = padded_batch([5, 4])
    torch.testing.assert_close(token_logprobs(loaded, ids, mask), token_logprobs(model, ids, mask))
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_loading_a_checkpoint_with_a_missing_weight_fails(tmp_path, tiny_model):
    from safetensors.torch import load_file, save_file

    tiny_model("tta").save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["encoder.layers.1.attn.key.weight"]
    save_file(state, tmp_path / "model.safetensors")
    (tmp_path / "manifest.json").unlink()  # an edited file fails its checksum first; this tests the key check
    with pytest.raises(ValueError, match=r"missing \['encoder.layers.1.attn.key.weight'\]"):
        MaskplayModel.from_pretrained(tmp_path)


def test_fp16_checkpoint_loads_close(tmp_path, tiny_model):
    model = tiny_model("tta")
    model.save_pretrained(tmp_path, dtype=torch.float16)
    loaded = MaskplayModel.from_pretrained(tmp_path).eval()
    ids, mask = padded_batch([6])
    torch.testing.assert_close(token_logprobs(loaded, ids, mask), token_logprobs(model, ids, mask),
                               atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_and_logit_shapes(tiny_model, family):
    model = tiny_model(family)
    ids, mask = padded_batch([8, 5])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    out = model(**batch)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    labels = batch["labels"][:, 1:] if family == "gpt" else batch["labels"]
    assert out.logits.shape == ((labels != -100).sum().item(), 100)
    assert model(ids, attention_mask=mask).logits.shape == (2, 8, 100)


def test_tta_loss_is_the_mean_over_real_tokens(tiny_model):
    model = tiny_model("tta")
    ids, mask = padded_batch([8, 3])
    out = model(**model.training_batch(ids, mask))
    logits = model(ids, attention_mask=mask).logits
    want = torch.nn.functional.cross_entropy(logits[mask], ids[mask])
    torch.testing.assert_close(out.loss, want)


@pytest.mark.parametrize("probability", [0.15, 0.4])
def test_bert_corruption_statistics(probability):
    model = BertMLM(preset("tiny", family="bert", vocab_size=1000, mask_probability=probability))
    ids, mask = padded_batch([100] * 1000, vocab=1000)
    ids[:, 0] = 3  # [SOS] is special and must never be selected
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    selected = batch["labels"] != -100
    assert not selected[:, 0].any()
    rate = selected[:, 1:].float().mean().item()
    assert probability - 0.005 < rate < probability + 0.005
    masked = (batch["input_ids"] == 4) & selected
    kept = (batch["input_ids"] == ids) & selected
    assert 0.79 < masked.sum() / selected.sum() < 0.81
    assert 0.095 < kept.sum() / selected.sum() < 0.11  # 10 % kept + random draws of the same id
    assert torch.equal(batch["labels"][selected], ids[selected])


def test_bad_inputs_get_clear_errors(tiny_model):
    model = tiny_model("tta")
    with pytest.raises(ValueError, match="exceeds the model's 64 positions"):
        model(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="token id 100 is out of range for a vocabulary of 100"):
        model(torch.tensor([[5, 100]]))
    with pytest.raises(ValueError, match="token id -1 is out of range"):
        model(torch.tensor([[5, -1]]))
    with pytest.raises(ValueError, match="empty batch"):
        model(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="2-D"):
        model(torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"hidden_size \(250\) must be divisible by num_heads \(4\)"):
        ModelConfig(hidden_size=250, num_heads=4)
    with pytest.raises(ValueError, match="needs a config with family='bert'"):
        BertMLM(preset("tiny", family="tta"))
    with pytest.raises(ValueError, match=r"mask_probability must be in \(0, 1\), got 1.5"):
        ModelConfig(family="bert", mask_probability=1.5)
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")


def test_one_token_tta_input_gives_finite_output(tiny_model):
    out = tiny_model("tta")(torch.tensor([[9]]))
    assert torch.isfinite(out.logits).all()


def test_presets_are_selectable_for_every_family():
    for name in ("mini", "tta-paper"):
        sizes = {f: build_model(preset(name, family=f)).num_parameters() for f in FAMILIES}
        assert len(set(sizes.values())) == 1, sizes  # families are compared at the same size
    paper = preset("tta-paper")
    assert (paper.num_layers, paper.hidden_size, paper.num_heads, paper.intermediate_size,
            paper.max_position, paper.vocab_size) == (3, 512, 8, 2048, 128, 29530)


def _blocking_of(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors on this CPU walked as the `kind` device's blocking would (a GPU's: few large blocks and chunks;
    "gpu-small": a GPU's policy with blocks of 40 rows' logits, so that its matmuls cut the rows too)."""
    import dataclasses

    from maskplay.nn import heads

    policy = {"cpu": heads.CPU_BLOCKING, "gpu": heads.GPU_BLOCKING,
              "gpu-small": dataclasses.replace(heads.GPU_BLOCKING, block_bytes=40 * 4 * 100)}[kind]
    monkeypatch.setattr(heads, "blocking", lambda device: policy)


@pytest.mark.parametrize("blocking", ["cpu", "gpu", "gpu-small"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [37, 601])  # within one row block; across three (ROW_BLOCK = 256), 48-row chunks
def test_fused_linear_cross_entropy_matches_the_naive_loss_and_gradients(dtype, n, blocking, monkeypatch):
    from maskplay.nn.heads import linear_cross_entropy

    _blocking_of(blocking, monkeypatch)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(50, 16, generator=g)).to(dtype).requires_grad_()
    b = torch.randn(50, generator=g).to(dtype).requires_grad_()
    t = torch.randint(50, (n,), generator=g)
    rows = 8 if n < 100 else 48
    fused = linear_cross_entropy(x, w, b, t, chunk_bytes=rows * 4 * 50) * 3.0  # chunks that do not divide N
    grads = torch.autograd.grad(fused, (x, w, b))
    naive = torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, w, b).float(), t) * 3.0
    want = torch.autograd.grad(naive, (x, w, b))
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(fused, naive, **tol)
    for got, ref in zip(grads, want, strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got, ref, **tol)


def test_logits_with_labels_are_the_rows_of_the_full_logits(tiny_model):
    model = tiny_model("tta")
    ids, mask = padded_batch([6, 3])
    out = model(**model.training_batch(ids, mask))
    full = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(out.logits, full[mask])


@pytest.mark.parametrize("precision", ["bf16", "bf16-autocast"])
def test_bf16_forward_keeps_fp32_parameters_and_gradients_close(tiny_model, precision):
    from maskplay.runtime.precision import forward_in

    model = tiny_model("tta")
    ids, mask = padded_batch([9, 6])
    batch = model.training_batch(ids, mask)
    ref = model(**batch).loss
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    out = forward_in(model, precision, **batch)
    assert out.loss.dtype == torch.float32
    if precision == "bf16":
        assert out.last_hidden_state.dtype == torch.bfloat16  # activations end to end, not per-op casts
    grads = torch.autograd.grad(out.loss, list(model.parameters()))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    torch.testing.assert_close(out.loss, ref, atol=3e-2, rtol=1e-2)
    for (name, _), g, r in zip(model.named_parameters(), grads, ref_grads, strict=True):
        assert g.dtype == torch.float32, name
        if r.norm() < 1e-5:  # e.g. key biases: softmax ignores a shift shared by a whole row
            assert g.norm() < 1e-2, name
            continue
        cos = torch.nn.functional.cosine_similarity(g.flatten(), r.flatten(), dim=0)
        assert cos > 0.97, (name, cos)


def test_from_pretrained_names_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        MaskplayModel.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no-such-org/no-such-model"):
        MaskplayModel.from_pretrained("no-such-org/no-such-model")  # not local; the hub is unreachable here


def test_logits_are_computed_lazily_under_the_forward_grad_mode(tiny_model):
    model = tiny_model("tta")
    ids, mask = padded_batch([5])
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
    logits = out.logits  # accessed outside no_grad: must not build a graph
    assert not logits.requires_grad and logits.shape == (1, 5, 100)
    assert out.logits is logits  # computed once
    assert model(ids, attention_mask=mask).logits.requires_grad


def test_the_loss_without_gradients_equals_the_training_loss(tiny_model):
    model = tiny_model("bert")
    ids, mask = padded_batch([7, 4])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    with_grad = model(**batch).loss
    with torch.no_grad():
        without = model(**batch).loss
    torch.testing.assert_close(without, with_grad.detach())


def test_bf16_evaluation_loss_is_accumulated_in_fp32():
    from maskplay.nn.heads import linear_cross_entropy

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 16, generator=g)
    w = torch.randn(300, 16, generator=g) * 0.1
    b = torch.zeros(300)
    t = torch.randint(300, (3000,), generator=g)
    exact = torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, w, b), t)
    with torch.no_grad():
        got = linear_cross_entropy(x.bfloat16(), w.bfloat16(), b.bfloat16(), t)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, exact, atol=5e-3, rtol=0)  # bf16 inputs, but no bf16 sums


@pytest.mark.parametrize("blocking", ["cpu", "gpu", "gpu-small"])
@pytest.mark.parametrize("n", [5, 700])
def test_linear_log_probs_equal_the_log_softmax_of_the_full_logits(n, blocking, monkeypatch):
    from maskplay.nn.heads import linear_log_probs

    _blocking_of(blocking, monkeypatch)
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(n, 16, generator=g), torch.randn(90, 16, generator=g), torch.randn(90, generator=g)
    t = torch.randint(90, (n,), generator=g)
    want = torch.nn.functional.linear(x, w, b).log_softmax(-1)[torch.arange(n), t]
    torch.testing.assert_close(linear_log_probs(x, w, b, t, chunk_bytes=40 * 4 * 90), want)
    got16 = linear_log_probs(x.bfloat16(), w.bfloat16(), b.bfloat16(), t)
    assert got16.dtype == torch.float32
    torch.testing.assert_close(got16, want, atol=0.15, rtol=0.02)


@pytest.mark.parametrize("family", ["bert", "tta"])
def test_last_layer_rows_give_the_full_forward_rows(tiny_model, family):
    """PLL's short cut (the last block at one position per row) changes nothing at those positions, padding
    included; and it refuses bad positions and labels."""
    model = tiny_model(family)
    ids, mask = padded_batch([7, 4, 6])
    positions = torch.tensor([6, 0, 3])
    full = model(ids, attention_mask=mask, output_hidden_states=True)
    part = model(ids, attention_mask=mask, last_layer_rows=LastLayerRows(positions), output_hidden_states=True)
    assert part.last_hidden_state.shape == (3, 1, model.config.hidden_size)
    torch.testing.assert_close(part.last_hidden_state[:, 0], full.last_hidden_state[torch.arange(3), positions])
    for a, b in zip(part.hidden_states[:-1], full.hidden_states[:-1], strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="last_layer_rows"):
        model(ids, attention_mask=mask, last_layer_rows=LastLayerRows(torch.tensor([0, 7, 1])))
    with pytest.raises(ValueError, match="labels"):
        model(**model.training_batch(ids, mask), last_layer_rows=LastLayerRows(positions))


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra"])
@pytest.mark.parametrize("int8", [False, True])
def test_inference_runs_the_real_tokens_only_with_the_same_results(tiny_model, family, int8, monkeypatch):
    """Without autograd a padded batch runs its per-token layers on the real tokens alone (backbone.Packing);
    the padded layout (what training uses) is the oracle. A one-token row (T-TA: a query that may attend to
    nothing) is in the batch."""
    from maskplay.nn import backbone
    from maskplay.runtime.precision import quantize_int8

    model = tiny_model(family)
    if int8:
        model = quantize_int8(model)
    ids, mask = padded_batch([9, 4, 1, 7] + [0] * 9, vocab=model.config.vocab_size)  # a group of empty rows too
    packings = []
    monkeypatch.setattr(backbone.Packing, "__init__", lambda self, tokens, _init=backbone.Packing.__init__:
                        (packings.append(tokens), _init(self, tokens))[1])
    with torch.no_grad():
        packed = model(ids, attention_mask=mask, output_hidden_states=True)
    assert len(packings) == 1 and torch.equal(packings[0], mask)
    padded = model(ids, attention_mask=mask, output_hidden_states=True)  # grad enabled: the padded layout
    assert len(packings) == 1
    # int8: each matmul's activation range is taken over the tokens it gets, padding or not: near, not equal
    tol = 5e-3 if int8 else 1e-5
    for a, b in zip(packed.hidden_states + (packed.last_hidden_state,),
                    padded.hidden_states + (padded.last_hidden_state,), strict=True):
        torch.testing.assert_close(a[mask], b[mask].detach(), rtol=tol, atol=tol)
        assert not a[~mask].any()  # zero at the padding
    with torch.no_grad():  # a batch without padding keeps its layout, and so does one of padding only
        model(ids[:4, :1], attention_mask=mask[:4, :1])
        model(ids[4:], attention_mask=mask[4:])
    assert len(packings) == 1


def test_left_padded_batches_run_packed_with_the_same_results(tiny_model):
    """Not right-padded: attention runs as one group over the whole padded length."""
    model = tiny_model("bert")
    ids, mask = padded_batch([8, 5, 2])
    ids, mask = ids.flip(1), mask.flip(1)  # padding first
    with torch.no_grad():
        packed = model(ids, attention_mask=mask).last_hidden_state
    padded = model(ids, attention_mask=mask).last_hidden_state.detach()
    torch.testing.assert_close(packed[mask], padded[mask], rtol=1e-5, atol=1e-5)
    assert not packed[~mask].any()


def test_mask_probability_through_set_and_toml(tmp_path):
    from maskplay.config import apply_overrides
    from maskplay.tasks.train.config import ModelSection, TrainConfig, load_train_config

    cfg = apply_overrides(TrainConfig(model=ModelSection(family="bert", preset="tiny")), ["model.mask_probability=0.4"])
    built = cfg.model.build({"vocab_size": 100})
    assert built.mask_probability == 0.4
    assert BertMLM(built).mask_probability == 0.4
    path = tmp_path / "run.toml"
    path.write_text(cfg.to_toml())
    assert load_train_config(path).model.build({"vocab_size": 100}).mask_probability == 0.4
    with pytest.raises(ValueError, match="mask_probability must be in"):
        apply_overrides(TrainConfig(model=ModelSection(family="bert")), ["model.mask_probability=0"])


@pytest.mark.parametrize("blocking", ["cpu", "gpu"])
def test_the_loss_and_the_scores_launch_few_operators_on_a_gpu_and_the_same_values(blocking, monkeypatch):
    """A GPU's blocking walks 4,096 rows in a handful of operators (one matmul, one softmax chunk), where the CPU's
    cache-sized blocks call a dozen per 64 rows: the count is what a GPU launches, the values are the same."""
    from maskplay.nn.heads import linear_cross_entropy, linear_log_probs

    g = torch.Generator().manual_seed(0)
    n, vocab = 4096, 16384
    x = torch.randn(n, 32, generator=g).requires_grad_()
    w, b = torch.randn(vocab, 32, generator=g).requires_grad_(), torch.zeros(vocab, requires_grad=True)
    t = torch.randint(vocab, (n,), generator=g)
    _blocking_of(blocking, monkeypatch)
    with torch.profiler.profile() as prof:
        loss = linear_cross_entropy(x, w, b, t)
        loss.backward()
        scores = linear_log_probs(x.detach(), w.detach(), b.detach(), t)
    ops = sum(1 for e in prof.events() if e.name.startswith("aten::") and (e.cpu_parent is None
              or not e.cpu_parent.name.startswith("aten::")))
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, w, b), t))
    torch.testing.assert_close(scores, torch.nn.functional.linear(x, w, b).log_softmax(-1)[torch.arange(n), t])
    if blocking == "gpu":
        assert ops < 100, ops  # 59 here: most of them views and the autograd bookkeeping around one chunk
    else:
        assert ops > 16 * 64, ops  # 16 blocks of 256 rows, 4 chunks of 64 rows each, a dozen operators a chunk
