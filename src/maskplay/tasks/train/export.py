"""The final model of a run: RUN_DIR/final, a directory MaskplayModel.from_pretrained reads. With optim.ema,
final holds the weights' moving average and RUN_DIR/final-raw the trained weights themselves. With
run.checkpoint_at_words, RUN_DIR/words/<N> are such directories of the model at N words seen."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ...config import ModelConfig
from ...data.tokenizer import Tokenizer
from ...families import MaskplayModel
from ...nn.attention.long_attention import write_spans
from .config import TrainConfig
from .distributed import Dist, barrier, broadcast_int
from .ema import WeightEma
from .run_checkpoints import WRITE_ERRORS, write_error

FINAL_DIR = "final"
RAW_DIR = "final-raw"  # with optim.ema: the trained weights, next to their moving average in final/
WORDS_DIR = "words"  # run.checkpoint_at_words: the model at each number of words seen, words/1M, words/2M, ...
WORDS_INFO = "words.json"


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


def export_at_words(run_dir: Path, d: Dist, model: MaskplayModel, tokenizer: Tokenizer, config: TrainConfig,
                    mark: int, progress: dict[str, int], log: Callable[[str], None],
                    ema: WeightEma | None = None) -> Path:
    """RUN_DIR/words/<mark> (words_name): the model once run.checkpoint_at_words' `mark` words are seen, a directory
    like final/ (the moving average with optim.ema), with words.json (the words, tokens and step it was taken at)
    (a collective: every process must call it)."""
    target = run_dir / WORDS_DIR / words_name(mark)
    error = None
    if d.is_main:
        info = {"checkpoint_at_words": mark, **progress}
        try:
            target.parent.mkdir(exist_ok=True)
            with ema.applied() if ema is not None else contextlib.nullcontext():
                _write_model_dir(target, model, tokenizer, config, extra={WORDS_INFO: info})
            log(f"{progress['words_seen']:,} words seen (step {progress['step']}): exported {target}")
        except WRITE_ERRORS as err:
            error = f"cannot write the model at {mark:,} words {target}: {write_error(err)}"
    if broadcast_int(d, int(error is not None)):
        raise ValueError(error or f"process 0 could not write {target} (its error says why)")
    return target


def words_name(words: int) -> str:
    """1000000 -> "1M", 20000 -> "20K", 1500 -> "1500" (BabyLM names its checkpoints by millions of words)."""
    for unit, suffix in ((1_000_000, "M"), (1000, "K")):
        if words % unit == 0:
            return f"{words // unit}{suffix}"
    return str(words)


def _write_model_dir(target: Path, model: MaskplayModel, tokenizer: Tokenizer, config: TrainConfig,
                     extra: dict[str, dict] | None = None) -> None:
    """Written beside `target`, then swapped in whole; a failed write leaves nothing behind. `extra`: more JSON
    files, name -> object."""
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save(tmp)
        (tmp / "train_config.json").write_text(config.to_json())
        for name, value in (extra or {}).items():
            (tmp / name).write_text(json.dumps(value, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = target.parent / f".old-{target.name}-{os.getpid()}"
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
