"""One optimizer step: forward and backward of every micro-batch in the run's precision (gradient accumulation,
DDP synchronising only on the last one), the all-reduce that makes the gradient that of the global batch's mean
token loss, clipping, and the update."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...config import ModelConfig
from ...families import MaskplayModel
from ...nn.attention.long_attention import clamp_spans, span_penalty
from ...nn.modeling import IGNORE_INDEX
from ...nn.outputs import labelled_rows_known, rows_of
from ...nn.regional import NESTED, check_nested, compiled_blocks, encoders
from ...runtime.precision import Precision
from .config import TrainConfig
from .distributed import Dist, all_reduce_sum
from .ema import WeightEma
from .metrics import Window
from .schedule import learning_rate
from .stream import SegmentMemory

# the loop's own forward_in and count_targets are passed in, so that what a test patches there is what runs
Forward = Callable[..., Any]
CountTargets = Callable[[MaskplayModel, dict[str, Tensor]], int]


_ROWS = "labelled rows"  # sent with a batch's tensors, not a forward argument


def pins(config: TrainConfig, device: torch.device) -> bool:
    """Whether micro-batches go to the device through page-locked memory: data.pin_memory, on a CUDA device."""
    return config.data.pin_memory and device.type == "cuda"


def to_device(batch: dict[str, Any], device: torch.device, pin: bool) -> dict[str, Any]:
    """The family's batch (CPU tensors) on `device`; with `pin`, copied from page-locked memory, which runs
    asynchronously, so that the CPU prepares the next micro-batch while the GPU still computes this one (from
    pageable memory the copy first waits for every kernel queued before it)."""
    return {k: (v.pin_memory() if pin and v.device.type == "cpu" else v).to(device, non_blocking=True)
            for k, v in batch.items()}


def compile_forward(forward: Forward, model: torch.nn.Module, scope: str, backend: str = "inductor") -> Forward:
    """run.compile's forward (run.compile_scope): `forward` compiled whole ("step"), compiled whole with every block of
    `model` a nested region traced once ("nested"), or run eagerly with every block through one compiled code
    ("layers"; nn/regional.py; both raise ValueError for a model whose blocks they cannot serve).
    `backend`: torch.compile's (tests trace with "aot_eager", dynamo's graphs without inductor's code)."""
    if scope in ("step", "nested"):
        compiled = torch.compile(forward, backend=backend)
        regions = contextlib.nullcontext
        if scope == "nested":  # the same graph, each block in it a region traced and compiled once for every layer
            check_nested(model)  # before the first step
            regions = functools.partial(compiled_blocks, model, NESTED)

        def whole(*args: Any, **kwargs: Any) -> Any:
            # the loss's labelled positions (nn/outputs.Targets: a nonzero, as many as BERT's masking chose) traced
            # with a size known only at run time, instead of a graph break there and a recompile for every count
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), regions():
                return compiled(*args, **kwargs)

        return whole
    encoders(model)  # the check, before the first step

    def regional(*args: Any, **kwargs: Any) -> Any:
        with compiled_blocks(model, backend):
            return forward(*args, **kwargs)

    return regional


class NonFinite(Exception):
    """The loss or the gradient of step index `step` (number step + 1) is nan or inf: raised before the optimizer
    steps, or, with run.check_every_step = false, when the step is read (Stepper.settle)."""

    def __init__(self, step: int, what: str) -> None:
        super().__init__(what)
        self.step = step


@dataclass
class StepOutcome:
    lr: float
    loss: float  # the global batch's summed token loss (all processes)
    targets: float  # and its target count
    tokens: float
    words: float  # the global batch's source words (data/words.py; 0 for data without word counts)
    grad_norm: float
    signal: bool  # some process received SIGINT / SIGTERM
    budget: bool  # some process ran out of run.max_minutes


