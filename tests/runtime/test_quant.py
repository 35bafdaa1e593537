"""int8 inference (quant.Int8Linear, precision.quantize_int8): the oneDNN kernel against the arithmetic it
stands for, and the quantised models against their fp32 originals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from maskplay.nn.feedforward import FeedForward
from maskplay.runtime.precision import quantize_int8
from maskplay.runtime.quant import ONEDNN_INT8, Int8Linear, quantize_activations

needs_onednn = pytest.mark.skipif(not ONEDNN_INT8, reason="this PyTorch build has no oneDNN int8 linear kernel")


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_activation_quantisation_round_trips_within_half_a_step():
    x = torch.randn(64, 48) * 3 + 1
    q, scale, zero_point = quantize_activations(x)
    assert q.dtype == torch.uint8 and q.shape == x.shape and 0 <= zero_point <= 255
    assert float(((q.float() - zero_point) * scale - x).abs().max()) <= scale / 2 + 1e-6
    q0, _, z0 = quantize_activations(torch.zeros(3, 4))
    assert torch.equal(q0, torch.full((3, 4), z0, dtype=torch.uint8))  # 0 is exact (padding, ReLU-like zeros)
    pos, _, zp = quantize_activations(torch.rand(8, 8) + 1)  # the range always holds 0
    assert zp == 0 and int(pos.max()) == 255
    with pytest.raises(ValueError, match="non-finite"):
        quantize_activations(torch.tensor([[1.0, float("nan")]]))


def test_activation_quantisation_fallback_matches_the_fused_kernel(monkeypatch):
    x = torch.randn(256, 64)
    fast, scale, zero_point = quantize_activations(x)

    def missing(*args, **kwargs):
        raise RuntimeError("no quantized tensors in this build")

    monkeypatch.setattr(torch, "quantize_per_tensor", missing)
    slow, scale2, zero_point2 = quantize_activations(x)
    assert (scale, zero_point) == (scale2, zero_point2)
    diff = (fast.int() - slow.int()).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-3  # only ties may round apart


@needs_onednn
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_onednn_kernel_computes_the_reference_arithmetic(activation):
    torch.manual_seed(0)
    layer = Int8Linear.from_linear(nn.Linear(96, 80), activation=activation)
    assert layer._packed is not None
    x = torch.randn(5, 7, 96)
    got = layer(x)
    assert got.shape == (5, 7, 80) and got.dtype == torch.float32
    want = layer.reference(*quantize_activations(x.reshape(-1, 96)), dtype=torch.float64).view(5, 7, 80)
    assert rel(got, want) < 1e-5  # int32 accumulation is exact; only the fp32 dequantisation rounds
    if activation == "gelu":  # the fused GELU is the erf one, like nn.GELU's default (tanh would be ~1e-3 off)
        assert float((got.double() - want).abs().max()) < 1e-4
    assert layer(x.bfloat16()).dtype == torch.bfloat16


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_int8_linear_is_close_to_the_fp32_layer(activation):
    torch.manual_seed(0)
    linear = nn.Linear(128, 64)
    x = torch.randn(32, 128)
    want = linear(x) if activation == "none" else F.gelu(linear(x))
    err = rel(Int8Linear.from_linear(linear, activation)(x).detach(), want.detach())
    assert 1e-4 < err < 0.02  # above zero: it really quantised


def test_concatenated_layers_equal_the_separate_ones():
    torch.manual_seed(0)
    layers = [Int8Linear.from_linear(nn.Linear(64, n)) for n in (32, 48, 16)]
    x = torch.randn(10, 64)
    fused = Int8Linear.concatenated(layers)(x).split([32, 48, 16], dim=-1)
    for one, layer in zip(fused, layers, strict=True):
        torch.testing.assert_close(one, layer(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="same input size"):
        Int8Linear.concatenated([layers[0], Int8Linear.from_linear(nn.Linear(8, 8))])


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra"])
def test_quantised_model_is_close_to_fp32_and_leaves_the_original_alone(tiny_model, family):
    from tests.conftest import padded_batch

    model = tiny_model(family)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize_int8(model)
    linears = [m for m in q.encoder.modules() if isinstance(m, (nn.Linear, Int8Linear))]
    assert linears and all(isinstance(m, Int8Linear) for m in linears)
    ffns = [m for m in q.encoder.modules() if isinstance(m, FeedForward)]
    assert all(f.up.activation == "gelu" and isinstance(f.act, nn.Identity) for f in ffns)
    ids, mask = padded_batch([9, 6, 3], vocab=model.config.vocab_size)
    with torch.no_grad():
        want = model(ids, attention_mask=mask).last_hidden_state[mask]
        got = q(ids, attention_mask=mask).last_hidden_state[mask]
    assert 1e-4 < rel(got, want) < 0.05
    assert F.cosine_similarity(got, want).min() > 0.99
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert isinstance(model.encoder.layers[0].ffn.up, nn.Linear) and isinstance(model.encoder.layers[0].ffn.act, nn.GELU)


@needs_onednn
def test_the_kernel_is_checked_once_and_7_bit_weights_are_used_where_8_bits_saturate(monkeypatch):
    """Where full-range weights fail the check (an AVX2 CPU's saturating int16 sums), weights use 7 bits; where
    both fail, int8 is refused in one line. The real check runs on this CPU as well."""
    import maskplay.runtime.quant as quant

    assert quant._kernel_error(quant.kernel_weight_range()) < 1e-5  # whatever this CPU is, the chosen range is exact
    monkeypatch.setattr(quant, "_WEIGHT_RANGE", None)  # monkeypatch puts both verdicts back afterwards
    monkeypatch.setattr(quant, "_KERNEL_ERROR", None)
    checked: list[int] = []

    def saturating(weight_range: int) -> float:
        checked.append(weight_range)
        return 0.27 if weight_range == quant.FULL_RANGE else 1e-8

    monkeypatch.setattr(quant, "_kernel_error", saturating)
    torch.manual_seed(0)
    linear = nn.Linear(128, 64)
    layer = Int8Linear.from_linear(linear)
    Int8Linear.from_linear(nn.Linear(8, 8))  # checked once per process, not per layer
    assert checked == [127, 63] and int(layer.weight_int8.abs().max()) == 63
    x = torch.randn(32, 128)
    assert rel(layer(x), linear(x).detach()) < 0.02
    with pytest.raises(ValueError, match="would saturate this CPU's int8 kernel"):
        Int8Linear(torch.full((4, 8), 127, dtype=torch.int8), torch.ones(4), torch.zeros(4))

    monkeypatch.setattr(quant, "_WEIGHT_RANGE", None)
    monkeypatch.setattr(quant, "_kernel_error", lambda weight_range: 0.3)
    with pytest.raises(ValueError, match=r"int8: oneDNN's int8 kernel on this CPU does not compute"):
        Int8Linear.from_linear(linear)
    monkeypatch.setattr(quant, "_kernel_error", lambda weight_range: 0.0)
    with pytest.raises(ValueError, match="use --precision fp32 or bf16"):  # the verdict holds for the process
        Int8Linear.from_linear(linear)


def with_outlier_channels(rows: int = 48, width: int = 128, channels: tuple[int, ...] = (5, 40, 99)) -> torch.Tensor:
    """GELU-like inputs (mostly small, skewed) with (by default three) channels two orders of magnitude larger, the
    shape of a trained model's FFN hidden layer."""
    g = torch.Generator().manual_seed(3)
    x = F.gelu(torch.randn(rows, width, generator=g))
    x[:, list(channels)] *= torch.tensor([150.0, -60.0, 90.0])[:len(channels)]
    return x


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_outlier_channels_are_computed_in_fp32(activation, monkeypatch):
    """The outlier channels are multiplied in fp32 and the rest in int8 with the range of the rest: the layer then
    stays close to fp32, where one scale for all channels is several times further off (8x with 8-bit weights,
    4x with the 7-bit weights of a CPU without VNNI, whose own rounding then dominates)."""
    from maskplay.runtime import quant

    torch.manual_seed(0)
    linear = nn.Linear(128, 64)
    x = with_outlier_channels()
    want = linear(x) if activation == "none" else F.gelu(linear(x))
    layer = Int8Linear.from_linear(linear, activation)
    assert sorted(quant.outlier_channels(x.abs().amax(0)).tolist()) == [5, 40, 99]
    split = rel(layer(x).detach(), want.detach())
    monkeypatch.setattr(quant, "OUTLIER_RATIO", float("inf"))  # one scale for every channel, as before
    whole = rel(layer(x).detach(), want.detach())
    assert split < 0.012 and whole > 3 * split


@pytest.mark.parametrize("activation", ["none", "gelu"])
@pytest.mark.parametrize("channels", [(5,), (5, 40), (5, 40, 99)])  # outer products (addr_) up to two, then a matmul
def test_the_outlier_split_computes_its_arithmetic(activation, channels):
    """Oracle in float64: int8 for the other channels (their own range), fp32 for the outliers with the int8
    weights dequantised, the bias once, the activation after the sum."""
    from maskplay.runtime import quant

    torch.manual_seed(1)
    layer = Int8Linear.from_linear(nn.Linear(128, 64), activation)
    x = with_outlier_channels(channels=channels)
    outliers = quant.outlier_channels(x.abs().amax(0))
    assert sorted(outliers.tolist()) == list(channels)
    rest = x.index_fill(1, outliers, 0.0)
    keep = torch.ones(128, dtype=torch.bool)
    keep[outliers] = False
    q, scale, zero_point = quantize_activations(rest, (float(x[:, keep].min()), float(x[:, keep].max())))
    want = layer.reference(q, scale, zero_point, torch.float64, activation="none")
    weights = layer.weight_int8.double() * layer.weight_scale.double()[:, None]
    want += x.double()[:, outliers] @ weights[:, outliers].t()
    want = F.gelu(want) if activation == "gelu" else want
    assert rel(layer(x), want) < 1e-5


def test_outliers_are_capped_and_a_non_finite_input_still_fails():
    from maskplay.runtime import quant

    magnitude = torch.ones(512)
    magnitude[:100] = torch.arange(100, 0, -1).float() * 10  # 100 channels above 4x the median: the largest kept
    assert quant.outlier_channels(magnitude).tolist() == list(range(quant.MAX_OUTLIERS))
    assert quant.outlier_channels(torch.ones(64)) is None
    layer = Int8Linear.from_linear(nn.Linear(128, 64))
    x = with_outlier_channels()
    x[0, 3] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        layer(x)


def quant_module():
    from maskplay.runtime import quant

    return quant


needs_few_rows = pytest.mark.skipif(
    not (ONEDNN_INT8 and quant_module().fbgemm_exact(quant_module().kernel_weight_range())),
    reason="FBGEMM's dynamic linear is missing or not exact on this CPU: few rows take the oneDNN path")


@needs_few_rows
def test_few_rows_run_fbgemm_and_compute_the_exact_arithmetic(monkeypatch):
    """A call of at most FEW_ROWS rows goes through FBGEMM's fused dynamic linear (the oneDNN path is not called),
    and computes the integer arithmetic exactly: inputs that quantise exactly (multiples of 1/128, 0 and 255/128
    present, no outlier channel) against float64."""
    quant = quant_module()
    layer = Int8Linear.from_linear(nn.Linear(256, 48))

    def not_here(*args, **kwargs):
        raise AssertionError("few rows must not take the oneDNN path")

    monkeypatch.setattr(Int8Linear, "_int8", not_here)
    g = torch.Generator().manual_seed(2)
    q = torch.randint(0, 256, (quant.FEW_ROWS, 256), generator=g)
    q[0], q[1] = 255, 0  # every channel reaches 255/128: no outliers, and the range is exactly 0..255/128
    got = layer(q.float() / 128)
    want = layer.reference(q.to(torch.uint8), 1 / 128, 0, torch.float64)
    assert rel(got, want) < 1e-5
    with pytest.raises(ValueError, match="non-finite"):
        layer(torch.tensor([[float("nan")] * 256]))


@needs_few_rows
@pytest.mark.parametrize("activation", ["none", "gelu"])
@pytest.mark.parametrize("rows", [1, 8])
def test_few_rows_agree_with_the_many_rows_path_and_with_fp32(activation, rows, monkeypatch):
    quant = quant_module()
    torch.manual_seed(rows)
    linear = nn.Linear(128, 64)
    layer = Int8Linear.from_linear(linear, activation)
    x = torch.randn(rows, 128)
    want = (linear(x) if activation == "none" else F.gelu(linear(x))).detach()
    few = layer(x)
    monkeypatch.setattr(quant, "FEW_ROWS", 0)
    many = layer(x)
    assert 1e-5 < rel(few, want) < 0.02 and rel(few, many) < 0.02  # quantised, and the same quantisation's size


@needs_few_rows
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_outlier_channels_are_split_off_in_few_rows_too(activation, monkeypatch):
    quant = quant_module()
    torch.manual_seed(0)
    linear = nn.Linear(128, 64)
    x = with_outlier_channels(rows=8)
    want = (linear(x) if activation == "none" else F.gelu(linear(x))).detach()
    layer = Int8Linear.from_linear(linear, activation)
    split = rel(layer(x), want)
    monkeypatch.setattr(quant, "OUTLIER_RATIO", float("inf"))
    whole = rel(layer(x), want)
    assert split < 0.012 and whole > 2 * split  # 8 rows: about 3x with 8-bit weights, 2.9x with 7-bit ones


def test_where_fbgemm_is_not_exact_few_rows_take_the_onednn_path(monkeypatch):
    quant = quant_module()
    monkeypatch.setattr(quant, "fbgemm_exact", lambda weight_range: False)
    linear = nn.Linear(64, 32)
    layer = Int8Linear.from_linear(linear)
    assert not layer._use_few_rows and "few_rows_fbgemm=False" in repr(layer)
    x = torch.randn(2, 64)
    assert rel(layer(x), linear(x).detach()) < 0.02


@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_the_int8_copy_projects_logits_in_int8(tiny_model, family):
    """The int8 copy's head (what generation calls at every step) projects in int8 with the tied embedding table
    and the head's bias; the original's head is untouched; the logits stay close to fp32's."""
    model = tiny_model(family)
    q = quantize_int8(model)
    assert not hasattr(model.head, "int8_projection") and isinstance(q.head.int8_projection, Int8Linear)
    torch.manual_seed(0)
    hidden = torch.randn(5, model.config.hidden_size)
    with torch.no_grad():
        want = model.logits(hidden)
        got = q.logits(hidden)
        oracle = Int8Linear.from_weight(model.embeddings.word.weight, model.head.bias)(q.head.transform(hidden))
    assert torch.equal(got, oracle)
    assert 1e-5 < rel(got, want) < 0.03


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_the_traced_form_computes_its_arithmetic(activation):
    """Int8Linear.traced (what torch.compile traces) against float64: its TRACED_OUTLIERS largest channels in fp32
    with the int8 weights dequantised, the others quantised with their own range (widened to hold 0), the bias
    once, the activation after the sum. Then: close to the fp32 layer with three outlier channels, where the
    eager path's error is the bar."""
    from maskplay.runtime import quant

    torch.manual_seed(1)
    linear = nn.Linear(128, 64)
    layer = Int8Linear.from_linear(linear, activation)
    x = with_outlier_channels(rows=8, channels=(5, 40, 99))
    channels = x.abs().amax(0).topk(quant.TRACED_OUTLIERS).indices
    assert {5, 40, 99} <= set(channels.tolist())
    rest = x.double().index_fill(1, channels, 0.0)
    lo, hi = min(float(rest.min()), 0.0), max(float(rest.max()), 0.0)
    scale = (hi - lo) / 255
    zero_point = round(-lo / scale)
    q = ((rest / scale).round() + zero_point).clamp(0, 255)
    want = layer.reference(q, scale, zero_point, torch.float64, activation="none")
    weights = layer.weight_int8.double() * layer.weight_scale.double()[:, None]
    want += x.double()[:, channels] @ weights[:, channels].t()
    want = F.gelu(want) if activation == "gelu" else want
    got = layer.traced(x)
    assert got.shape == (8, 64) and rel(got, want) < 1e-5
    with torch.no_grad():
        fp32 = F.gelu(linear(x)) if activation == "gelu" else linear(x)
    assert rel(got, fp32) < 1.5 * rel(layer(x), fp32) + 1e-3


def test_the_traced_form_keeps_the_leading_dimensions_and_takes_narrow_layers():
    """(B, T, in) inputs keep (B, T); a layer narrower than TRACED_OUTLIERS takes all its channels in fp32."""
    from maskplay.runtime import quant

    torch.manual_seed(2)
    wide = Int8Linear.from_linear(nn.Linear(32, 16))
    x = torch.randn(2, 3, 32)
    assert torch.allclose(wide.traced(x), wide.traced(x.reshape(6, 32)).view(2, 3, 16))
    narrow_linear = nn.Linear(quant.TRACED_OUTLIERS - 1, 5)
    narrow = Int8Linear.from_linear(narrow_linear)
    x = torch.randn(4, quant.TRACED_OUTLIERS - 1)
    weights = narrow.weight_int8.double() * narrow.weight_scale.double()[:, None]
    assert rel(narrow.traced(x), x.double() @ weights.t() + narrow.bias.double()) < 1e-6
