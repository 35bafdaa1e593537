"""The final model of a run: RUN_DIR/final, a directory MaskplayModel.from_pretrained reads."""

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

FINAL_DIR = "final"


def export_final(run_dir: Path, d: Dist, model: MaskplayModel, model_config: ModelConfig, tokenizer: Tokenizer,
                 config: TrainConfig, log: Callable[[str], None]) -> Path:
    """RUN_DIR/final: config.json + model.safetensors (MaskplayModel.from_pretrained) + tokenizer.json, swapped
    in whole for an earlier export (a collective: every process must call it)."""
    final = run_dir / FINAL_DIR
    error = None
    if d.is_main:
        tmp = run_dir / f".tmp-{FINAL_DIR}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            model.save_pretrained(tmp)
            tokenizer.save(tmp)
            (tmp / "train_config.json").write_text(config.to_json())
        except WRITE_ERRORS as err:  # disk full, quota: the checkpoint just written holds the run
            shutil.rmtree(tmp, ignore_errors=True)
            error = (f"cannot write the final model {final}: {write_error(err)}; the run's last checkpoint "
                     "holds it: free some space, then run again with --resume to export it")
        else:
            old = run_dir / f".old-{FINAL_DIR}-{os.getpid()}"
            if final.exists():
                os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
    if broadcast_int(d, int(error is not None)):
        raise ValueError(error or "process 0 could not write the final model (its error says why)")
    if d.is_main:
        if model_config.long.adaptive_span:  # the learned spans, layers x heads, next to the final model
            spans = write_spans(model, run_dir / "adaptive_spans.json")
            log(f"learned adaptive spans (tokens, layer by layer): {spans}; {run_dir / 'adaptive_spans.json'}")
    barrier(d)
    return final
