"""The distillation switches: one typed dataclass, saved next to the run (RUN_DIR/distill.json) so that a resumed
run checks it distils the same way. The training itself (optimizer, data, budget) is a TrainConfig
(maskplay.tasks.train.config), as for `maskplay pretrain`."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import from_dict
from ...runtime.files import atomic_path, read_json_object

INITS = ("warm", "scratch")
SHAPES = ("teacher", "config")
DISTILL_CONFIG = "distill.json"


@dataclass
class DistillConfig:
    """teacher: a maskplay model directory (or bundled name) of a family with a PLL (`maskplay distill` converts a
    HuggingFace directory into one first). targets: a directory written by `maskplay distill prepare` ("" = the
    teacher's targets computed on the fly, at every step)."""

    teacher: str = ""
    targets: str = ""
    # the student's weights: "warm" = every teacher weight whose name and shape agree (docs/guides/distillation.md says
    # what that carries), "scratch" = random (the pretraining initialisation)
    init: str = "warm"
    # the student's architecture: "teacher" = the teacher's masked LM's sizes and switches, as a T-TA; "config" = the
    # [model] section of the training config (preset and overrides)
    shape: str = "teacher"
    temperature: float = 1.0  # teacher and student logits divided by it inside the KL; the KL is scaled by T^2
    ce_weight: float = 0.0  # loss = (1 - w) T^2 KL + w CE(the real token); 0 = KL alone, 1 = plain T-TA training
    top_k: int = 64  # teacher log-probabilities kept per position (the rest of the vocabulary is dropped)
    teacher_rows: int = 256  # masked copies per teacher pass (rows of one sequence; a longer one takes more passes)
    teacher_precision: str = "fp32"  # fp32 | bf16: the teacher's passes (stored targets must have been made so)

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"distill init must be one of {INITS}, got {self.init!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"distill shape must be one of {SHAPES}, got {self.shape!r}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"distill temperature must be a positive number, got {self.temperature}")
        if not 0 <= self.ce_weight <= 1:
            raise ValueError(f"distill ce_weight must be in [0, 1], got {self.ce_weight}")
        if self.top_k < 1:
            raise ValueError(f"distill top_k must be at least 1, got {self.top_k}")
        if self.teacher_precision not in ("fp32", "bf16"):
            raise ValueError(f"distill teacher_precision must be fp32 or bf16, got {self.teacher_precision!r}")
        if self.teacher_rows < 1:
            raise ValueError(f"distill teacher_rows must be at least 1, got {self.teacher_rows}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def save_distill_config(run_dir: Path, config: DistillConfig) -> None:
    with atomic_path(run_dir / DISTILL_CONFIG) as tmp:
        tmp.write_text(json.dumps(config.to_dict(), indent=2) + "\n")


def load_distill_config(run_dir: str | Path) -> DistillConfig | None:
    path = Path(run_dir) / DISTILL_CONFIG
    if not path.is_file():
        return None
    return from_dict(DistillConfig, read_json_object(path), source=str(path))


# switches a resumed run may change: where the teacher and its targets are read from, and the teacher pass's size
RESUMABLE = frozenset({"teacher", "targets", "teacher_rows"})


def check_resumable(saved: DistillConfig, config: DistillConfig, run_dir: Path) -> None:
    changed = [f.name for f in dataclasses.fields(config)
               if f.name not in RESUMABLE and getattr(saved, f.name) != getattr(config, f.name)]
    if changed:
        raise ValueError(f"{run_dir / DISTILL_CONFIG}: a resumed run must distil as it started; changed: "
                         + ", ".join(f"{k} ({getattr(saved, k)!r} -> {getattr(config, k)!r})" for k in changed))
