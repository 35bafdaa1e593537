"""The teacher and its PLL distributions: at every piece of a sequence, the teacher's distribution over the
vocabulary with that one piece hidden (its pseudo-log-likelihood's view), top-k of it kept.

The teacher is any family with a PLL (`"pll" in score_methods`: BERT, UniLM, ELECTRA through its generator,
GPT-BERT's MNTP, XLNet, T-TA), read through the family contract (families/base.py): `masked_lm()` names the
model a PLL runs on, `pll_hidden()` hides a piece the family's way and runs the last block only at the hidden
piece (as maskplay.tasks.score.pll does), and `logits()` is its own LM head. The PLL scorer keeps only log p(the true
piece); here the head's whole row is kept, top-k of it.

One teacher batch holds the masked copies of one sequence only (up to `rows` of them, unpadded), so a
sequence's targets never depend on which sequences it was batched with: the targets `distill prepare` stores
and the ones computed on the fly at a training step are the same, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...data.tokenizer import Tokenizer
from ...families import MaskplayModel
from ..score.passes import Runner, check_compatible


def load_teacher(directory: str | Path, device: torch.device | str = "cpu") -> MaskplayModel:
    """The masked LM of the maskplay model in `directory` (ELECTRA: its generator), in eval mode, frozen. A
    family without a PLL (GPT) is a one-line error."""
    model = MaskplayModel.from_pretrained(directory)
    if "pll" not in type(model).score_methods:
        having = "a family with a PLL (score method 'pll')"
        raise ValueError(f"teacher {directory}: a {model.config.family!r} model has no masked-LM reading; the teacher "
                         f"must be {having}, such as bert, electra (its generator), unilm, gpt-bert or xlnet")
    mlm = model.masked_lm(lambda kind, make: make(model))
    mlm = mlm.to(device).eval()
    for p in mlm.parameters():
        p.requires_grad_(False)
    return mlm


def check_top_k(top_k: int, teacher: MaskplayModel, where: str = "--top-k") -> None:
    """The teacher's ids kept per position must be a part of its vocabulary: a top-k over it is refused in one line
    (before, it was silently cut to the vocabulary)."""
    vocab = teacher.config.vocab_size
    if top_k > vocab:
        raise ValueError(f"{where} {top_k} is more than the teacher's vocabulary of {vocab} ids: keep at most {vocab} "
                         "per position")


def check_teacher_tokenizer(teacher: MaskplayModel, tokenizer: Tokenizer, where: str) -> None:
    """The student learns the teacher's vocabulary row for row: the data must be tokenized by the teacher's tokenizer."""
    try:
        check_compatible(teacher, tokenizer)
    except ValueError as err:
        raise ValueError(f"{where}: the teacher and the data's tokenizer differ ({err}); prepare the data with the "
                         "teacher's tokenizer.json") from None


def target_mask(input_ids: Tensor, attention_mask: Tensor, special_ids: list[int]) -> Tensor:
    """The positions the student learns from the teacher: real pieces, not [SOS] / [EOS] / other specials (a PLL
    scores pieces only, and so does a T-TA's one pass)."""
    special = torch.tensor(special_ids, device=input_ids.device)
    return attention_mask.bool() & ~torch.isin(input_ids, special)


TEACHER_PRECISIONS = ("fp32", "bf16")


class TeacherPass:
    """teacher(sequence) -> (top ids (P, k) int32, top log-probabilities (P, k) fp32) at the P target positions of
    one unpadded sequence, in order; log-probabilities of the full softmax at temperature 1, largest first."""

    def __init__(self, teacher: MaskplayModel, top_k: int, rows: int = 256, precision: str = "fp32") -> None:
        """precision: fp32, or bf16 (a bf16 copy of the teacher, made once: several times faster where the CPU
        has bf16 matmuls; its targets differ from fp32's by bf16's rounding)."""
        if precision not in TEACHER_PRECISIONS:
            raise ValueError(f"teacher precision must be one of {TEACHER_PRECISIONS}, got {precision!r}")
        check_top_k(top_k, teacher, "top_k")
        self.teacher = teacher
        self.top_k = top_k
        self.rows = rows
        self.runner = Runner(teacher, precision)
        # the model whose head reads the hidden states: the bf16 copy under bf16
        self.head_model = self.runner.bf16_model if precision == "bf16" else teacher
        self.special = list(teacher.config.special_token_ids)
        self.passes = 0  # teacher forward passes run (benchmarks/distill_step.py reads it)

    @property
    def device(self) -> torch.device:
        return next(self.teacher.parameters()).device

    def __call__(self, sequence: Tensor) -> tuple[Tensor, Tensor]:
        seq = sequence.to(self.device)
        positions = target_mask(seq[None], torch.ones_like(seq[None], dtype=torch.bool), self.special)[0]
        positions = positions.nonzero()[:, 0]
        ids_out, logp_out = [], []
        with torch.inference_mode():
            for start in range(0, len(positions), self.rows):
                pos = positions[start:start + self.rows]
                copies = seq[None].expand(len(pos), -1)
                attn = torch.ones_like(copies, dtype=torch.bool)
                hidden = self.teacher.pll_hidden(self.runner, copies, attn, pos, pos + 1)
                logp = torch.log_softmax(self.head_model.logits(hidden).float(), dim=-1)
                top = logp.topk(self.top_k, dim=-1)
                ids_out.append(top.indices.to(torch.int32))
                logp_out.append(top.values)
                self.passes += 1
        if not ids_out:
            return (torch.zeros(0, self.top_k, dtype=torch.int32, device=self.device),
                    torch.zeros(0, self.top_k, device=self.device))
        return torch.cat(ids_out), torch.cat(logp_out)

    def batch(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """The targets of a padded batch's sequences, concatenated in row-major order (that of
        hidden[target_mask(...)])."""
        lengths = attention_mask.sum(1).tolist()
        parts = [self(input_ids[b, :n]) for b, n in enumerate(lengths)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def describe(teacher: MaskplayModel) -> dict[str, Any]:
    cfg = teacher.config
    return {"family": cfg.family, "parameters": teacher.num_parameters(), "hidden_size": cfg.hidden_size,
            "num_layers": cfg.num_layers, "vocab_size": cfg.vocab_size}