class Stepper:
    def __init__(self, config: TrainConfig, d: Dist, model: MaskplayModel, model_config: ModelConfig,
                 optimizer: torch.optim.Optimizer, generator: torch.Generator, precision: Precision,
                 forward: Forward, count_targets: CountTargets, ema: WeightEma | None = None,
                 memory: SegmentMemory | None = None) -> None:
        self.config, self.d = config, d
        self.memory = memory  # run.memory_length: Transformer-XL's memory, carried per micro-batch (stream.py)
        self.ema = ema  # optim.ema: the weights' moving average, updated after every optimizer step
        self.model, self.model_config = model, model_config
        self.optimizer, self.generator, self.precision = optimizer, generator, precision
        self.forward, self.count_targets = forward, count_targets
        self.pin = pins(config, d.device)
        self.ready: Ready | None = None  # the next step's micro-batches, made ahead (prepare_ahead)
        self.unread: list[Unread] = []  # steps whose loss and norm are still on the device (run.check_every_step)
        self.ddp = None
        if d.enabled:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp = DistributedDataParallel(model, device_ids=[d.device] if d.device.type == "cuda" else None)
        # run.compile: the forward in the run's precision, compiled once (and again for new shapes); its backward
        # is compiled with it. The model itself stays uncompiled, so its weights, batches and saving are unchanged
        self.compiled = (compile_forward(functools.partial(forward, self.ddp or model, precision), model,
                                         config.run.compile_scope) if config.run.compile else None)

    def step(self, step: int, next_batches: Callable[[], list[tuple[Tensor, Tensor]]],
             stop_flags: Callable[[], list[float]], window: Window,
             batches_ahead: Callable[[], list[tuple[Tensor, Tensor]]] | None = None) -> StepOutcome:
        """Optimizer step number step + 1 on this process's micro-batches of the global batch; stop_flags are
        read once the micro-batches are done and all-reduced with the loss, so every process decides alike.

        On one process the host reads the device once a step, after clipping: every micro-batch's loss and loss
        parts and the gradient norm together (on a GPU each read waits for every kernel queued before it, and the
        device then idles while the host queues the next; reading each micro-batch's loss, and the norm apart, cost
        a step two or more such waits). Under DDP the global target count, which scales the gradient, is read
        first, with the losses.

        batches_ahead (data.prepare_ahead): the next step's micro-batches, fetched before that read, so that their
        family batches are made and sent while the device still computes this step (prepare_ahead); the step that
        is given them by next_batches uses what was made.

        With run.check_every_step = false (one process), the step's loss, parts and norm stay on the device, unread
        (the outcome's loss and grad_norm are nan), until the loop asks for them (settle): the host then never waits
        for the device between steps. Each step is added to `window` when it is read, in either case."""
        cfg, d = self.config, self.d
        lr = learning_rate(step, cfg.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        micro_batches = next_batches()
        ready = self._take_ready(micro_batches)
        self.model.set_training_progress(step / cfg.optim.max_steps)  # as prepare sets it: what follows the step reads it
        outs: list[MicroOut] = []
        n_targets, n_tokens = 0, 0
        for m, (ids, mask) in enumerate(micro_batches):
            made = ready[m] if ready is not None else self.prepare(step, ids, mask)
            outs.append(self.micro_step(step, made, sync=m == len(micro_batches) - 1, micro=m))
            n_targets += outs[-1].n
            n_tokens += int(mask.sum())  # the host's mask: no read of the device
        n_words = getattr(micro_batches, "words", 0)  # batches.MicroBatches
        if batches_ahead is not None:
            self.prepare_ahead(step + 1, batches_ahead())
        flags = stop_flags()
        if d.enabled:
            losses = read_back(unread(outs))
            loss_sum = add_micro_parts(outs, losses, window)
            totals = all_reduce_sum(
                d, torch.tensor([loss_sum, n_targets, n_tokens, n_words, *flags], dtype=torch.float64)).tolist()
            g_loss, g_targets, g_tokens, g_words, g_signal, g_budget = totals
            check_targets(step, g_targets)
            check_loss(step, g_loss)
            grad_norm = check_norm(step, read_back([self._scaled_clipped_gradient(g_targets)])[0])
            window.add_step(g_loss, g_targets, g_tokens)
        else:
            g_targets, g_tokens, g_words, (g_signal, g_budget) = n_targets, n_tokens, n_words, flags
            check_targets(step, g_targets)
            self.unread.append(Unread(step, outs, self._scaled_clipped_gradient(g_targets), g_targets, g_tokens))
            g_loss, grad_norm = self.settle(window) if cfg.run.check_every_step else (math.nan, math.nan)
        self.optimizer.step()
        if self.model_config.long.adaptive_span:
            clamp_spans(self.model)  # spans back into [0, max_span]
        if self.ema is not None:
            self.ema.update(step + 1)
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutcome(lr=lr, loss=g_loss, targets=float(g_targets), tokens=float(g_tokens),
                           words=float(g_words), grad_norm=grad_norm, signal=bool(g_signal), budget=bool(g_budget))

    def settle(self, window: Window) -> tuple[float, float]:
        """Reads the steps not yet read (run.check_every_step = false) in one read of the device, adds each to
        `window` in step order and returns the last one's summed loss and gradient norm; raises NonFinite for the
        first step whose loss or norm is nan or inf. (nan, nan) when every step has been read."""
        steps, self.unread = self.unread, []
        if not steps:
            return math.nan, math.nan
        tensors = [unread(u.outs) for u in steps]
        values = iter(read_back([t for u, ts in zip(steps, tensors, strict=True) for t in (*ts, u.norm)]))
        loss = norm = math.nan
        for u, ts in zip(steps, tensors, strict=True):
            loss = check_loss(u.step, add_micro_parts(u.outs, [next(values) for _ in ts], window))
            norm = check_norm(u.step, next(values))
            window.add_step(loss, u.targets, u.tokens)
        return loss, norm

    def _scaled_clipped_gradient(self, g_targets: float) -> Tensor:
        """The gradient made that of the mean token loss, clipped; its norm before clipping, on the device."""
        # DDP averaged the per-process sums over world_size processes; undo that and divide by the count
        scale = self.d.world_size / g_targets
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, scale)
        clip = self.config.optim.clip
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else math.inf)

    def prepare(self, step: int, ids: Tensor, mask: Tensor) -> Prepared:
        """One micro-batch of step number step + 1 made ready for its forward: the family's batch, made on the host
        (its masking draws from the run's generator) and sent to the device."""
        self.model.set_training_progress(step / self.config.optim.max_steps)  # an objective that changes over training
        batch: dict[str, Any] = self.model.training_batch(ids, mask, generator=self.generator)  # device-independent
        n = self.count_targets(self.model, batch)  # on the host's copy: read from a GPU's, a synchronisation
        known = self.model.known_from_host(batch)  # the same: what the forward need not read back (padding, modes)
        labels = batch.get("labels")  # and the labelled positions, sent with the batch (nn/outputs.Targets)
        rows = rows_of(self.model.loss_labels(labels) != IGNORE_INDEX) if isinstance(labels, Tensor) else None
        sent = to_device({**batch, _ROWS: rows} if rows is not None else batch, self.d.device, self.pin)
        return Prepared(sent, n, known, sent.pop(_ROWS, None))

    def prepare_ahead(self, step: int, micro_batches: list[tuple[Tensor, Tensor]]) -> None:
        """Step number step + 1's micro-batches made now (prepare), while the device still computes the step before;
        afterwards the generator and the model's training progress are put back as they were, so that between
        steps everything (a checkpoint, an evaluation) is as without the lookahead, and the step that uses what was
        made moves the generator on to where making it left it (_take_ready)."""
        before = self.generator.get_state()
        made = [self.prepare(step, ids, mask) for ids, mask in micro_batches]
        self.ready = Ready(micro_batches, made, self.generator.get_state())
        self.generator.set_state(before)
        self.model.set_training_progress((step - 1) / self.config.optim.max_steps)  # the step still on the device

    def _take_ready(self, micro_batches: list[tuple[Tensor, Tensor]]) -> list[Prepared] | None:
        ready, self.ready = self.ready, None
        if ready is None or ready.source is not micro_batches:
            return None
        self.generator.set_state(ready.generator_after)
        return ready.made

    def micro_step(self, step: int, made: Prepared, sync: bool, micro: int = 0) -> MicroOut:
        """Forward and backward one micro-batch's summed token loss; returns it, the target count and the
        family's loss parts (ModelOutput.parts, means over the targets), the tensors still on the device, unread.
        With memory, the micro-batch reads the memory its predecessor at index `micro` left and leaves its own."""
        batch, n, known = dict(made.batch), made.n, made.known
        rows_known = labelled_rows_known(made.batch.get("labels"), made.rows)
        if self.memory is not None:
            batch.update(mems=self.memory.get(micro), memory_length=self.memory.length)
        module = self.ddp if self.ddp is not None else self.model
        no_sync = self.ddp.no_sync() if self.ddp is not None and not sync else contextlib.nullcontext()
        if n == 0:
            # nothing to learn from (only special tokens); skipping is exact, except where DDP expects this
            # process's backward to start the gradient all-reduce
            if self.ddp is not None and sync:
                raise ValueError(f"step {step}: the last micro-batch of process {self.d.rank} has no target "
                                 "tokens (its sequences hold only special tokens); drop such sequences from the "
                                 "data")
            return MicroOut(None, 0, {})
        with no_sync, known, rows_known:
            out = (self.compiled(**batch) if self.compiled is not None
                   else self.forward(module, self.precision, **batch))
            if self.memory is not None:
                self.memory.put(micro, out.mems)
            total = out.loss.float() * n  # the family's loss is the mean over its n targets: n * mean is their sum
            if self.model_config.long.adaptive_span:  # + adaptive span's L1 term (attention/long_attention.py)
                (total + span_penalty(self.model) * n).backward()
            else:
                total.backward()
        return MicroOut(total.detach(), n, {k: v.detach() for k, v in (out.parts or {}).items()})


