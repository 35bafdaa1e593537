"""Running a model in bf16 end to end while its parameters (and so the optimizer, checkpoints and gradient
clipping) stay fp32.

On CPUs with AMX, bf16 matmuls are ~6x faster than fp32, but autocast casts every weight and many
activations at every op and runs LayerNorm/GELU in fp32 around small matmuls, which eats the gain. Here the
parameters are cast to bf16 once per step and the forward runs on those copies with `functional_call`:
activations stay bf16 from the embedding to the loss (whose log-sum-exp is fp32), and autograd casts the
gradients back onto the fp32 parameters through the casts."""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch
from torch import nn
from torch.func import functional_call


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"  # bf16 weights and activations, fp32 master parameters
    bf16_autocast = "bf16-autocast"  # torch.autocast, for comparison
    int8 = "int8"  # inference only, CPU: the encoder's linear layers in int8 (quantize_int8, quant.Int8Linear)

    @property
    def trainable(self) -> bool:
        return self is not Precision.int8

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self is Precision.fp32 else torch.bfloat16


def forward_in(model: nn.Module, precision: Precision | str, *args: Any, **kwargs: Any) -> Any:
    """model(*args, **kwargs) computed in `precision`; gradients reach the model's own parameters."""
    precision = Precision(precision)
    if not precision.trainable:
        raise ValueError(f"precision {precision.value} is for inference only (see quantize_int8)")
    if precision is Precision.fp32:
        return model(*args, **kwargs)
    device = next(model.parameters()).device.type
    if precision is Precision.bf16_autocast:
        with torch.autocast(device, dtype=torch.bfloat16):
            return model(*args, **kwargs)
    params = {name: p.to(torch.bfloat16) for name, p in model.named_parameters()}
    return functional_call(model, params, args=args, kwargs=kwargs, tie_weights=True, strict=False)


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` for int8 inference on CPU: every nn.Linear of its encoder becomes a quant.Int8Linear
    (int8 weights, activations quantised per call, int32 accumulation; the FFN's GELU fused into its first
    matmul). Embeddings, LayerNorms and attention stay fp32 in the copy. The LM head's logits (its forward: what
    generation reads at every step) come from an int8 vocabulary projection, the head's submodule `int8_projection`; its
    log-probabilities and loss stay fp32 (scoring runs the vocabulary projection in bf16 or int8 itself, see
    score.passes.Runner). The original model is untouched."""
    import copy

    from ..nn.feedforward import FeedForward
    from ..nn.heads import LMHead, PlainLMHead
    from .quant import Int8Linear

    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 inference runs on CPU only; on a GPU use bf16")
    quantized = copy.deepcopy(model).float().eval()
    encoder = getattr(quantized, "encoder", quantized)
    for module in list(encoder.modules()):
        if isinstance(module, FeedForward) and isinstance(module.act, nn.GELU) and module.act.approximate == "none":
            module.up, module.act = Int8Linear.from_linear(module.up, activation="gelu"), nn.Identity()
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, Int8Linear.from_linear(child))
    head, embeddings = getattr(quantized, "head", None), getattr(quantized, "embeddings", None)
    if isinstance(head, (LMHead, PlainLMHead)) and embeddings is not None:
        head.int8_projection = Int8Linear.from_weight(head.weight(embeddings.word.weight), head.bias)
    for p in quantized.parameters():
        p.requires_grad_(False)
    return quantized
