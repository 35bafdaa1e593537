"""Regional compilation (run.compile_scope = "layers"): every block of every backbone.Encoder runs through one
torch.compile'd function per block method (the whole block, or DenseFormer's two sub-layers apart), the block itself an
argument. The blocks of a model have one structure, so the code compiled for the first one passes every later one's
guards and is reused: compiling costs one block, not num_layers unrolled ones (PyTorch's recipe "reduce cold-start
compile time with regional compilation"). What lies between the blocks (embeddings, masks, DenseFormer's weighted
sums, the head and the loss) runs eagerly.

A block reads its own entries of the pass's inputs by its layer index (T-TA's keys/values projected for it); an int
argument would be specialised on, one compile per layer (and past torch._dynamo.config.recompile_limit, 8, the rest
would run eagerly). So the blocks are handed inputs cut to their own entry (`for_layer`) and index 0.

run.compile_scope = "nested": the whole step compiled as one graph, as "step" does, with every block a nested compile
region (torch.compiler.nested_compile_region): dynamo traces a block once and stamps that subgraph out for every later
layer, and inductor compiles it once, so the compile costs about one block's tracing and lowering plus what lies
between the blocks, which stays in the graph. A region reuses its subgraph only when every input is a tensor or a
constant, so the pass's inputs (a dataclass of tensors) go in flattened (`_flatten`), their structure a constant."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from .attention.inputs import PassInputs
from .attention.long_attention import BandedMask
from .positions import Frame, PassPositions, RelativeTable, Rotary


def _forward(layer: nn.Module, h: Tensor, inputs: PassInputs) -> Tensor:
    return layer(h, inputs, 0)


def _attend(layer: nn.Module, h: Tensor, inputs: PassInputs) -> Tensor:
    return layer.attend(h, inputs, 0)


def _feed_forward(layer: nn.Module, h: Tensor) -> Tensor:
    return layer.feed_forward(h)


NESTED = "nested"  # Encoder.regional's value under run.compile_scope = "nested": regions, not compiled functions


# the dataclasses a block's inputs are made of, by name: what _flatten walks and _unflatten builds again
_KINDS = {cls.__name__: cls for cls in (PassInputs, PassPositions, RelativeTable, Rotary, Frame, BandedMask)}


def _flatten(obj: object, leaves: list[Tensor]) -> object:
    """obj's structure as nested tuples of strings and constants, its tensors appended to `leaves`: the pass's
    dataclasses (_KINDS), tuples and lists are walked; None, numbers and strings are constants of the structure."""
    if isinstance(obj, Tensor):
        # a region's inputs may not alias each other (T-TA's per-layer keys and values are views of one projection):
        # a view goes in as its own copy
        leaves.append(obj if obj._base is None else obj.clone())
        return "tensor"
    # classes compared, not type(obj).__name__ or dataclasses.is_dataclass read: torch 2.11's dynamo (the GPU
    # machine's) traces neither (a graph break at every block)
    for name, kind in _KINDS.items():
        if type(obj) is kind:
            return (name, tuple((f.name, _flatten(getattr(obj, f.name), leaves)) for f in dataclasses.fields(obj)))
    if isinstance(obj, (tuple, list)):
        return ("tuple" if isinstance(obj, tuple) else "list", tuple(_flatten(x, leaves) for x in obj))
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return ("constant", obj)
    raise ValueError(f"run.compile_scope = 'nested' passes a block's inputs as tensors and constants, not a "
                     f"{type(obj).__name__}: use 'step'")


def _unflatten(spec: object, leaves: Iterator[Tensor]) -> object:
    if spec == "tensor":
        return next(leaves)
    kind, body = spec  # type: ignore[misc]
    if kind == "constant":
        return body
    if kind in _KINDS:
        return _KINDS[kind](**{name: _unflatten(part, leaves) for name, part in body})
    return {"tuple": tuple, "list": list}[kind](_unflatten(part, leaves) for part in body)


def _nested(method: str) -> Callable[..., Tensor]:
    """layer.<method>(h, inputs, 0) as a nested compile region over the inputs' tensors, their structure a constant
    argument (so that the region's later calls reuse its subgraph); "feed_forward" takes h alone."""
    if method == "feed_forward":
        return torch.compiler.nested_compile_region(_feed_forward)

    @torch.compiler.nested_compile_region
    def region(layer: nn.Module, h: Tensor, spec: tuple, *leaves: Tensor) -> Tensor:
        inputs = _unflatten(spec, iter(leaves))
        return layer(h, inputs, 0) if method == "forward" else layer.attend(h, inputs, 0)

    def call(layer: nn.Module, h: Tensor, inputs: PassInputs) -> Tensor:
        leaves: list[Tensor] = []
        spec = _flatten(inputs, leaves)
        return region(layer, h, spec, *leaves)

    return call


# made at import: a region made while dynamo traces the step would be a graph break (nested_compile_region is not
# traced); none in a torch without them (before 2.8), where the nested scope is refused (check_nested)
_NESTED_PARTS = ({name: _nested(name) for name in ("forward", "attend", "feed_forward")}
                 if hasattr(torch.compiler, "nested_compile_region") else None)


def check_nested(model: nn.Module) -> None:
    """Raises ValueError where run.compile_scope = "nested" cannot serve `model` (encoders' check) or this torch has
    no nested compile regions."""
    encoders(model)
    if _NESTED_PARTS is None:
        raise ValueError(f"run.compile_scope = 'nested' needs torch.compiler.nested_compile_region (torch >= 2.8; "
                         f"this is {torch.__version__}): use 'step'")


def compiled_parts(backend: str = "inductor") -> dict[str, Callable[..., Tensor]]:
    """The compiled block methods, made once per process and backend: dynamo keeps its compiled code on each
    function's code object, shared by every model and layer that passes its guards. NESTED: the nested regions,
    returned without the cache, since dynamo traces this call inside the nested scope's step and warns at a cached
    function's every call."""
    if backend == NESTED:
        return _NESTED_PARTS
    return _compiled_functions(backend)


@functools.cache
def _compiled_functions(backend: str) -> dict[str, Callable[..., Tensor]]:
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
        raise ValueError("run.compile_scope = 'layers' (or 'nested') compiles backbone.Encoder's blocks, which this "
                         "model does not run one by one (its family's own layer loop, or reversible layers): use 'step'")
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
