"""`distill()`: a T-TA trained by maskplay's one training loop (maskplay.tasks.train.loop) on a teacher's PLL
distributions. Nothing of the loop is rewritten: DistillTrainer is a Trainer whose student config and initial
weights come from the teacher and whose Stepper / Evaluator call DistillForward (the teacher's targets, stored or
computed now, then the KL loss) where a pretraining calls forward_in. The batches, accumulation, precision, the
schedule, checkpoints and the export are the Trainer's, so a killed run resumed from its last checkpoint ends
bitwise where an uninterrupted one ends (the targets are a pure function of the batch's token ids)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, TextIO

from ...data.tokenizer import load_tokenizer
from ...families.tta import TTA
from ..train.config import TrainConfig
from ..train.distributed import Dist
from ..train.ema import WeightEma
from ..train.loop import Trainer, TrainResult, train
from ..train.run_checkpoints import list_checkpoints
from ..train.startup import RESOLVED_CONFIG, check_data, undo_start
from .config import DistillConfig, check_resumable, load_distill_config, save_distill_config
from .loss import DistillForward, DistillObjective, TargetSource
from .store import StoredTargets, teacher_identity
from .student import student_config, warm_start
from .teacher import TeacherPass, check_teacher_tokenizer, check_top_k, load_teacher


class DistillTrainer(Trainer):
    def __init__(self, config: TrainConfig, d: Dist, resume: bool = False, resume_from: str | Path | None = None,
                 stream: TextIO | None = None, *, distill: DistillConfig) -> None:
        self.distill = distill
        self.teacher = load_teacher(distill.teacher)
        self.stored: StoredTargets | None = None
        self._check_before_start(config, d, resume, resume_from)
        super().__init__(config, d, resume=resume, resume_from=resume_from, stream=stream)
        self.objective = DistillObjective(self.model, distill.temperature, distill.ce_weight)
        self.forward = DistillForward(self.objective, self._target_source())
        for unit in (self.stepper, self.evaluator):
            unit.forward, unit.count_targets = self.forward, self.forward.count_targets

    def _check_before_start(self, config: TrainConfig, d: Dist, resume: bool,
                            resume_from: str | Path | None) -> None:
        """Everything about the teacher, its targets and the data that can refuse the run, before the run
        directory is touched: a refused start leaves nothing that would refuse the corrected one."""
        run_dir = Path(config.run.out_dir)
        if d.enabled:
            raise ValueError("distillation runs in one process (the teacher's passes are not shared out): start it "
                             "without torchrun")
        check_settings(config, self.distill)
        check_top_k(self.distill.top_k, self.teacher, "distill top_k")
        saved = load_distill_config(run_dir)
        # only a run with a checkpoint to continue must distil as it started (a start that stopped before its
        # first checkpoint holds nothing the new switches would mix with)
        if saved is not None and (resume_from is not None or (resume and list_checkpoints(run_dir))):
            check_resumable(saved, self.distill, run_dir)
        check_teacher_tokenizer(self.teacher, load_tokenizer(config.data.path),
                                f"--data {config.data.path}")
        if self.distill.targets:
            self.stored = StoredTargets(self.distill.targets, self.distill.top_k, config.data.max_length,
                                        teacher_identity(self.teacher), self.distill.teacher_precision)
            self.stored.check_data(Path(config.data.path))

    def _start(self, resume: bool, resume_from: str | Path | None) -> Path | None:
        created = not self.run_dir.exists()
        wrote_config = not (self.run_dir / RESOLVED_CONFIG).exists()
        path = super()._start(resume, resume_from)
        try:
            if self.distill.shape == "teacher":
                self.model_config = student_config(self.teacher, self.tokenizer.model_config_ids())
                check_data(self.config, self.model_config, self.train_data, self.data_dir)
            student, teacher = self.model_config.vocab_size, self.teacher.config.vocab_size
            if student != teacher:
                raise ValueError(f"the student's vocabulary ({student} ids, model.vocab_size) is not the teacher's "
                                 f"({teacher}): it learns the teacher's distribution id for id; leave "
                                 "model.vocab_size to the data's tokenizer")
        except (ValueError, FileNotFoundError):
            if self.d.is_main:
                undo_start(self.run_dir, created, wrote_config)
            raise
        if self.d.is_main:
            save_distill_config(self.run_dir, self.distill)
        return path

    def _build_model(self) -> None:
        self.teacher.to(self.device)
        super()._build_model()
        if self.checkpoint_path is not None or self.distill.init != "warm":
            return
        report = warm_start(self.model, self.teacher)
        if self.ema is not None:  # the moving average starts from the warm weights
            self.ema = WeightEma(self.model, self.config.optim.ema, self.config.optim.ema_debias)
        self.log(f"warm start from the teacher: {len(report['copied'])} of {len(report['copied']) + len(report['kept'])}"
                 f" weights copied" + (f"; kept at their initialisation: {', '.join(report['kept'])}"
                                       if report["kept"] else ""))

    def _target_source(self) -> TargetSource:
        cfg = self.distill
        if self.stored is not None:
            self.log(f"teacher targets: stored in {cfg.targets} (top {cfg.top_k})")
            return self.stored.batch
        self.log(f"teacher targets: computed at every step (top {cfg.top_k}; `maskplay distill prepare` stores them)")
        return TeacherPass(self.teacher, cfg.top_k, cfg.teacher_rows, cfg.teacher_precision).batch


def check_settings(config: TrainConfig, distill: DistillConfig) -> None:
    """What refuses a distillation without the teacher (so before a HuggingFace one is converted): the data must be
    a prepared directory, and stored targets belong to single sequences of it."""
    if not config.data.path:
        raise ValueError("distillation reads a prepared data directory (--data DIR, prepared with the teacher's "
                         "tokenizer.json); data.corpus is not supported here")
    if distill.targets and (config.data.pack or config.data.length_at):
        raise ValueError("stored targets belong to single sequences at one max_length: data.pack and "
                         "data.length_at need targets computed on the fly (no --targets)")
    if distill.targets and not (Path(config.data.path) / "train").is_dir():
        raise FileNotFoundError(f"{Path(config.data.path) / 'train'} not found: --data must be a directory "
                                "prepared by `maskplay prepare`")


def distill(config: TrainConfig, distill_config: DistillConfig, resume: bool = False,
            resume_from: str | Path | None = None, stream: TextIO | None = None) -> TrainResult:
    """Distil `distill_config.teacher` into a T-TA trained as `config` says (its data prepared with the teacher's
    tokenizer); RUN_DIR/final is a plain T-TA model directory (MaskplayModel.from_pretrained, `maskplay score`)."""
    if not distill_config.teacher:
        raise ValueError("no teacher: give the teacher's model directory")
    # the student is a T-TA: its one pass is what distillation buys
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, family=TTA.family))
    factory: Any = functools.partial(DistillTrainer, distill=distill_config)
    return train(config, resume=resume, resume_from=resume_from, stream=stream, trainer_class=factory)
