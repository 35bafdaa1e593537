"""`maskplay finetune`: a backbone + a classification/regression head, early stopping on dev (maskplay.tasks.finetune;
docs/guides/fine-tuning.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..registry import family_names
from .common import fraction, non_negative_float, positive_float, positive_int, seed_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("finetune", help=summary("finetune"),
                       description=f"Fine-tune MODEL (any family: {', '.join(family_names())}) with a small "
                                   "head on --train, keep the weights of the best --dev evaluation, and save a model "
                                   "directory that `maskplay predict` and "
                                   "maskplay.tasks.finetune.FineTuned.from_pretrained load.")
    p.add_argument("model", help="a model directory (config.json, model.safetensors, tokenizer.json) or bundled name; "
                                 "or a fine-tuned directory, whose encoder is fine-tuned again with a new head")
    p.add_argument("--task", choices=["classify", "regress", "pairs"], required=True,
                   help="classify (cross-entropy), regress (MSE), pairs (two texts as one input; classify or "
                        "regress from the labels: regress if any is not an integer)")
    p.add_argument("--train", required=True, metavar="FILE", help="TSV/CSV with a header, or CoLA / STS-B files")
    p.add_argument("--dev", required=True, metavar="FILE")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--text-column", default=None)
    p.add_argument("--text-pair-column", default=None)
    p.add_argument("--label-column", default=None)
    p.add_argument("--pooling", choices=["first", "mean", "last"], default=None,
                   help="default: first for bert/electra/unilm, mean for tta, last for gpt/xlnet")
    p.add_argument("--head", choices=["linear", "bert", "electra"], default="linear",
                   help="linear: Dropout + Linear; bert: HuggingFace's pooler (Dense + tanh) first, as "
                        "BertForSequenceClassification; electra: ElectraClassificationHead")
    p.add_argument("--dropout", type=fraction, default=0.1)
    p.add_argument("--lr", type=positive_float, default=5e-5)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--epochs", type=positive_int, default=3)
    p.add_argument("--max-steps", type=positive_int, default=None)
    p.add_argument("--warmup", type=fraction, default=0.1, help="fraction of the steps")
    p.add_argument("--weight-decay", type=non_negative_float, default=0.01)
    p.add_argument("--patience", type=positive_int, default=None, help="dev evaluations without improvement before stopping")
    p.add_argument("--eval-every", type=positive_int, default=None,
                   help="steps between dev evaluations (default: each epoch)")
    p.add_argument("--max-minutes", type=positive_float, default=None)
    p.add_argument("--metric", choices=["accuracy", "mcc", "pearson", "spearman"], default=None,
                   help="the dev metric for early stopping (default: mcc for classification, pearson for regression)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    p.add_argument("--threads", type=positive_int, default=None)
    p.add_argument("--results", default=None, metavar="FILE.json", help="write the dev history and best result")
    p.set_defaults(func=run_finetune)


def _head(args: argparse.Namespace, family: str, train: list) -> object:
    from ..tasks.finetune import DEFAULT_POOLING, HeadConfig, class_names, is_number

    labels = [ex.label for ex in train]
    if args.task == "pairs":
        objective = "regress" if any(not (is_number(v) and float(v).is_integer()) for v in labels) else "classify"
    else:
        objective = args.task
    pair = args.task == "pairs" or train[0].pair is not None
    return HeadConfig(objective=objective, labels=class_names(train) if objective == "classify" else [],
                      pair=pair, pooling=args.pooling or DEFAULT_POOLING[family], head=args.head, dropout=args.dropout)


def run_finetune(args: argparse.Namespace) -> int:
    import torch

    from ..runtime.devices import resolve_device
    from ..runtime.files import prepare_output_dir, prepare_output_file
    from ..tasks.finetune import FinetuneOptions, finetune, load_backbone, read_examples

    device = resolve_device(args.device)  # before any work
    if args.threads:
        torch.set_num_threads(args.threads)
    prepare_output_dir(args.out)
    if args.results:
        prepare_output_file(args.results, "--results")
    columns = dict(text_column=args.text_column, text_pair_column=args.text_pair_column, label_column=args.label_column)
    need_pairs = True if args.task == "pairs" else None
    train = read_examples(args.train, **columns, need_pairs=need_pairs)
    dev = read_examples(args.dev, **columns, need_pairs=need_pairs)
    backbone, tokenizer = load_backbone(args.model)
    head = _head(args, backbone.config.family, train)
    if any(ex.pair is not None for ex in dev) != head.pair:
        raise ValueError(f"--train {'has' if head.pair else 'has no'} text pairs but --dev "
                         f"{'has none' if head.pair else 'has'}")
    options = FinetuneOptions(lr=args.lr, batch_size=args.batch_size, epochs=args.epochs, max_steps=args.max_steps,
                              warmup=args.warmup, weight_decay=args.weight_decay, patience=args.patience,
                              eval_every=args.eval_every, max_minutes=args.max_minutes, seed=args.seed,
                              metric=args.metric)
    print(f"fine-tuning {backbone.config.family} ({args.model}) on {len(train)} examples, dev {len(dev)}: "
          f"{head.objective}{' of pairs' if head.pair else ''}, pooling {head.pooling}, head {head.head}",
          file=sys.stderr)
    result = finetune(backbone.to(device), tokenizer, head, train, dev, options)
    result.model.save_pretrained(args.out, tokenizer)
    summary = {"model": str(args.model), "family": backbone.config.family, "task": args.task,
               "train": str(args.train), "dev": str(args.dev), "head": head.__dict__,
               "options": options.__dict__, "steps": result.steps, "seconds": round(result.seconds, 1),
               "best": result.best, "history": result.history, "out": str(args.out)}
    if args.results:
        Path(args.results).write_text(json.dumps(summary, indent=2) + "\n")
    best = " ".join(f"{k} {v:.4f}" for k, v in result.best.items() if k.startswith("dev_"))
    print(f"best dev (step {result.best.get('step')}): {best}; saved {args.out}")
    return 0
