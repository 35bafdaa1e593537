"""The T-TA student: its architecture (the teacher's, or the training config's) and its warm start.

A warm start copies every teacher weight whose name and shape agree with the student's: maskplay's families share
one backbone, so for a teacher of the student's sizes that is the token and position embeddings and their
LayerNorm, every layer's query / key / value / output projections, its norms and feed-forward, and the LM head
(its transform and bias; the decoder is the embedding table). What it cannot carry is the data flow: in a T-TA the
queries start from [MASK] + position (a masked LM's view of a masked piece, so layer 1 is on familiar ground) but
the keys and values of *every* layer project the embedding output, where the teacher's layer l read layer l - 1's
output; layers 2.. therefore start with projections trained on other inputs, and training must re-fit them.
ELECTRA's teacher is its generator (a smaller BERT): a T-TA of the generator's shape gets it all."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...config import ModelConfig
from ...families import MaskplayModel


def student_config(teacher: MaskplayModel, tokenizer_fields: dict[str, Any]) -> ModelConfig:
    """The teacher's masked LM's architecture as a T-TA (the family sections back to their defaults)."""
    cfg = teacher.config
    # a two-stream teacher's relative positions and bias-free attention are its own: the T-TA takes its defaults
    two = type(teacher).two_streams
    try:
        return dataclasses.replace(cfg, family="tta", sections={}, positions=None if two else cfg.positions,
                                   attention_bias=None if two else cfg.attention_bias, **tokenizer_fields)
    except ValueError as err:
        raise ValueError(f"the teacher's architecture cannot be a T-TA ({err}); give the student its own with "
                         "distill shape = 'config' (--shape config and the [model] section / --set model.*)") from None


def warm_start(student: MaskplayModel, teacher: MaskplayModel) -> dict[str, list[str]]:
    """Copy into the student every teacher weight of the same name and shape; returns {"copied", "kept"} (the
    student's own names), the kept ones left at their initialisation."""
    own = student.state_dict()
    theirs = teacher.state_dict()
    copied = [k for k, v in own.items() if k in theirs and theirs[k].shape == v.shape]
    with torch.no_grad():
        student.load_state_dict({**own, **{k: theirs[k].detach().to(own[k].device, own[k].dtype) for k in copied}})
    return {"copied": copied, "kept": [k for k in own if k not in set(copied)]}
