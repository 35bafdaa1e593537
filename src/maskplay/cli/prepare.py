"""`maskplay prepare`: tokenize corpora into train/valid splits for pretraining."""

from __future__ import annotations

import argparse
import os

from ..data.prepare import MODES, OVERLONG, PrepareConfig, prepare_corpus
from ..data.readers import FORMATS, INVALID_UTF8_POLICIES
from .common import fraction, positive_int, seed_int
from .summaries import summary


def _prepare(args: argparse.Namespace) -> int:
    config = PrepareConfig(mode=args.mode, max_length=args.max_length, valid_fraction=args.valid_fraction,
                           overlong=args.overlong, workers=args.workers, seed=args.seed,
                           on_invalid_utf8=args.on_invalid_utf8, format=args.format, overwrite=args.overwrite,
                           progress=not args.quiet)
    summary = prepare_corpus(args.corpus, args.tokenizer, args.out, config)
    print(summary.table())
    print(f"wrote {args.out}/train, {args.out}/valid, {args.out}/tokenizer.json, {args.out}/summary.json")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help=summary("prepare"))
    p.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                   help="text, .gz, JSONL or WikiExtractor files; a directory means every file in it")
    p.add_argument("--tokenizer", required=True, metavar="PATH", help="a directory, tokenizer.json or vocab.txt")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--mode", choices=MODES, default="sentences",
                   help="sentences: one sentence per sequence (as T-TA trains); blocks: a document's sentences "
                        "packed greedily up to --max-length")
    p.add_argument("--max-length", type=positive_int, default=128, help="tokens per sequence, [SOS] and [EOS] included")
    p.add_argument("--valid-fraction", type=fraction, default=0.01, help="fraction of documents held out")
    p.add_argument("--overlong", choices=OVERLONG, default="truncate",
                   help="a sentence over --max-length is truncated, or split into windows")
    p.add_argument("--workers", type=positive_int, default=min(4, os.cpu_count() or 1),
                   help="tokenizing processes (1 = in this process)")
    p.add_argument("--seed", type=seed_int, default=0, help="chooses the held-out documents")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="auto: by extension and first line; text: a document per line; paragraphs: blank-line-"
                        "separated hard-wrapped blocks; jsonl: a \"text\" field per line; wikiextractor: <doc> files")
    p.add_argument("--on-invalid-utf8", choices=INVALID_UTF8_POLICIES, default="error")
    p.add_argument("--overwrite", action="store_true", help="replace a corpus already prepared in --out")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=_prepare)
