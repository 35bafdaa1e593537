"""`maskplay simcse MODEL --out DIR`: unsupervised SimCSE (maskplay.tasks.simcse) on Wikipedia sentences; the output
is a model directory of the same family that `maskplay embed` and `maskplay eval sts` load."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .common import fraction, non_negative_float, non_negative_int, positive_float, positive_int, seed_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..runtime.precision import Precision
    from ..runtime.precision_probe import AUTO

    p = sub.add_parser(
        "simcse", help=summary("simcse"),
        description="Unsupervised SimCSE (Gao et al. 2021) on MODEL (any family): every sentence twice through the "
                    "encoder with dropout as the only noise, in-batch negatives, cross-entropy over cosine "
                    "similarities / temperature. Trains the embedding `maskplay embed` / `eval sts` read (same pooling; "
                    "T-TA with its diagonal mask unless --no-diagonal-mask) and writes a model directory to --out.")
    p.add_argument("model", help="a model directory (config.json, model.safetensors, tokenizer.json) or bundled name")
    p.add_argument("--out", required=True, metavar="DIR", help="the model directory to write (with simcse.json)")
    p.add_argument("--data", nargs="+", default=None, metavar="PATH",
                   help="corpus files or directories, any format `maskplay prepare` reads (default: the shared "
                        "Wikipedia, enwiki-wikiextractor under $MASKPLAY_DATA or ../shared/data)")
    p.add_argument("--sentences", type=positive_int, default=None, metavar="N",
                   help="use N sentences drawn at random from the corpus (default: all)")
    p.add_argument("--min-words", type=positive_int, default=5, help="skip sentences of fewer words (headings, fragments)")
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="optimizer steps (default: --minutes decides; without it, one pass over the sentences)")
    p.add_argument("--minutes", type=positive_float, default=None, help="wall-clock budget of the training loop")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences per step (each seen twice)")
    p.add_argument("--lr", type=positive_float, default=3e-5,
                   help="peak learning rate (3e-5: the paper's for BERT-base; small models may want more)")
    p.add_argument("--temperature", type=positive_float, default=0.05)
    p.add_argument("--pooling", choices=["mean", "first", "cls", "last"], default="mean",
                   help="as `maskplay embed --pooling`: mean (default, [SOS]/[EOS] excluded), first (= cls, the "
                        "[SOS]/[CLS] position) or last; evaluate with the same --pooling")
    p.add_argument("--max-length", type=positive_int, default=32, help="pieces per training sentence with [SOS]/[EOS]")
    p.add_argument("--dropout", type=fraction, default=None,
                   help="every dropout of the model during SimCSE (default: the model's own); config.json keeps its own")
    p.add_argument("--diagonal-mask", action=argparse.BooleanOptionalAction, default=True,
                   help="T-TA only: train the embedding with the diagonal mask (default, as `eval sts` embeds) or "
                        "without it (then evaluate with --no-diagonal-mask)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=0)
    p.add_argument("--weight-decay", type=non_negative_float, default=0.0)
    p.add_argument("--clip", type=non_negative_float, default=1.0, help="gradient-norm clipping (0: none)")
    p.add_argument("--precision", choices=[AUTO, *(x.value for x in Precision if x.trainable)], default=AUTO,
                   help="auto (default): bf16 where this machine trains faster in it, else fp32")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--save-every", type=positive_int, default=None, metavar="STEPS",
                   help="also write a checkpoint model directory OUT/ckpt-STEP every STEPS steps")
    p.add_argument("--log-every", type=positive_int, default=50)
    p.add_argument("--overwrite", action="store_true", help="replace a model already in --out")
    p.set_defaults(func=run_simcse)


def _options(args: argparse.Namespace) -> object:
    from ..tasks.simcse import SimcseOptions

    options = SimcseOptions(lr=args.lr, batch_size=args.batch_size, max_steps=args.max_steps, minutes=args.minutes,
                            temperature=args.temperature, pooling="first" if args.pooling == "cls" else args.pooling,
                            max_length=args.max_length, diagonal_mask=args.diagonal_mask, dropout=args.dropout,
                            warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
                            clip=args.clip or None, seed=args.seed, save_every=args.save_every,
                            log_every=args.log_every)
    options.check()
    return options


def _check_out(out: Path, model: str, overwrite: bool) -> None:
    from ..runtime.files import prepare_output_dir
    from ..runtime.model_dir import CONFIG_NAME, WEIGHTS_NAME, resolve_model_dir

    prepare_output_dir(out)
    source = resolve_model_dir(model)
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise ValueError(f"--out {out} is the model directory being trained; give another directory")
    if not overwrite and any((out / name).exists() for name in (CONFIG_NAME, WEIGHTS_NAME)):
        raise ValueError(f"--out {out} already holds a model; give another directory or --overwrite")


def cpu_name() -> str:
    """The CPU's model name as lscpu gives it (for results files), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _check_counts(args: argparse.Namespace, batch_size: int) -> None:
    """The counts that can be wrong, checked before the model or the corpus is read."""
    if args.min_words < 1:
        raise ValueError(f"--min-words must be at least 1, got {args.min_words}")
    if args.sentences is not None and args.sentences < batch_size:
        raise ValueError(f"--sentences {args.sentences} is fewer than one batch (--batch-size {batch_size})")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")