@dataclass
class Prepared:
    """A micro-batch ready for its forward: the family's batch on the device, its target count (from the host's
    copy), the context that tells the forward what the host's copy says (MaskplayModel.known_from_host), and the
    labelled positions of its loss's labels found there, on the device (nn/outputs.labelled_rows_known)."""

    batch: dict[str, Any]
    n: int
    known: contextlib.AbstractContextManager
    rows: Tensor | None


@dataclass
class Ready:
    """The next step's micro-batches as fetched (`source`, the very list its step is given), made (prepare), and
    the generator's state after making them."""

    source: list[tuple[Tensor, Tensor]]
    made: list[Prepared]
    generator_after: Tensor


@dataclass
class Unread:
    """A step (index `step`) whose micro-batches' losses and parts and gradient norm are still on the device, with
    its target and token counts (the host's)."""

    step: int
    outs: list[MicroOut]
    norm: Tensor
    targets: float
    tokens: float


@dataclass
class MicroOut:
    """One micro-batch's summed token loss (None when it had no targets), its target count, and the family's loss
    parts (means over its targets), as tensors: read by the step, all at once."""

    total: Tensor | None
    n: int
    parts: dict[str, Tensor]


def unread(outs: list[MicroOut]) -> list[Tensor]:
    """The micro-batches' losses, then their parts, in order: what add_micro_parts reads the values of."""
    return [o.total for o in outs if o.total is not None] + [v for o in outs for v in o.parts.values()]


