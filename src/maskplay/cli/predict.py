"""`maskplay predict`: a fine-tuned model directory (`maskplay finetune`) on a file. See docs/guides/fine-tuning.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import positive_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser("predict", help=summary("predict"),
                       description="Predict labels (classification) or scores (regression) for --file: the formats "
                                   "finetune reads, or plain text (one per line, a tab between the texts of a pair).")
    q.add_argument("model", help="a directory written by `maskplay finetune`")
    q.add_argument("--file", required=True)
    q.add_argument("--text-column", default=None)
    q.add_argument("--text-pair-column", default=None)
    q.add_argument("--label-column", default=None)
    q.add_argument("--out", default=None, help="JSONL, one row per input (default: stdout)")
    q.add_argument("--batch-size", type=positive_int, default=64)
    q.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    q.set_defaults(func=run_predict)


def run_predict(args: argparse.Namespace) -> int:
    from ..runtime.devices import resolve_device
    from ..runtime.files import prepare_output_file
    from ..tasks.finetune import encode_examples, label_values, load_finetuned, metrics, predict_rows, read_examples

    device = resolve_device(args.device)  # before any work
    model, tokenizer = load_finetuned(args.model)
    model.to(device)
    head = model.head_config
    columns = dict(text_column=args.text_column, text_pair_column=args.text_pair_column, label_column=args.label_column)
    examples = read_examples(args.file, **columns, need_labels=False, need_pairs=head.pair or None)
    if head.pair and any(ex.pair is None for ex in examples):
        bad = next(ex for ex in examples if ex.pair is None)
        raise ValueError(f"{bad.where}: this model reads text pairs; the row has one text")
    outputs = predict_rows(model, encode_examples(examples, tokenizer, model.config, head.pair), args.batch_size,
                           progress=True)
    rows = []
    for out in outputs:
        if head.objective == "regress":
            rows.append({"score": float(out)})
        else:
            import numpy as np

            probs = np.exp(out - out.max())
            probs /= probs.sum()
            rows.append({"label": head.labels[int(out.argmax())],
                         "probs": {name: round(float(p), 6) for name, p in zip(head.labels, probs, strict=True)}})
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if args.out:
        prepare_output_file(args.out)
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    if all(ex.label not in (None, "") for ex in examples):
        scores = metrics(head, outputs, label_values(examples, head).numpy())
        print(" ".join(f"{k} {v:.4f}" for k, v in scores.items()), file=sys.stderr)
    return 0
