"""`maskplay seq2seq train`: fine-tune a model on `[SOS] source [SEP] target [EOS]` data (`maskplay data titles`).

It is `maskplay pretrain` with the family set (UniLM by default, with model.unilm.objective = seq2seq; or GPT,
which reads source [SEP] target as one stream and learns every next token) and every pretrain option: --init
BERT_DIR starts UniLM from a BERT checkpoint (no new weights); without it the weights are random. Resume,
checkpoints, logging and torchrun are pretrain's."""

from __future__ import annotations

import argparse

SEQ2SEQ_FAMILIES = ("unilm", "gpt")


def add_parser(sub: argparse._SubParsersAction) -> None:
    from .train import cli as train_cli

    # pretrain's own options, copied (argparse parents) so that both commands always take the same ones
    holder = argparse.ArgumentParser(add_help=False).add_subparsers()
    train_cli.add_parser(holder)
    pretrain = holder.choices["pretrain"]
    p = sub.add_parser("seq2seq", help="fine-tune UniLM (a BERT + the seq2seq mask) or GPT on source -> target pairs")
    tasks = p.add_subparsers(dest="task", required=True)
    t = tasks.add_parser("train", parents=[pretrain], conflict_handler="resolve", description=__doc__,
                         help="maskplay pretrain on seq2seq data, family unilm (default) or gpt",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="example:\n  maskplay seq2seq train --init runs/bert/final --data runs/titles "
                                "--out runs/unilm-titles --max-minutes 20")
    t.add_argument("--family", choices=SEQ2SEQ_FAMILIES, default="unilm", help="model.family")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .train.cli import run as pretrain

    if args.family == "unilm":
        args.overrides = ["model.unilm.objective=seq2seq", *args.overrides]
    return pretrain(args)
