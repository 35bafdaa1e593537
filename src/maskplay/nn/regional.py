"""Regional compilation (run.compile_scope = "layers"): every block of every backbone.Encoder runs through one
torch.compile'd function per block method (the whole block, or DenseFormer's two sub-layers apart), the block itself an
argument. The blocks of a model have one structure, so the code compiled for the first one passes every later one's
guards and is reused: compiling costs one block, not num_layers unrolled ones (PyTorch's recipe "reduce cold-start
compile time with regional compilation"). What lies between the blocks (embeddings, masks, DenseFormer's weighted
sums, the head and the loss) runs eagerly.

A block reads its own entries of the pass's inputs by its layer index (T-TA's keys/values projected for it); an int
argument would be specialised on, one compile per layer (and past torch._dynamo.config.recompile_limit, 8, the rest
would run eagerly). So the blocks are handed inputs cut to their own entry (`for_layer`) and index 0."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from .attention.inputs import PassInputs


def _forward(layer: nn.Module, h: Tensor, inputs: PassInputs) -> Tensor:
    return layer(h, inputs, 0)


def _attend(layer: nn.Module, h: Tensor, inputs: PassInputs) -> Tensor:
    return layer.attend(h, inputs, 0)


def _feed_forward(layer: nn.Module, h: Tensor) -> Tensor:
    return layer.feed_forward(h)


@functools.cache
def compiled_parts(backend: str = "inductor") -> dict[str, Callable[..., Tensor]]:
    """The compiled block methods, made once per process and backend: dynamo keeps its compiled code on each
    function's code object, shared by every model and layer that passes its guards."""
    return {name: torch.compile(fn, backend=backend)
            for name, fn in (("forward", _forward), ("attend", _attend), ("feed_forward", _feed_forward))}


def for_layer(inputs: PassInputs, index: int) -> PassInputs:
    """The pass's inputs as layer `index` reads them, re-indexed so that it is layer 0: its own projected
    keys/values only."""
    if inputs.keys_values is None:
        return inputs
    return dataclasses.replace(inputs, keys_values=(inputs.keys_values[index],))


def encoders(model: nn.Module) -> list[nn.Module]:
    """The backbone.Encoder modules of `model` (those with a `regional` switch). Raises ValueError for a model whose
    blocks would not all run through them (a two-stream family runs its own layer loop; reversible layers)."""
    found = [m for m in model.modules() if hasattr(m, "regional")]
    if not found or any(e.reversible for e in found) or getattr(model, "two_streams", False):
        raise ValueError("run.compile_scope = 'layers' compiles backbone.Encoder's blocks, which this model does not "
                         "run one by one (its family's own layer loop, or reversible layers): use 'step'")
    return found


@contextlib.contextmanager
def compiled_blocks(model: nn.Module, backend: str = "inductor") -> Iterator[None]:
    """Within the block, `model`'s encoders run their blocks through compiled_parts(backend) (where a pass has no
    key/value cache); outside it, as they were. ("eager": dynamo alone, what tests count frames with.)"""
    found = encoders(model)
    before = [e.regional for e in found]
    for e in found:
        e.regional = backend
    try:
        yield
    finally:
        for e, was in zip(found, before, strict=True):
            e.regional = was
