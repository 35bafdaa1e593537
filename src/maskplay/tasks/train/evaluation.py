"""The held-out loss: the mean token loss over fixed held-out batches, the same targets at every evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...data.dataset import TokenDataset
from ...families import MaskplayModel
from ...runtime.precision import Precision
from .batches import eval_batches
from .config import TrainConfig
from .distributed import Dist, all_reduce_sum
from .ema import WeightEma
from .metrics import Metrics
from .stepping import CountTargets, Forward
from .stream import stream_eval_batches


class Evaluator:
    def __init__(self, config: TrainConfig, d: Dist, model: MaskplayModel, precision: Precision,
                 valid_data: TokenDataset | None, micro: int, pad: int, log: Callable[[str], None],
                 forward: Forward, count_targets: CountTargets) -> None:
        self.config, self.d, self.model, self.precision = config, d, model, precision
        self.forward, self.count_targets = forward, count_targets
        self.parts: dict[str, float] = {}  # the family's loss parts at the last evaluation (ModelOutput.parts)
        self.batches = self._batches(valid_data, micro, pad, log)

    def _batches(self, valid_data: TokenDataset | None, micro: int, pad: int,
                 log: Callable[[str], None]) -> list[tuple[int, tuple[Tensor, Tensor]]]:
        """This process's share of the fixed held-out batches, with their global index (which seeds BERT's
        corruption, so every evaluation scores the very same targets)."""
        cfg = self.config
        if valid_data is None or cfg.run.eval_batches == 0:
            log("held-out evaluation is off (" + ("no valid/ split in the data)" if valid_data is None
                                                  else "run.eval_batches = 0)"))
            return []
        if cfg.data.stream:  # micro lanes of the valid split, their first eval_batches segments in order
            batches = stream_eval_batches(valid_data, cfg.run.eval_batches, micro, cfg.data.max_length)
        else:
            batches = eval_batches(valid_data, cfg.run.eval_batches * cfg.data.batch_size, micro,
                                   cfg.data.max_length, pad)
        return [(j, b) for j, b in enumerate(batches) if j % self.d.world_size == self.d.rank]

    def evaluate(self) -> float | None:
        """Mean token loss over the fixed held-out batches (all processes' shares together); a collective."""
        if not self.batches:
            totals = all_reduce_sum(self.d, torch.zeros(2, dtype=torch.float64))
            return None if totals[1] == 0 else float(totals[0] / totals[1])
        self.model.eval()
        loss_sum, count = 0.0, 0
        parts: dict[str, float] = {}
        part_n: dict[str, int] = {}  # the targets of the batches each part was given for
        memory_length, mems = self.config.run.memory_length, None
        with torch.no_grad():
            for j, (ids, mask) in self.batches:
                g = torch.Generator().manual_seed(self.config.data.seed * 7919 + j)
                batch: dict[str, Any] = {k: v.to(self.d.device)
                                         for k, v in self.model.training_batch(ids, mask, generator=g).items()}
                n = self.count_targets(self.model, batch)
                if memory_length:  # evaluation with memory: each lane's segments in order, as training reads them
                    batch.update(mems=mems, memory_length=memory_length)
                if n:
                    out = self.forward(self.model, self.precision, **batch)
                    mems = out.mems if memory_length else None
                    loss_sum += float(out.loss.float()) * n
                    count += n
                    for key, value in (out.parts or {}).items():
                        if not math.isnan(value := float(value.detach())):  # nan: no targets of this part here
                            parts[key] = parts.get(key, 0.0) + value * n
                            part_n[key] = part_n.get(key, 0) + n
        self.model.train()
        # the loss parts are this process's (rank 0 reports them); the loss itself is summed over all
        self.parts = {f"eval_{k}": v / part_n[k] for k, v in parts.items()}
        totals = all_reduce_sum(self.d, torch.tensor([loss_sum, count], dtype=torch.float64))
        return None if totals[1] == 0 else float(totals[0] / totals[1])

    def report(self, step: int, elapsed_s: float, metrics: Metrics | None, log: Callable[[str], None],
               ema: WeightEma | None = None) -> float | None:
        """The held-out loss, recorded with its parts into metrics.jsonl and logged (main process); with `ema`, the
        loss of the weights' moving average instead, recorded as ema_eval_loss. A collective, as evaluate() is."""
        if ema is None:
            loss, key, what, parts = self.evaluate(), "eval_loss", "held-out loss", self.parts
        else:
            with ema.applied():
                loss = self.evaluate()
            key, what, parts = "ema_eval_loss", "held-out loss of the weights' moving average", {}
        if metrics and loss is not None:
            metrics.record(step=step, **{key: loss}, elapsed_s=elapsed_s, **parts)
            log(f"step {step}: {what} {loss:.4f}")
        return loss
