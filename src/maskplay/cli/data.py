"""`maskplay data titles`: build the (first paragraph -> title) seq2seq data set from WikiExtractor files.
`maskplay data fetch SET`: download a public evaluation set into the cache (maskplay.tasks.eval.fetch)."""

from __future__ import annotations

import argparse

from ..data.titles import TitlesConfig, build_titles
from .common import percent, positive_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help=summary("data"))
    tasks = p.add_subparsers(dest="task", required=True)
    t = tasks.add_parser("titles", help="Wikipedia first paragraph -> title pairs, split by document",
                         description=__doc__)
    t.add_argument("--corpus", nargs="+", required=True, metavar="PATH", help="WikiExtractor files or directories")
    t.add_argument("--tokenizer", required=True, metavar="PATH", help="a directory, tokenizer.json or vocab.txt")
    t.add_argument("--out", required=True, metavar="DIR", help="a new directory")
    defaults = TitlesConfig()
    t.add_argument("--max-source", type=positive_int, default=defaults.max_source, help="pieces of the paragraph kept")
    t.add_argument("--max-target", type=positive_int, default=defaults.max_target, help="longer titles are skipped")
    t.add_argument("--min-source-words", type=positive_int, default=defaults.min_source_words)
    t.add_argument("--dev-percent", type=percent, default=defaults.dev_percent)
    t.add_argument("--test-percent", type=percent, default=defaults.test_percent)
    t.set_defaults(func=run)
    f = tasks.add_parser("fetch", help="download public evaluation sets into the cache, where `maskplay eval` finds "
                                      "them (blimp, sts, sick, cola, spelling, wiki)",
                         description="Download public data sets from the repositories they come from, checksummed, "
                                     "into ~/.cache/maskplay/data ($MASKPLAY_CACHE or $XDG_CACHE_HOME move it), in "
                                     "the layout `maskplay eval` reads. docs/guides/models.md.")
    f.add_argument("sets", nargs="*", metavar="SET", help="blimp, sts, sick, cola, spelling, wiki")
    f.add_argument("--all", action="store_true", help="every set")
    f.set_defaults(func=run_fetch)


def run(args: argparse.Namespace) -> int:
    config = TitlesConfig(max_source=args.max_source, max_target=args.max_target,
                          min_source_words=args.min_source_words, dev_percent=args.dev_percent,
                          test_percent=args.test_percent)
    summary = build_titles(args.corpus, args.tokenizer, args.out, config, progress=True)
    pairs = summary["pairs"]
    print(f"{summary['documents']:,} documents from {summary['files']} files -> pairs: train {pairs['train']:,}, "
          f"dev {pairs['dev']:,}, test {pairs['test']:,}")
    for what, n in summary["counts"].items():
        print(f"  {what}: {n:,}")
    print(f"wrote {args.out}/{{train,dev,test}}.jsonl, {args.out}/train, {args.out}/valid, {args.out}/tokenizer.json, "
          f"{args.out}/summary.json")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from ..tasks.eval.fetch import fetch_set, set_names

    names = set_names() if args.all else args.sets
    if not names:
        raise ValueError(f"name the sets to fetch ({', '.join(set_names())}), or --all")
    unknown = [n for n in names if n not in set_names()]
    if unknown:
        raise ValueError(f"unknown data set {', '.join(unknown)}; the sets: {', '.join(set_names())}")
    for name in names:
        print(f"{name}: {fetch_set(name)}")
    return 0
