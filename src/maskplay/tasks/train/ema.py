"""An exponential moving average of the weights (optim.ema, GPT-BERT's 0.999): after every optimizer step,
e = d e + (1 - d) w for each trained parameter w, starting from the initial weights. It is saved in each
checkpoint (ema.safetensors, so a resumed run continues it exactly) and exported as RUN_DIR/final; the raw
weights are exported next to it as RUN_DIR/final-raw.

With optim.ema_debias the average holds the trained weights only: after t steps it is
sum_i d^(t-i) w_i / sum_i d^(t-i), Adam's bias correction of an average started at zero, made step by step with the
decay d (1 - d^(t-1)) / (1 - d^t) (0 at the first step, d in the limit). Undebiased, the initial weights keep a share
d^t: 7 % after 2,678 steps at 0.999, and nearly all of a short run's average."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

EMA_FILE = "ema.safetensors"


class WeightEma:
    def __init__(self, model: nn.Module, decay: float, debias: bool = False) -> None:
        if not 0 < decay < 1:
            raise ValueError(f"the EMA decay must be in (0, 1), got {decay}")
        self.decay, self.debias = decay, debias
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.shadow = [p.detach().clone() for p in self.params]

    def decay_at(self, steps: int | None) -> float:
        """The decay of the update after `steps` optimizer steps (this one included): d, or debiased, d (1 -
        d^(steps-1)) / (1 - d^steps)."""
        if not self.debias:
            return self.decay
        if steps is None or steps < 1:
            raise ValueError(f"a debiased EMA needs the optimizer steps taken (>= 1), got {steps}")
        return self.decay * (1.0 - self.decay ** (steps - 1)) / (1.0 - self.decay ** steps)

    @torch.no_grad()
    def update(self, steps: int | None = None) -> None:
        """e = d e + (1 - d) w, for every parameter at once; `steps`: the optimizer steps taken, this one included
        (what a debiased average's decay depends on)."""
        d = self.decay_at(steps)
        torch._foreach_mul_(self.shadow, d)
        torch._foreach_add_(self.shadow, self.params, alpha=1.0 - d)

    def state_tensors(self) -> dict[str, Tensor]:
        return dict(zip(self.names, self.shadow, strict=True))

    @torch.no_grad()
    def load(self, tensors: dict[str, Tensor], source: str) -> None:
        missing = sorted(set(self.names) - set(tensors))
        unexpected = sorted(set(tensors) - set(self.names))
        if missing or unexpected:
            raise ValueError(f"{source}: EMA weights differ from the model's: missing {missing}, "
                             f"unexpected {unexpected}")
        for name, e in zip(self.names, self.shadow, strict=True):
            e.copy_(tensors[name])

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The model's parameters hold the averaged weights inside the block and their own outside it."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for p, e in zip(self.params, self.shadow, strict=True):
                p.copy_(e)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, raw, strict=True):
                    p.copy_(r)
