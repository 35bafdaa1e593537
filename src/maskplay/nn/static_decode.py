"""Fast decoding: the one-token step of a family's `step` hook over a cache.StaticKVCache, compiled once
(torch.compile, on the CPU) or captured once as a CUDA graph (on a GPU), then replayed for every token.

Decoding a small model is bound by overhead, not arithmetic: at batch 1 the mini GPT's step is ~14 MFLOP, well
under a millisecond of one core, while eager PyTorch spends milliseconds dispatching a few hundred small operations
and building masks. With every shape and address fixed (the static cache), the step becomes one compiled
program (or one graph launch); the prompt still runs through the family's own `prefill`, whose cache is copied in.

An int8 copy (runtime.precision.quantize_int8) compiles too: under torch.compile its layers take the form
runtime.quant.Int8Linear.traced, with nothing read back to the host.

A step is kept per model, batch size, capacity, dtype and device (capacities rounded up to a multiple of
CAPACITY_STEP, so that prompts of nearby lengths share one compiled step), and reused across generate() calls
while the weights stay as they were: its first call pays the compilation (seconds on a CPU) or the capture
(milliseconds)."""

from __future__ import annotations

import types
import weakref
from typing import Any

import torch
from torch import Tensor

from .cache import KVCache, StaticKVCache

CAPACITY_STEP = 64
# A decoding step's matmuls have one row per sequence, where a library call's fixed cost is most of the work:
# inductor's own C++ GEMM kernels, generated for these shapes and frozen weights, took the mini GPT's compiled greedy
# step in bf16 from 964 to 1,619 tokens/s at batch 1 and 4,970 to 5,409 at batch 8 (AMD EPYC, 2 cores;
# docs/results/generation-speed.md), for about a second more of compiling. Autotuning times both kernels for each
# matmul and keeps the faster, so a CPU where oneDNN's call wins keeps it.
GEMM_AUTOTUNE = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "CPP,ATEN"}
# A step is a few dozen kernel calls of microseconds each, which inductor's Python wrapper calls one by one, checking
# each library call's output shape and alignment. Its C++ wrapper makes the same calls from compiled code: the mini
# GPT's step 1.07-1.16x as fast in bf16 and fp32 at batch 1 and 8 (AMD EPYC, 2 cores), for 2-8 s more of compiling
# (benchmarks/probes/cpp_wrapper_step.py, results/probes/cpp-wrapper-step/).
CPP_WRAPPER = {"cpp_wrapper": True}
_FUNCTIONS = 0  # step functions made so far (_own_step_function)
_STEPS: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()  # model -> its steps


def _run_step(model: Any, cache: StaticKVCache, tokens: Tensor, alive: Tensor) -> Tensor:
    return model.step(tokens, cache, alive)


def _run_greedy_step(model: Any, cache: StaticKVCache, tokens: Tensor, alive: Tensor) -> tuple[Tensor, Tensor]:
    """The step and its greedy choice: each row's most likely token (the first of equals, as argmax) and that
    token's log-probability. Compiled with the step, the cast to fp32 and the reductions run in the step's program,
    where eager PyTorch makes a pass over the logits for each: 1.09x the tokens/s at batch 1 and 1.11x at batch 8 for
    the mini GPT in bf16 (benchmarks/probes/greedy_in_step.py, results/probes/greedy-in-step/). The argmax is the
    lowest index holding the maximum, a min reduction that inductor vectorises where it does not vectorise an argmax.
    A NaN row gives the last token."""
    scores = model.step(tokens, cache, alive).float()
    best = scores.amax(-1, keepdim=True)
    index = torch.arange(scores.shape[-1], device=scores.device)
    chosen = torch.where(scores == best, index, scores.shape[-1] - 1).amin(-1)
    return chosen, -(scores - best).exp().sum(-1).log()


def _own_step_function(function: Any) -> Any:
    """`function` under a code object of its own: torch.compile keeps its compiled entries per code object, so a
    StaticStep's compiled program (its shapes, its frozen weights) is then the only entry its calls can meet."""
    global _FUNCTIONS
    _FUNCTIONS += 1
    code = function.__code__.replace(co_name=f"{function.__name__}_{_FUNCTIONS}")
    return types.FunctionType(code, function.__globals__, code.co_name)