def run_simcse(args: argparse.Namespace) -> int:
    import torch

    from ..runtime.devices import resolve_device
    from ..runtime.files import OutputLock
    from ..runtime.precision_probe import resolve
    from ..tasks.eval.common import find_data
    from ..tasks.eval.files import portable
    from ..tasks.score.scorer import load_model_dir
    from ..tasks.simcse import SIMCSE_NAME, corpus_sentences, forward_kwargs, save_simcse, train_simcse

    options = _options(args)
    _check_counts(args, options.batch_size)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    out = Path(args.out)
    _check_out(out, args.model, args.overwrite)
    data = args.data or [find_data("enwiki-wikiextractor")]
    for path in data:
        if not Path(path).exists():
            raise FileNotFoundError(f"--data {path} not found")
    model, tokenizer = load_model_dir(args.model)
    forward_kwargs(model, options.diagonal_mask)  # --no-diagonal-mask on a model that is not T-TA: stop here
    if options.max_length > model.config.max_position:
        raise ValueError(f"--max-length {options.max_length} exceeds the model's {model.config.max_position} positions")
    model.to(device)
    choice = resolve(args.precision, device, model.config, rows=options.batch_size * 2 * options.max_length)
    options.precision = choice.precision.value
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if args.precision == "auto":
        log(f"maskplay simcse: {choice.describe()}")
    start = time.monotonic()
    sentences = corpus_sentences(data, args.min_words, args.sentences, args.seed)
    log(f"{len(sentences)} training sentences of >= {args.min_words} words from {', '.join(portable(d) for d in data)} "
        f"({time.monotonic() - start:.1f} s)")
    family = model.config.family
    diagonal_switch = model.has_diagonal_switch
    record = {"source_model": portable(args.model) if Path(args.model).exists() else str(args.model),
              "family": family, "data": [portable(d) for d in data], "sentences": len(sentences),
              "min_words": args.min_words, "options": asdict(options), "threads": torch.get_num_threads(),
              "device": str(device), "cpu": cpu_name(), "torch": torch.__version__}
    evaluate = (f"maskplay eval sts {out}" + (f" --pooling {options.pooling}" if options.pooling != "mean" else "")
                + (" --no-diagonal-mask" if diagonal_switch and not options.diagonal_mask else ""))
    log(f"SimCSE on {family} ({args.model}): batch {options.batch_size}, lr {options.lr:g}, temperature "
        f"{options.temperature:g}, {options.pooling} pooling, {options.precision}, "
        + (f"{options.max_steps} steps" if options.max_steps else f"{options.minutes:g} minutes" if options.minutes
           else "one pass"))

    with OutputLock(out / SIMCSE_NAME):
        def checkpoint(step: int) -> None:
            save_simcse(model, tokenizer, out / f"ckpt-{step:06d}", {**record, "steps": step, "checkpoint": True})

        result = train_simcse(model, tokenizer, sentences, options, save=checkpoint)
        record.update(steps=result.steps, seconds=round(result.seconds, 1), sentences_seen=result.sentences_seen,
                      stopped_by=result.stopped_by, history=result.history)
        save_simcse(model, tokenizer, out, record)
    print(f"SimCSE: {result.steps} steps in {result.seconds / 60:.1f} min ({result.stopped_by}), final loss "
          f"{result.history[-1]['loss']:.4f}; saved {out}\nevaluate with: {evaluate}")
    return 0