def read_back(tensors: list[Tensor]) -> list[float]:
    """The tensors' values on the host, in one read of the device (float64 holds every float32 or bfloat16 value
    exactly, so each is the float(tensor) it replaces)."""
    if not tensors:
        return []
    return torch.stack([t.reshape(()).to(torch.float64) for t in tensors]).tolist()


def add_micro_parts(outs: list[MicroOut], values: list[float], window: Window) -> float:
    """Gives the window each micro-batch's target count and parts (each part times the count) from the values
    read back (the micro-batches' losses, then their parts, in order), and returns the losses' sum, added in
    micro-batch order."""
    count = sum(o.total is not None for o in outs)
    losses, rest = iter(values[:count]), iter(values[count:])
    loss_sum = 0.0
    for o in outs:
        if o.total is not None:
            loss_sum += next(losses)
        window.add_micro(o.n, {k: next(rest) * o.n for k in o.parts})
    return loss_sum


def check_targets(step: int, g_targets: float) -> None:
    if g_targets == 0:
        raise ValueError(f"step {step}: the global batch has no target tokens")


def check_loss(step: int, g_loss: float) -> float:
    if not math.isfinite(g_loss):
        raise NonFinite(step, f"the training loss is {g_loss}")
    return g_loss


def check_norm(step: int, grad_norm: float) -> float:
    if not math.isfinite(grad_norm):  # a finite loss whose gradient overflowed
        raise NonFinite(step, f"the gradient norm is {grad_norm}")
    return grad_norm
