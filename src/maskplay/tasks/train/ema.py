"""An exponential moving average of the weights (optim.ema, GPT-BERT's 0.999): after every optimizer step,
e = d e + (1 - d) w for each trained parameter w, starting from the initial weights. It is saved in each
checkpoint (ema.safetensors, so a resumed run continues it exactly) and exported as RUN_DIR/final; the raw
weights are exported next to it as RUN_DIR/final-raw."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

EMA_FILE = "ema.safetensors"


class WeightEma:
    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0 < decay < 1:
            raise ValueError(f"the EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        """e = d e + (1 - d) w, for every parameter at once."""
        torch._foreach_mul_(self.shadow, self.decay)
        torch._foreach_add_(self.shadow, self.params, alpha=1.0 - self.decay)

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
