"""The distillation loss and the module the training loop runs.

At each target position n (a piece of the sequence) the teacher's PLL distribution is kept as its top-k ids and
their log-probabilities l_n (full softmax, temperature 1). At temperature T the teacher's target is the softmax of
l_n / T over those k ids alone: renormalised over the kept ids, the rest of the vocabulary gets probability 0
(exactly the teacher's distribution at T when k is the vocabulary size). The student's log-probabilities
log q_n = log_softmax(z_n / T) are over the whole vocabulary, so mass the student puts outside the kept ids is
penalised through log q at the kept ones. Per position

    KL_n = sum_k p_nk (log p_nk - log q_nk)          (KL(teacher || student), the kept ids only)
    loss = (1 - w) T^2 mean_n KL_n + w mean_n CE(z_n, the real token)

(T^2 keeps the gradient's scale as T changes, Hinton et al. 2015; w = distill ce_weight)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...families import MaskplayModel
from ...nn.outputs import ModelOutput
from ...runtime.precision import Precision, forward_in
from .fused import fused_distill_loss
from .teacher import target_mask


def distill_loss(logits: Tensor, top_ids: Tensor, top_logprobs: Tensor, real: Tensor, temperature: float = 1.0,
                 ce_weight: float = 0.0) -> tuple[Tensor, dict[str, Tensor]]:
    """(the mean loss over the N rows, its parts {"kl", "ce"}, each a mean). logits (N, V) the student's,
    top_ids / top_logprobs (N, k) the teacher's, real (N,) the true tokens."""
    z = logits.float()
    t = temperature
    p_log = torch.log_softmax(top_logprobs.float() / t, dim=-1)  # renormalised over the kept ids
    student = torch.log_softmax(z / t, dim=-1)
    kl = (p_log.exp() * (p_log - student.gather(1, top_ids.long()))).sum(-1).mean()
    # at T = 1 the CE reads the same log-softmax; with ce_weight 0 it is reported, not trained
    ce = -student.gather(1, real[:, None]).mean() if t == 1 else F.cross_entropy(z, real)
    if ce_weight == 0:
        return t * t * kl, {"kl": kl, "ce": ce.detach()}
    loss = (1 - ce_weight) * t * t * kl + ce_weight * ce
    return loss, {"kl": kl, "ce": ce}


class DistillObjective(nn.Module):
    """The student's forward pass, its LM head at the target positions and the loss, in one module, so that the
    run's precision (maskplay.runtime.precision.forward_in) covers all of it. The student is its only submodule. The loss
    is distill_loss fused with the head's projection (fused.py): no (N, V) logits are held."""

    def __init__(self, student: MaskplayModel, temperature: float, ce_weight: float) -> None:
        super().__init__()
        self.student = student
        self.temperature, self.ce_weight = temperature, ce_weight

    def forward(self, input_ids: Tensor, attention_mask: Tensor, targets: Tensor, top_ids: Tensor,
                top_logprobs: Tensor) -> ModelOutput:
        hidden = self.student(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        head = self.student.head  # the tied LM head: transform, then the embedding table and the bias (heads.py)
        loss, parts = fused_distill_loss(head.transform(hidden[targets]), self.student.embeddings.word.weight,
                                         head.bias, top_ids, top_logprobs, input_ids[targets], self.temperature,
                                         self.ce_weight)
        return ModelOutput(loss=loss, parts=parts)


TargetSource = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]  # (input_ids, attention_mask) -> top ids, log-probs


class DistillForward:
    """What the training loop calls where it would call forward_in(model, precision, **batch) (Stepper.forward,
    Evaluator.forward): the teacher's targets for the batch (stored or computed now), then the objective."""

    def __init__(self, objective: DistillObjective, source: TargetSource) -> None:
        self.objective, self.source = objective, source
        self.special = list(objective.student.config.special_token_ids)

    def __call__(self, module: nn.Module, precision: Precision, input_ids: Tensor, attention_mask: Tensor,
                 **unused: Any) -> ModelOutput:
        targets = target_mask(input_ids, attention_mask, self.special)
        top_ids, top_logprobs = self.source(input_ids, attention_mask)
        return forward_in(self.objective, precision, input_ids, attention_mask, targets, top_ids.to(input_ids.device),
                          top_logprobs.to(input_ids.device))

    def count_targets(self, model: MaskplayModel, batch: dict[str, Tensor]) -> int:
        return int(target_mask(batch["input_ids"], batch["attention_mask"], self.special).sum())
