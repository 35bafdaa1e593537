"""The final model of a run: RUN_DIR/final, a directory MaskplayModel.from_pretrained reads. With optim.ema,
final holds the weights' moving average and RUN_DIR/final-raw the trained weights themselves."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ..attention.long import write_spans
from ..config import ModelConfig
from ..families import MaskplayModel
from ..tokenizer import Tokenizer
from .checkpointing import WRITE_ERRORS, write_error
from .config import TrainConfig
from .distributed import Dist, barrier, broadcast_int
from .ema import WeightEma

FINAL_DIR = "final"
RAW_DIR = "final-raw"  # with optim.ema: the trained weights, next to their moving average in final/


def export_final(run_dir: Path, d: Dist, model: MaskplayModel, model_config: ModelConfig, tokenizer: Tokenizer,
                 config: TrainConfig, log: Callable[[str], None], ema: WeightEma | None = None) -> Path:
    """RUN_DIR/final: config.json + model.safetensors (MaskplayModel.from_pretrained) + tokenizer.json, swapped
    in whole for an earlier export (a collective: every process must call it). With `ema`, final holds the
    moving average and RUN_DIR/final-raw the model's own weights. A write that fails (disk full) is one error on
    every process; the run's last checkpoint holds the model."""
    final = run_dir / FINAL_DIR
    error = None
    if d.is_main:
        try:
            if ema is None:
                _write_model_dir(final, model, tokenizer, config)
            else:
                _write_model_dir(run_dir / RAW_DIR, model, tokenizer, config)
                with ema.applied():
                    _write_model_dir(final, model, tokenizer, config)
                log(f"exported the weights' moving average (optim.ema={ema.decay}) as {final}, the trained weights "
                    f"as {run_dir / RAW_DIR}")
        except WRITE_ERRORS as err:  # disk full, quota: the checkpoint just written holds the run
            error = (f"cannot write the final model {final}: {write_error(err)}; the run's last checkpoint "
                     "holds it: free some space, then run again with --resume to export it")
    if broadcast_int(d, int(error is not None)):
        raise ValueError(error or "process 0 could not write the final model (its error says why)")
    if d.is_main and model_config.long.adaptive_span:  # the learned spans, layers x heads, next to the final model
        spans = write_spans(model, run_dir / "adaptive_spans.json")
        log(f"learned adaptive spans (tokens, layer by layer): {spans}; {run_dir / 'adaptive_spans.json'}")
    barrier(d)
    return final


def _write_model_dir(target: Path, model: MaskplayModel, tokenizer: Tokenizer, config: TrainConfig) -> None:
    """Written beside `target`, then swapped in whole; a failed write leaves nothing behind."""
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save(tmp)
        (tmp / "train_config.json").write_text(config.to_json())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = target.parent / f".old-{target.name}-{os.getpid()}"
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
