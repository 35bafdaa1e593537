"""Distillation of a masked LM's PLL into a T-TA's one pass (docs/guides/distillation.md): `distill` trains the student with
maskplay's training loop, `prepare_targets` stores the teacher's targets once, `TeacherPass` computes them."""

from .config import DistillConfig
from .loop import DistillTrainer, distill
from .loss import DistillObjective, distill_loss
from .store import StoredTargets, prepare_targets
from .student import student_config, warm_start
from .teacher import TeacherPass, load_teacher, target_mask

__all__ = ["DistillConfig", "DistillObjective", "DistillTrainer", "StoredTargets", "TeacherPass", "distill",
           "distill_loss", "load_teacher", "prepare_targets", "student_config", "target_mask", "warm_start"]
