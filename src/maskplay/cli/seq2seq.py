"""`maskplay seq2seq train`: fine-tune a model on `[SOS] source [SEP] target [EOS]` data (`maskplay data titles`).

It is `maskplay pretrain` with the family set (UniLM by default, with model.unilm.objective = seq2seq; or GPT,
which reads source [SEP] target as one stream and learns every next token) and every pretrain option: --init
BERT_DIR starts UniLM from a BERT checkpoint (no new weights); without it the weights are random. Resume,
checkpoints, logging and torchrun are pretrain's."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..families import families, family_class
from .common import positive_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    from . import pretrain as train_cli

    # pretrain's own options, copied (argparse parents) so that both commands always take the same ones
    holder = argparse.ArgumentParser(add_help=False).add_subparsers()
    train_cli.add_parser(holder)
    pretrain = holder.choices["pretrain"]
    p = sub.add_parser("seq2seq", help=summary("seq2seq"))
    tasks = p.add_subparsers(dest="task", required=True)
    generating = [f.family for f in families() if f.can_generate]  # a seq2seq model generates its targets
    t = tasks.add_parser("train", parents=[pretrain], conflict_handler="resolve", description=__doc__,
                         help=f"maskplay pretrain on seq2seq data, family {', '.join(generating)} (default unilm)",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="example:\n  maskplay seq2seq train --init runs/bert/final --data runs/titles "
                                "--out runs/unilm-titles --max-minutes 20")
    t.add_argument("--family", choices=generating, default="unilm", help=f"model.family: {', '.join(generating)}")
    t.set_defaults(func=run)

    add_eval_parser(tasks)


def add_eval_parser(tasks: argparse._SubParsersAction, name: str = "eval") -> None:
    """`maskplay seq2seq eval`, also registered as `maskplay eval seq2seq` (name="seq2seq")."""
    e = tasks.add_parser(name,
                         help="ROUGE-1/2/L and exact match of generated targets on a JSONL file",
                         description="Generate a target for every source of --data and score it against the "
                                     "reference (ROUGE F1 x 100 from the rouge-score package, exact match %). "
                                     "MODEL may also be first-words:K, the trivial baseline.")
    e.add_argument("model_dir", metavar="MODEL", help="a unilm or gpt model directory, or first-words:K")
    e.add_argument("--data", required=True, metavar="JSONL", help="e.g. runs/titles/dev.jsonl")
    e.add_argument("--limit", type=positive_int, default=None, help="only the first N pairs")
    e.add_argument("--strategy", choices=("greedy", "beam"), default="greedy")
    e.add_argument("--num-beams", type=positive_int, default=4)
    e.add_argument("--max-new-tokens", type=positive_int, default=24)
    e.add_argument("--max-source", type=positive_int, default=96, help="source pieces kept (as `data titles` cut them)")
    e.add_argument("--batch-size", type=positive_int, default=32)
    e.add_argument("--precision", choices=("auto", "fp32", "bf16", "int8"), default="auto",
                   help="auto (default): bf16 where this machine runs it faster than fp32, else fp32")
    e.add_argument("--out", default=None, help="write the scores (and every prediction) as JSON here")
    e.set_defaults(func=run_eval)


def run(args: argparse.Namespace) -> int:
    from .pretrain import run as pretrain

    args.overrides = [*family_class(args.family).seq2seq_overrides, *args.overrides]  # UniLM's seq2seq objective
    return pretrain(args)


def _first_words_k(model: str) -> int | None:
    """K of MODEL = first-words:K (a positive integer), None for a model directory."""
    if not model.startswith("first-words:"):
        return None
    k = model.split(":", 1)[1]
    if not (k.isascii() and k.isdigit() and int(k) > 0):
        raise ValueError(f"MODEL {model!r}: first-words:K needs a positive integer K (the words kept), got {k!r}")
    return int(k)


def run_eval(args: argparse.Namespace) -> int:
    import json
    import time

    from ..runtime.files import atomic_path
    from ..tasks.eval.seq2seq import first_words, generate_targets, read_pairs, scores, summary_line

    k = _first_words_k(args.model_dir)  # checked before any work
    pairs = read_pairs(args.data, args.limit)
    start = time.monotonic()
    if k is not None:
        predictions = [first_words(p.source, k) for p in pairs]
    else:
        from ..tasks.score.scorer import load_model_dir
        from .generate import for_precision, resolved_precision

        model, tokenizer = load_model_dir(args.model_dir)
        model = for_precision(model, resolved_precision(model, args.precision, None, "seq2seq eval"))
        predictions = generate_targets(model, tokenizer, [p.source for p in pairs], args.max_source,
                                       strategy=args.strategy, num_beams=args.num_beams,
                                       max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, progress=True)
    result = scores(predictions, [p.target for p in pairs])
    seconds = time.monotonic() - start
    print(f"{'model':<34} {'ROUGE-1':>8} {'ROUGE-2':>8} {'ROUGE-L':>8} {'exact %':>8}   ({len(pairs)} pairs, "
          f"{args.strategy}, {seconds:.1f} s)")
    print(summary_line(args.model_dir, result))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        record = {"model": args.model_dir, "data": args.data, "pairs": len(pairs), "strategy": args.strategy,
                  "num_beams": args.num_beams if args.strategy == "beam" else None, "seconds": seconds, **result,
                  "predictions": [{"source": p.source, "target": p.target, "prediction": pred}
                                  for p, pred in zip(pairs, predictions, strict=True)]}
        with atomic_path(out) as tmp:
            tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out}")
    return 0
