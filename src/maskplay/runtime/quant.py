"""int8 inference for the encoder's linear layers: int8 weights (one scale per output channel, quantised once)
times uint8 activations (one scale and zero point per call, measured on the input: dynamic quantisation),
accumulated in int32 and dequantised inside the matmul kernel, with the bias and an optional GELU fused in.

Why not torch.ao's quantize_dynamic: it quantises and dequantises in separate fp32 passes around the matmul
and ran the tta-paper encoders slower than bf16 on this project's CPU. oneDNN's int8 kernel with the epilogue
fused (the one torch.compile's x86 int8 lowering calls) runs at about twice the bf16 matmul rate
(benchmarks/probes/int8_matmul.py). Activations are unsigned with a zero point because oneDNN's signed-activation path
is a slow reference one. Where that kernel is missing (not an x86 build of PyTorch), the same arithmetic runs
in fp32: the same numbers, no speed-up.

A call of few rows (a decoding step: one row per sequence) is bound by the operations it dispatches, not by
its arithmetic; there the layer runs FBGEMM's dynamic linear (the kernel torch.ao's quantize_dynamic calls), which
measures, quantises, multiplies and dequantises in one operation, on the same int8 weights, where that kernel
computes the exact integer arithmetic on this CPU (checked once per process, as below).

Under torch.compile (the compiled decoding step, maskplay.nn.static_decode) a layer takes a form with no
data-dependent choice and nothing read back (Int8Linear.traced), so that the whole step compiles to one program
whose int8 products inductor runs with its own int8 GEMM or oneDNN's kernel, whichever its autotuning finds faster.

One scale per call means a row's result depends slightly on the other rows of its batch (as with torch.ao).
Input channels far larger than the rest (outlier_channels) are multiplied in fp32 beside the int8 product, so
that one scale does not round every other channel to a few levels.

CPUs without AVX-512 VNNI (AVX2 only, or oneDNN limited by ONEDNN_MAX_CPU_ISA=AVX2) multiply uint8 x int8 with
vpmaddubsw, which adds two products into a saturating int16: 255 x 127 x 2 = 64770 does not fit, and the results
are silently wrong (relative errors of 0.1 to 0.3). The kernel is therefore checked against the exact integer
arithmetic once per process, at the first int8 layer (kernel_weight_range): if full-range weights fail, weights
use 7 bits (-63..63: 255 x 63 x 2 = 32130 fits), which is checked too. 7-bit weights rather than FBGEMM's
7-bit activations (`reduce_range`): the weights have a scale per output channel, the activations one per matmul,
so halving the weights' resolution costs far less (measured: relative error 0.012 against 0.018, 0.009 with 8
bits; with an outlier channel 0.050 against 0.099, 0.050 with 8 bits). If both fail, int8 is refused with a
one-line error instead of returning wrong numbers."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ONEDNN_INT8 = hasattr(torch.ops.onednn, "qlinear_pointwise") and torch.backends.mkldnn.is_available()

# torch.quantize_per_tensor is the one fused fp32 -> uint8 kernel in eager PyTorch (6x the three-op version);
# its quantized-tensor result is deprecated, so only its storage is used, and the notice is not for our users.
warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*deprecated", category=UserWarning)


def quantize_activations(x: Tensor, value_range: tuple[float, float] | None = None) -> tuple[Tensor, float, int]:
    """(uint8 tensor, scale, zero point) with x ~ scale * (q - zero_point), the range taken from x itself (or given,
    when the caller has it) and widened to hold 0 exactly. x is 2-D."""
    lo, hi = value_range if value_range is not None else (float(v) for v in torch.aminmax(x))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"int8: the input of a linear layer holds non-finite values (range {lo}..{hi}); "
                         "run in fp32 to see where they arise")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-8) / 255
    zero_point = min(255, max(0, round(-lo / scale)))
    x = x.float()
    try:
        q = torch.quantize_per_tensor(x, scale, zero_point, torch.quint8)
        as_uint8 = torch.empty(0, dtype=torch.uint8, device=x.device)
        return as_uint8.set_(q.untyped_storage(), 0, q.shape, q.stride()), scale, zero_point
    except (AttributeError, RuntimeError):  # a PyTorch without quantized tensors
        return (x / scale).round_().add_(zero_point).clamp_(0, 255).to(torch.uint8), scale, zero_point


FULL_RANGE, REDUCED_RANGE = 127, 63  # int8 weight levels: 8 bits, or 7 where the CPU's int16 pair sums saturate
_WEIGHT_RANGE: int | None = None  # what this process's kernel computes exactly (kernel_weight_range)
_KERNEL_ERROR: str | None = None


def _check_weights(weight_range: int, generator: torch.Generator) -> Tensor:
    """(48, 256) int8 weights in -weight_range..weight_range, two rows at the ends of the range: what the kernel
    checks (_kernel_error, fbgemm_exact) multiply."""
    weight = torch.randint(-weight_range, weight_range + 1, (48, 256), generator=generator, dtype=torch.int8)
    weight[0], weight[1] = weight_range, -weight_range
    return weight


def _kernel_error(weight_range: int) -> float:
    """Relative error of the oneDNN kernel against the exact integer arithmetic, with weights in
    -weight_range..weight_range and uint8 activations, on inputs that reach the ends of both ranges (full-scale
    activations times full-scale weights: the pair sums an int16 cannot hold) and on random ones."""
    g = torch.Generator().manual_seed(0)
    weight = _check_weights(weight_range, g)
    out_features, in_features = weight.shape
    q = torch.randint(0, 256, (16, in_features), generator=g, dtype=torch.uint8)
    q[0] = 255
    scale, zero_point, w_scale = 0.01, 3, 0.02
    bias = torch.linspace(-1, 1, out_features)
    got = torch.ops.onednn.qlinear_pointwise(q, scale, zero_point, torch.ops.onednn.qlinear_prepack(weight, None),
                                             torch.full((out_features,), w_scale),
                                             torch.zeros(out_features, dtype=torch.long), bias, 1.0, 0,
                                             torch.float32, "none", [], "")
    want = ((q.double() - zero_point) @ weight.double().T) * scale * w_scale + bias.double()
    return float((got.double() - want).norm() / want.norm())


def kernel_weight_range() -> int:
    """The int8 weight range (127, or 63 where the CPU's int16 sums saturate) with which this process's int8
    kernel gives the exact arithmetic; checked once per process. A kernel wrong either way is a ValueError."""
    global _WEIGHT_RANGE, _KERNEL_ERROR
    if _KERNEL_ERROR is not None:
        raise ValueError(_KERNEL_ERROR)
    if _WEIGHT_RANGE is None:
        if not ONEDNN_INT8:
            _WEIGHT_RANGE = FULL_RANGE  # the fp32 reference path: exact by construction
        else:
            errors = {}
            for weight_range in (FULL_RANGE, REDUCED_RANGE):
                errors[weight_range] = _kernel_error(weight_range)
                if errors[weight_range] < 1e-5:  # int32 sums are exact; only the fp32 dequantisation rounds
                    _WEIGHT_RANGE = weight_range
                    break
            else:
                _KERNEL_ERROR = (f"int8: oneDNN's int8 kernel on this CPU does not compute the reference arithmetic "
                                 f"(relative error {errors[FULL_RANGE]:.2g} with 8-bit and {errors[REDUCED_RANGE]:.2g} "
                                 "with 7-bit weights); use --precision fp32 or bf16")
                raise ValueError(_KERNEL_ERROR)
    return _WEIGHT_RANGE


# At most this many rows, a call runs FBGEMM's fused dynamic linear (module doc). Timed with the layers' weights
# evicted between calls, as in a decoding step (benchmarks/probes/int8_few_rows.py, AMD EPYC,
# results/probes/int8-few-rows/): at 1 row 123 against 156 us for a 1024 x 256 layer (371 against 380 for a
# 16,384 x 256 vocabulary projection); at 8 rows the two are about even (104 against 110; 601 against 508); by 32
# rows the quantise-then-oneDNN path is faster. A greedy step of the mini GPT at batch 1: 392 tokens/s against 292.
FEW_ROWS = 8
_FBGEMM_EXACT: dict[int, bool] = {}  # weight range -> whether FBGEMM's dynamic linear is exact with it


def fbgemm_exact(weight_range: int) -> bool:
    """Whether FBGEMM's dynamic linear (quantized::linear_dynamic) computes the exact integer arithmetic with
    weights in -weight_range..weight_range on this CPU: activations that quantise exactly (multiples of 1/128
    from 0 to 255/128) times weights at both ends of the range, against float64. Checked once per range."""
    if weight_range not in _FBGEMM_EXACT:
        try:
            g = torch.Generator().manual_seed(0)
            weight = _check_weights(weight_range, g)
            q = torch.randint(0, 256, (4, 256), generator=g)
            q[0], q[1, 0] = 255, 0  # the full activation range: scale 1/128, zero point 0
            w_scale = torch.full((48,), 0.02, dtype=torch.double)
            packed = _fbgemm_pack(weight, w_scale, torch.zeros(48))
            got = torch.ops.quantized.linear_dynamic(q.float() / 128, packed, False)
            want = (q.double() / 128) @ (weight.double() * w_scale[:, None]).T
            _FBGEMM_EXACT[weight_range] = float((got.double() - want).norm() / want.norm()) < 1e-5
        except (AttributeError, RuntimeError, NotImplementedError):  # a build without FBGEMM's quantized ops
            _FBGEMM_EXACT[weight_range] = False
    return _FBGEMM_EXACT[weight_range]


def _fbgemm_pack(weight_int8: Tensor, weight_scale: Tensor, bias: Tensor) -> object:
    """FBGEMM's packed form of int8 weights with one scale per output channel (and the fp32 bias)."""
    qweight = torch._make_per_channel_quantized_tensor(weight_int8, weight_scale.double(),
                                                       torch.zeros(len(weight_scale), dtype=torch.long), 0)
    return torch.ops.quantized.linear_prepack(qweight, bias.float())


class Int8Linear(nn.Module):
    """An nn.Linear (optionally followed by GELU) computed as uint8 activations x int8 weights. Inference only:
    the module has no parameters. Make one with from_linear (or concatenated)."""

    def __init__(self, weight_int8: Tensor, weight_scale: Tensor, bias: Tensor, activation: str = "none") -> None:
        """weight ~ weight_int8 * weight_scale[:, None], (out, in); bias fp32 (out,)."""
        super().__init__()
        if activation not in ("none", "gelu"):
            raise ValueError(f"activation must be 'none' or 'gelu', got {activation!r}")
        self.out_features, self.in_features = weight_int8.shape
        self.activation = activation
        self.weight_int8, self.weight_scale, self.bias = weight_int8, weight_scale, bias
        self._zero_points = torch.zeros(self.out_features, dtype=torch.int32, device=weight_int8.device)
        use_kernel = ONEDNN_INT8 and weight_int8.device.type == "cpu"
        if use_kernel and int(weight_int8.abs().max()) > kernel_weight_range():
            raise ValueError(f"int8: weights quantised to +-{int(weight_int8.abs().max())} would saturate this CPU's "
                             f"int8 kernel (it is exact up to +-{kernel_weight_range()}); make the layer with "
                             "Int8Linear.from_linear")
        self._packed = torch.ops.onednn.qlinear_prepack(weight_int8, None) if use_kernel else None
        self._use_few_rows = use_kernel and fbgemm_exact(max(int(weight_int8.abs().max()), 1))
        self._few_rows: object | None = None  # FBGEMM's packed weights, made on the first call of few rows
        self._weight_t: Tensor | None = None  # (in, out) int8, made on the first call with outlier channels

    @classmethod
    def from_linear(cls, linear: nn.Linear, activation: str = "none") -> Int8Linear:
        """`linear`'s weights quantised to int8, one scale per output channel (copied: `linear` is untouched)."""
        return cls.from_weight(linear.weight, linear.bias, activation)

    @classmethod
    def from_weight(cls, weight: Tensor, bias: Tensor | None, activation: str = "none") -> Int8Linear:
        """x @ weight.T + bias with `weight` (out, in) quantised to int8, one scale per output channel (a tied
        vocabulary projection has no nn.Linear of its own: its weight is the embedding table)."""
        weight = weight.detach().float()
        # 63 where this CPU's kernel saturates with full-range weights (checked once per process)
        levels = kernel_weight_range() if ONEDNN_INT8 and weight.device.type == "cpu" else FULL_RANGE
        scale = (weight.abs().amax(dim=1) / levels).clamp_min(1e-12)
        weight_int8 = (weight / scale[:, None]).round().clamp(-levels, levels).to(torch.int8)
        bias = bias.detach().float() if bias is not None else weight.new_zeros(weight.shape[0])
        return cls(weight_int8, scale, bias, activation)

    @classmethod
    def concatenated(cls, layers: Sequence[Int8Linear]) -> Int8Linear:
        """One layer computing all of `layers` side by side (one wide matmul, the input quantised once). Exact:
        every output channel keeps its own weight scale."""
        if len({(layer.in_features, layer.activation) for layer in layers}) != 1:
            raise ValueError("only layers with the same input size and activation can be concatenated")
        return cls(*(torch.cat([getattr(layer, name) for layer in layers])
                     for name in ("weight_int8", "weight_scale", "bias")), activation=layers[0].activation)

    def forward(self, x: Tensor) -> Tensor:
        if torch.compiler.is_compiling():
            return self.traced(x)
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        # Outlier channels are large in every row: every OUTLIER_SAMPLE-th row finds them for a fraction of a pass
        # over x (a per-channel reduction over all rows costs a fifth of the int8 matmul)
        few = self._use_few_rows and x.shape[0] <= FEW_ROWS and x.dtype == torch.float32
        if few:
            magnitude = torch.linalg.vector_norm(x, float("inf"), dim=0)  # one operation where rows are few
        else:
            sample = x[::OUTLIER_SAMPLE] if x.shape[0] > 8 * OUTLIER_SAMPLE else x
            magnitude = torch.maximum(sample.amax(0), -sample.amin(0))
        outliers = outlier_channels(magnitude)
        int8 = self._few if few else self._int8
        if outliers is None:
            y = int8(x, None, self.activation)
        else:  # the outlier channels in fp32, the others in int8 with their own range, the activation after the sum
            y = int8(x.index_fill(1, outliers, 0.0), None, "none")
            add_product(y, x.index_select(1, outliers), self._outlier_weights(outliers).to(x.dtype))
            if self.activation == "gelu":
                y = F.gelu(y)
        return y.view(*shape[:-1], self.out_features)

    def traced(self, x: Tensor) -> Tensor:
        """The layer as torch.compile traces it: the TRACED_OUTLIERS input channels of largest |value| always in fp32
        (where forward takes those past OUTLIER_RATIO x the median, up to MAX_OUTLIERS, which needs the count read
        back), the others quantised with one scale and zero point computed in the program. Inputs are not checked
        for non-finite values (that too is a read back): run the model eagerly to find where they arise."""
        shape = x.shape
        x = x.reshape(-1, shape[-1]).float()
        channels = x.abs().amax(0).topk(min(TRACED_OUTLIERS, self.in_features)).indices
        outliers = x.index_select(1, channels)
        x = x.index_fill(1, channels, 0.0)
        lo, hi = x.amin().clamp(max=0.0), x.amax().clamp(min=0.0)
        scale = (hi - lo).clamp(min=1e-8) / 255
        zero_point = (-lo / scale).round().clamp(0, 255)
        q = ((x / scale).round() + zero_point).clamp(0, 255).to(torch.uint8)
        if self._packed is not None:
            y = torch.ops.onednn.qlinear_pointwise.tensor(q, scale, zero_point.to(torch.int32), self._packed,
                                                          self.weight_scale, self._zero_points, self.bias, 1.0, 0,
                                                          torch.float32, "none", [], "")
        else:
            y = self.reference(q, scale, zero_point, activation="none")
        # the transposed copy is a constant of a frozen program (folded once); addmm rather than y + ...: inductor
        # fuses an addition after oneDNN's int8 call into that call, which keeps the product off inductor's own
        # int8 GEMM, the faster of the two at a decoding step's few rows
        weights = self.weight_int8.t().contiguous().index_select(0, channels).float() * self.weight_scale
        y = torch.addmm(y, outliers, weights)
        if self.activation == "gelu":
            y = F.gelu(y)
        return y.view(*shape[:-1], self.out_features)

    def _outlier_weights(self, outliers: Tensor) -> Tensor:
        """The dequantised weights of the outlier input channels, (outliers, out): gathered as rows of a transposed
        copy of the int8 weights (made on first use), since gathering columns of (out, in) reads every row's line:
        for a vocabulary projection most of a decoding step's time."""
        if self._weight_t is None:
            self._weight_t = self.weight_int8.t().contiguous()
        return self._weight_t.index_select(0, outliers).float().mul_(self.weight_scale)

    def _few(self, x: Tensor, value_range: None, activation: str) -> Tensor:
        """FBGEMM's dynamic linear (few rows, fp32): the activations' range, quantisation, int8 product and
        dequantisation in one operation; non-finite inputs are caught by outlier_channels before."""
        if self._few_rows is None:  # packed on first use: a layer that only ever sees many rows keeps one copy
            self._few_rows = _fbgemm_pack(self.weight_int8, self.weight_scale, self.bias)
        y = torch.ops.quantized.linear_dynamic(x, self._few_rows, False)
        return F.gelu(y) if activation == "gelu" else y

    def _int8(self, x: Tensor, value_range: tuple[float, float] | None, activation: str) -> Tensor:
        q, scale, zero_point = quantize_activations(x, value_range)
        if self._packed is not None:
            return torch.ops.onednn.qlinear_pointwise(q, scale, zero_point, self._packed, self.weight_scale,
                                                      self._zero_points, self.bias, 1.0, 0, x.dtype, activation,
                                                      [], "none" if activation == "gelu" else "")
        return self.reference(q, scale, zero_point, activation=activation).to(x.dtype)

    def reference(self, q: Tensor, scale: float | Tensor, zero_point: int | Tensor,
                  dtype: torch.dtype = torch.float32, activation: str | None = None) -> Tensor:
        """What the oneDNN kernel computes, in `dtype` (float64 for a test oracle), with this layer's activation
        or the one given."""
        x = (q.to(dtype) - zero_point) * scale
        y = F.linear(x, self.weight_int8.to(dtype) * self.weight_scale.to(dtype)[:, None], self.bias.to(dtype))
        return F.gelu(y) if (activation or self.activation) == "gelu" else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, activation={self.activation}, " \
               f"onednn={self._packed is not None}, few_rows_fbgemm={self._use_few_rows}, " \
               f"weight_range={int(self.weight_int8.abs().max())}"


# A channel whose largest |value| passes OUTLIER_RATIO times the median channel's is multiplied in fp32. Trained
# models grow a few such channels in the FFN's hidden layer (after GELU: 200 against a median of 0.3 in the 4-layer
# tta-two-hour): one activation scale per matmul then rounds every other channel to a few levels (relative error
# 0.15 in that layer, 0.24 nats a token in the scores), as LLM.int8() found in large models. The few outlier
# channels (the largest MAX_OUTLIERS where more pass the ratio) cost one thin fp32 matmul.
OUTLIER_RATIO = 4.0
MAX_OUTLIERS = 32
OUTLIER_SAMPLE = 4
# Under torch.compile (Int8Linear.traced) this many channels, the largest, are multiplied in fp32 at every call. The
# compiled int8 step's greedy continuations then equal fp32's about as often as the eager int8 path's (gpt-two-hour:
# 154 and 166 of 256; gpt-mini-wiki: 209 and 202), where no channel in fp32 gave 119 and 196, and 8 channels no
# better than 4 (benchmarks/probes/int8_decode_agreement.py, results/probes/int8-decode-agreement/); each channel
# costs time at every call, most in the vocabulary projection.
TRACED_OUTLIERS = 4


# Up to this many outlier channels are added as outer products (Tensor.addr_, one pass over the result each): a
# matmul with an inner dimension of 1 or 2 ran 3-5x slower on a (256 x 29,530) block of int8 scoring's vocabulary
# projection and 1.2-4x slower on the FFN's layers, and from 4 channels it is faster on some of them; T-TA's int8
# one pass went 1.04x as fast (AMD EPYC, 2 cores; benchmarks/probes/outlier_products.py,
# results/probes/outlier-products/).
OUTER_PRODUCTS = 2


def add_product(y: Tensor, inputs: Tensor, weights: Tensor) -> Tensor:
    """y += inputs @ weights in place: (N, k) @ (k, out), k the outlier channels."""
    if inputs.shape[1] > OUTER_PRODUCTS:
        return y.addmm_(inputs, weights)
    for column, row in zip(inputs.t(), weights, strict=True):
        y.addr_(column, row)
    return y


def outlier_channels(magnitude: Tensor) -> Tensor | None:
    """The input channels to compute in fp32, given each channel's largest |value| (None: no outliers)."""
    median, largest = torch.stack((magnitude.median(), magnitude.max())).tolist()  # one read back, not three
    if not math.isfinite(largest):  # a non-finite input (NaN propagates to the max)
        raise ValueError(f"int8: the input of a linear layer holds non-finite values (largest |value| {largest}); "
                         "run in fp32 to see where they arise")
    threshold = OUTLIER_RATIO * median
    if not threshold > 0.0 or largest <= threshold:
        return None
    count = int((magnitude > threshold).sum())
    return magnitude.topk(min(count, MAX_OUTLIERS)).indices  # the largest first where there are more


def concatenated_int8(x: Tensor, layers: Sequence[Int8Linear]) -> Tensor:
    """torch.cat([layer(x) for layer in layers], -1) in one matmul (attention.dense.wide_linear for int8 layers): the
    concatenation is built on first use and kept on the first layer (an int8 model is never modified, so it
    cannot go stale)."""
    cache = layers[0].__dict__.setdefault("_concatenated", {})
    key = tuple(id(layer) for layer in layers)
    if key not in cache:
        cache[key] = Int8Linear.concatenated(layers)
    return cache[key](x)