class StaticStep:
    """One model's decode step over its own StaticKVCache (batch_size x capacity columns); see the module doc.
    `load(cache)` takes a prefilled KVCache; each call takes the chosen tokens and alive rows (B,) and returns
    the next logits (B, V), a fresh tensor, or with `greedy` (on a CPU) the greedy choice instead: the tokens (B,)
    and their log-probabilities (B,) (_run_greedy_step)."""

    def __init__(self, model: Any, batch_size: int, capacity: int, device: torch.device,
                 greedy: bool = False) -> None:
        self.model = model
        self.cache = StaticKVCache(model.config.num_layers, batch_size, capacity, device)
        self.tokens = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.alive = torch.ones(batch_size, 1, dtype=torch.bool, device=device)
        self.cuda = device.type == "cuda"
        self.greedy = greedy and not self.cuda  # a CUDA graph replays the step alone
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None
        self.compiled = None
        self.calls = 0
        if not self.cuda:
            self.compiled = torch.compile(_own_step_function(_run_greedy_step if self.greedy else _run_step),
                                          dynamic=False)

    def load(self, cache: KVCache) -> None:
        self.cache.load(cache)

    def __call__(self, tokens: Tensor, alive: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        self.tokens.copy_(tokens[:, None])
        self.alive.copy_(alive[:, None])
        if not self.cuda:
            self.calls += 1
            if self.calls == 1:  # compiles, its guards checked
                # freezing: the weights become constants of the compiled program, prepacked for the CPU's matmul
                # kernels (2.0x the unfrozen step's tokens/s at batch 1 on the mini GPT in bf16); static_step makes
                # a new step when they change. Set in inductor's config while Dynamo traces: compile(options=...)
                # reaches inductor only after Dynamo has lifted the weights to graph inputs, leaving nothing to freeze.
                # GEMM_AUTOTUNE: each matmul timed as oneDNN's call and as inductor's own C++ kernel, the faster kept;
                # CPP_WRAPPER: the step's calls made from compiled code
                import torch._inductor.config as inductor_config

                with inductor_config.patch(freezing=True, **GEMM_AUTOTUNE, **CPP_WRAPPER):
                    return self.compiled(self.model, self.cache, self.tokens, self.alive)
            # the guards of a compiled step check every weight and cache tensor (~0.7 ms a token on a CPU). Here the
            # function is this step's own (_own_step_function) and its inputs the same objects at every call, so
            # its one compiled entry is the right one: the guards are skipped
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self.compiled(self.model, self.cache, self.tokens, self.alive)
        if self.graph is None:
            self._capture()
        self.graph.replay()
        return self.logits.clone()

    def _capture(self) -> None:
        """Warm up on a side stream (as CUDA graphs need), put the cache back as it was, then capture one step:
        capturing records the kernels without running them."""
        c = self.cache
        state = (c.cursor, c.next_position, c.key_mask, c.key_positions)  # what a warm-up step writes
        saved = [x.clone() for x in state]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                _run_step(self.model, c, self.tokens, self.alive)
        torch.cuda.current_stream().wait_stream(stream)
        for x, old in zip(state, saved, strict=True):
            x.copy_(old)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = _run_step(self.model, c, self.tokens, self.alive)


def weights_version(model: Any) -> int:
    """Changes whenever a weight is written in place (an optimizer step, load_state_dict) or replaced."""
    return hash(tuple((id(p), p._version) for p in model.parameters()))


def static_step(model: Any, batch_size: int, columns: int, device: torch.device, dtype: torch.dtype,
                greedy: bool = False) -> StaticStep:
    """The model's StaticStep for `batch_size` rows and at least `columns` cache columns, returning the greedy
    choice where `greedy` (made on first use; all made anew once the model's weights have changed, since a compiled
    step holds them as constants)."""
    capacity = -(-columns // CAPACITY_STEP) * CAPACITY_STEP
    version = weights_version(model)
    steps = _STEPS.get(model)
    if steps is None or steps.get("version") != version:
        steps = _STEPS[model] = {"version": version}
    key = (batch_size, capacity, device, dtype, greedy)
    if key not in steps:
        steps[key] = StaticStep(model, batch_size, capacity, device, greedy)
    return steps[key]
