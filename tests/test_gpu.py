"""The code paths on a CUDA GPU (`make test-gpu`; skipped on a machine without one): every family's forward pass and
loss equal the CPU's, a bf16 training step, the strict-small recipes' training step (loss and every gradient) equal
the CPU's, a compiled GPT, BERT, T-TA and GPT-BERT step against the CPU's eager one, the CUDA-graph decode step against
the plain cached path on the GPU, and sentence scores equal the CPU's.
MASKPLAY_TEST_DEVICE=cpu runs the same checks with the CPU as the second device (a dry run of this file's own
logic on a machine without a GPU; the decode step is then compiled by torch.compile instead of captured)."""

from __future__ import annotations

import os

import pytest
import torch

from maskplay import preset
from maskplay.families import build_model
from maskplay.registry import FAMILIES
from maskplay.runtime.precision import forward_in
from maskplay.tasks.decoding import generate, generating_families
from maskplay.tasks.score import Scorer
from tests.conftest import padded_batch
from tests.tasks.score.test_score_support import SENTENCES, small_tokenizer
from tests.tasks.score.test_score_support import tiny as scoring_model

DEVICE = os.environ.get("MASKPLAY_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                 reason="needs a CUDA GPU (make test-gpu on a machine with one)")]
PROMPTS = [[3, 10, 11, 12, 13, 14], [3, 20, 21], [3, 40, 41, 42, 43, 44, 45, 46, 47]]


@pytest.fixture(autouse=True)
def exact_fp32():
    """TF32 off: fp32 on the GPU is then compared with the CPU's at fp32 tolerances."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def tiny(family: str, **overrides):
    torch.manual_seed(0)
    return build_model(preset("tiny", family=family, **overrides)).eval()


def batch_of(model, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random rows with a separator at position 2 (a source and a target for UniLM's seq2seq batches)."""
    ids, mask = padded_batch(lengths)
    ids[:, 2] = model.config.separator_id
    return ids, mask


def moved(batch: dict, device: str) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def loss_is_deterministic(model, batch: dict) -> bool:
    """Whether the loss depends on the RNG (ELECTRA samples its generator's tokens inside forward)."""
    with torch.no_grad():
        torch.manual_seed(0)
        a = model(**batch).loss
        torch.manual_seed(1)
        return bool(a == model(**batch).loss)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_and_loss_on_the_gpu_equal_the_cpus(family):
    model = tiny(family)
    ids, mask = batch_of(model, [9, 5, 7])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    compare_loss = loss_is_deterministic(model, batch)
    with torch.no_grad():
        want_logits = model(ids, attention_mask=mask).logits
        want = model(**batch).loss
        model.to(DEVICE)
        got_logits = model(ids.to(DEVICE), attention_mask=mask.to(DEVICE)).logits
        got = model(**moved(batch, DEVICE)).loss
    torch.testing.assert_close(got_logits.cpu(), want_logits, atol=1e-4, rtol=1e-4)
    assert torch.isfinite(got)
    if compare_loss:
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_bf16_training_step_on_the_gpu_is_close_to_fp32(family):
    model = tiny(family).to(DEVICE)
    ids, mask = batch_of(model, [12, 8])
    batch = moved(model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0)), DEVICE)
    compare_loss = loss_is_deterministic(model, batch)
    ref = model(**batch).loss
    for precision in ("bf16-autocast", "bf16"):
        out = forward_in(model, precision, **batch)
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(out.loss, params, allow_unused=True)
        assert all(g is None or (g.dtype == torch.float32 and bool(torch.isfinite(g).all())) for g in grads)
        if compare_loss:
            torch.testing.assert_close(out.loss.float(), ref, atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("family", generating_families())
def test_the_graph_decode_step_gives_the_plain_paths_tokens(family):
    model = tiny(family).to(DEVICE)
    plain = generate(model, PROMPTS, max_new_tokens=10, stop_ids=[], output_logits=True)
    for _ in range(2):  # the first call captures the graph, the second replays the captured one
        fast = generate(model, PROMPTS, max_new_tokens=10, stop_ids=[], output_logits=True, compile=True)
        assert [g.token_ids for g in fast] == [g.token_ids for g in plain]
        for f, p in zip(fast, plain, strict=True):
            torch.testing.assert_close(f.logits, p.logits, atol=1e-4, rtol=1e-4)


def test_the_graph_decode_step_in_bf16_is_close_to_the_plain_path():
    model = tiny("gpt").to(DEVICE).to(torch.bfloat16)
    plain = generate(model, PROMPTS, max_new_tokens=8, stop_ids=[], output_logits=True)
    fast = generate(model, PROMPTS, max_new_tokens=8, stop_ids=[], output_logits=True, compile=True)
    for f, p in zip(fast, plain, strict=True):
        assert f.token_ids[0] == p.token_ids[0]  # the same prompt pass: the first token agrees
        torch.testing.assert_close(f.logits[1], p.logits[1], atol=3e-2, rtol=3e-2)  # the first graph step


@pytest.mark.parametrize("family", ["tta", "bert", "gpt"])
def test_scores_on_the_gpu_equal_the_cpus(tmp_path, family):
    tokenizer = small_tokenizer(tmp_path)
    model = scoring_model(family, tokenizer)
    want = Scorer(model, tokenizer).score(SENTENCES)
    got = Scorer(model, tokenizer, device=DEVICE).score(SENTENCES)
    for g, w in zip(got, want, strict=True):
        assert g.log_prob == pytest.approx(w.log_prob, abs=1e-3)


# the strict-small recipes' architecture (configs/babylm/), dropout off: on a GPU it runs DenseFormer's buffered
# stream and its hand-written backward, the disentangled bias through SDPA's memory-efficient kernel, and the fused
# loss in a GPU's blocking (large blocks and chunks), none of which a CPU run takes the same way
RECIPE = dict(positions="disentangled", norm_placement="pre", norm_affine=False, attention_output_norm=True,
              value_gate=True, ffn="geglu", ffn_bias=False, gelu_tanh=True, ffn_inner_norm=True, denseformer=True,
              hidden_dropout=0.0, attention_dropout=0.0)


@pytest.mark.parametrize("family", ["gpt", "bert", "tta", "gpt-bert"])
def test_a_recipe_training_step_on_the_gpu_has_the_cpus_loss_and_gradients(family):
    model = tiny(family, **RECIPE).train()
    ids, mask = batch_of(model, [12, 9, 11])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    want = model(**batch).loss
    want_grads = torch.autograd.grad(want, list(model.parameters()), allow_unused=True)
    model.to(DEVICE)
    got = model(**moved(batch, DEVICE)).loss
    got_grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
    for (name, _), g, w in zip(model.named_parameters(), got_grads, want_grads, strict=True):
        assert (g is None) == (w is None), name
        if w is not None:
            torch.testing.assert_close(g.cpu(), w, atol=1e-4, rtol=1e-3, msg=name)


PLAIN = dict(hidden_dropout=0.0, attention_dropout=0.0)


def flex_case(family: str, switches: dict) -> tuple:
    """A model at the recipes' head width (64; Triton's kernels need at least 16) and length (128), a batch of padded
    rows beside a full one (GPT-BERT's in both modes), the CPU's eager loss and gradients on it through SDPA; the
    model is then moved to the GPU."""
    model = tiny(family, **switches, hidden_size=128, num_heads=2, intermediate_size=256, max_position=128).train()
    ids, mask = batch_of(model, [128, 100, 120])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    if family == "gpt-bert":
        batch["causal_rows"] = torch.tensor([True, False, False])
    want = model(**batch).loss
    want_grads = torch.autograd.grad(want, list(model.parameters()), allow_unused=True)
    return model.to(DEVICE), batch, want, want_grads


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention's backward runs on a CUDA device only")
@pytest.mark.parametrize(("family", "switches"), [("gpt", RECIPE), ("bert", RECIPE), ("tta", RECIPE),
                                                  ("gpt-bert", RECIPE), ("tta", PLAIN), ("gpt-bert", PLAIN),
                                                  ("xlnet", PLAIN)])
def test_a_training_step_through_flex_attention_has_the_cpus_loss_and_gradients(family, switches):
    """run.flex_attention (attention/flex.py): FlexAttention compiled, the mask as a block mask and, for the recipes,
    the disentangled terms read inside it (their gradients by its captured-buffer backward); against the CPU's step
    through SDPA (with the gathered bias), in fp32, then in bf16 autocast against SDPA's step on the GPU."""
    from maskplay.nn.attention import flex

    model, batch, want, want_grads = flex_case(family, switches)
    calls, attend = [], flex.attend
    flex.attend = lambda *a: calls.append(1) or attend(*a)
    try:
        with flex.using(True):
            got = model(**moved(batch, DEVICE)).loss
            got_grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
    finally:
        flex.attend = attend
    assert calls  # the step went through FlexAttention
    # to 1e-3: FlexAttention's kernels may multiply fp32 in TF32 whatever the fixture says (a wrong gradient is off
    # by its own size)
    torch.testing.assert_close(got.cpu(), want, atol=1e-3, rtol=1e-3)
    for (name, _), g, w in zip(model.named_parameters(), got_grads, want_grads, strict=True):
        assert (g is None) == (w is None), name
        if w is not None:
            torch.testing.assert_close(g.cpu(), w, atol=1e-3, rtol=1e-2, msg=name)
    # and in bf16 autocast, as the recipes train: against SDPA's step on the GPU, to bf16's precision
    steps = {}
    for on in (False, True):
        with flex.using(on):
            loss = forward_in(model, "bf16-autocast", **moved(batch, DEVICE)).loss
            steps[on] = (loss.float(), torch.autograd.grad(loss, list(model.parameters()), allow_unused=True))
    (loss_s, grads_s), (loss_f, grads_f) = steps[False], steps[True]
    torch.testing.assert_close(loss_f, loss_s, atol=2e-2, rtol=2e-2)
    for (name, _), f, g in zip(model.named_parameters(), grads_f, grads_s, strict=True):
        if g is not None:
            assert float((f.float() - g.float()).norm()) <= 5e-2 * float(g.float().norm()) + 1e-6, name


@pytest.mark.parametrize(("family", "switches"), [("gpt", PLAIN), ("bert", PLAIN), ("tta", RECIPE),
                                                  ("gpt-bert", RECIPE)])
def test_a_compiled_training_step_on_the_gpu_has_the_cpus_loss_and_gradients(family, switches):
    """run.compile's step scope (train/stepping.compile_forward: the labelled positions traced with a run-time
    size; GPT-BERT's modes' means over tensor counts) told the rows have no padding (masks.rows_without_padding:
    GPT's flash path reads nothing), on full rows as packing makes them, against the CPU's eager step; T-TA and
    GPT-BERT at the strict-small recipes' architecture, whose step compiles into one graph (since commit 308e144)."""
    from maskplay.nn.masks import no_padding, rows_without_padding
    from maskplay.tasks.train.stepping import compile_forward

    model = tiny(family, **switches).train()
    ids, mask = batch_of(model, [12, 12, 12])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    if family == "gpt-bert":  # both modes in the batch
        batch["causal_rows"] = torch.tensor([True, False, False])
    assert no_padding(batch)
    want = model(**batch).loss
    want_grads = torch.autograd.grad(want, list(model.parameters()), allow_unused=True)
    model.to(DEVICE)
    compiled = compile_forward(lambda **kw: model(**kw), model, "step")
    with rows_without_padding(True):
        got = compiled(**moved(batch, DEVICE)).loss
    got_grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
    for (name, _), g, w in zip(model.named_parameters(), got_grads, want_grads, strict=True):
        assert (g is None) == (w is None), name
        if w is not None:
            torch.testing.assert_close(g.cpu(), w, atol=1e-4, rtol=1e-3, msg=name)


@pytest.mark.skipif(DEVICE != "cuda", reason="FlexAttention's backward runs on a CUDA device only")
@pytest.mark.parametrize("scope", ["nested", "step"])
@pytest.mark.parametrize("family", ["tta", "gpt-bert"])
def test_a_compiled_step_through_flex_attention_is_one_graph_with_the_cpus_loss_and_gradients(family, scope):
    """run.compile (the whole-step scopes; nested: FlexAttention inside the blocks' regions) with run.flex_attention,
    as gpu_one_call.sh trains the recipes when it picks both: the block mask made inside the graph
    (flex.block_mask_of), FlexAttention lowered by the GPU's inductor with the rest of the step, one graph and no
    graph break, on padded rows beside a full one; the loss and every gradient equal the CPU's eager step through
    SDPA."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from maskplay.nn.attention import flex
    from maskplay.tasks.train.stepping import compile_forward

    model, batch, want, want_grads = flex_case(family, RECIPE)
    torch._dynamo.reset()
    counters.clear()
    compiled = compile_forward(lambda **kw: model(**kw), model, scope)
    with flex.using(True):
        got = compiled(**moved(batch, DEVICE)).loss
    got_grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(got.cpu(), want, atol=1e-3, rtol=1e-3)  # TF32 in FlexAttention's kernels, as above
    for (name, _), g, w in zip(model.named_parameters(), got_grads, want_grads, strict=True):
        assert (g is None) == (w is None), name
        if w is not None:
            torch.testing.assert_close(g.cpu(), w, atol=1e-3, rtol=1e-2, msg=name)
