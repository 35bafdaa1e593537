"""`maskplay eval TASK MODEL_DIR`: sts, nbest, pairs, blimp, spelling, cola. Each prints its paper-style metric
and, with --out, writes the numbers and settings as JSON. `maskplay eval blimp-plot A.json B.json ...` draws
BLiMP results side by side. This module declares the options; the runners are maskplay.tasks.eval.run."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..runtime.files import OutputLock, prepare_output_file
from ..runtime.precision import Precision
from ..runtime.precision_probe import AUTO
from ..tasks.eval.run import run_blimp, run_blimp_plot, run_cola, run_nbest, run_pairs, run_spelling, run_sts
from ..tasks.score.passes import method_names
from ..tasks.score.scorer import Method
from .common import add_sif_arguments, positive_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help=summary("eval"))
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")
    from .seq2seq import add_eval_parser

    add_eval_parser(tasks, "seq2seq")  # the same command as `maskplay seq2seq eval`
    s = _task(tasks, "sts", "unsupervised STS: cosine of pooled embeddings vs gold; Spearman/Pearson x 100", run_sts,
              scoring=False, data_help="the shared data directory (default: searched in $MASKPLAY_DATA, ../shared/data "
              "and the cache `maskplay data fetch` fills)")
    from ..tasks.score.embed import Pooling

    s.add_argument("--datasets", nargs="+", choices=["stsb", "sick"], default=["stsb", "sick"])
    s.add_argument("--pooling", choices=[x.value for x in Pooling], default=None,
                   help="default: mean, or a sentence-transformers directory's own pooling")
    s.add_argument("--layer", type=int, default=-1,
                   help="0 = the embedding output (the input of block 1), 1..N = the output of block N, -1 = last")
    s.add_argument("--diagonal-mask", action=argparse.BooleanOptionalAction, default=True,
                   help="T-TA only: --no-diagonal-mask lets each position see its own token")
    add_sif_arguments(s)
    s.add_argument("--idf-from", default=None, metavar="FILE",
                   help="with --file: fit the TF-IDF baseline's IDF on this STS file's sentences (default: "
                        "sts-train.csv beside an STS-B file, a SICK file's TRAIN rows, else the evaluated sentences)")

    from ..tasks.eval.nbest import DEFAULT_WEIGHTS, FirstPass

    n = _task(tasks, "nbest", "LibriSpeech 30-best reranking: WER tuned on one dev split, reported on the other",
              run_nbest, data_help="folder with dev_clean.jsonl.gz and dev_other.jsonl.gz")
    n.add_argument("--first-pass", choices=[x.value for x in FirstPass], default=FirstPass.SCORE.value,
                   help="score: ESPnet's final score (its own LM included); am: without its LM term")
    n.add_argument("--weights", type=float, nargs="+", default=list(DEFAULT_WEIGHTS), help="LM weight grid")
    n.add_argument("--bonuses", type=float, nargs="+", default=[0.0], help="per-word length bonus grid")

    pr = _task(tasks, "pairs", "minimal pairs (BLiMP JSONL): accuracy per file and overall", run_pairs)
    pr.add_argument("--normalize", choices=["sum", "mean"], default="sum",
                    help="compare total log p (BLiMP) or the mean per piece")

    b = _task(tasks, "blimp", "BLiMP (default: its development half, 36 paradigms): a pair is right when the good "
              "sentence has the higher total log p; accuracy per phenomenon and the macro mean over paradigms",
              run_blimp, data_help="folder of BLiMP *.jsonl(.gz) files (default: the shared data's blimp-dev)")
    b.add_argument("--per-paradigm", action="store_true", help="also print every paradigm under its phenomenon")
    bp = tasks.add_parser("blimp-plot", help="plot `eval blimp --out` results side by side, per phenomenon",
                          description="accuracy per phenomenon of several `eval blimp --out` results, one colour a "
                                      "model, the BLiMP paper's models as lines")
    bp.add_argument("results", nargs="+", metavar="RESULTS_JSON")
    bp.add_argument("--out", required=True, help="the picture to write (.png, .pdf, .svg)")
    bp.add_argument("--labels", nargs="+", default=None, help="a name per results file (default: its model)")
    bp.set_defaults(func=run_blimp_plot)

    from ..tasks.eval.spelling import FILES

    sp = _task(tasks, "spelling", "real-word spelling error detection (Zesch 2012): top-1, P/R/F1", run_spelling,
               data_help="folder with the en_*.txt files")
    sp.add_argument("--tune-on", default=None, metavar="NAME",
                    help=f"file the threshold is tuned on: one of {', '.join(FILES)} with --data (default "
                         f"{FILES[0]}), the name of a --file (default: the first)")

    c = _task(tasks, "cola", "unsupervised CoLA: length-normalised score, threshold tuned on train, MCC on dev",
              run_cola, data_help="folder with in_domain_train.tsv, in_domain_dev.tsv, out_of_domain_dev.tsv")
    c.add_argument("--train-limit", type=positive_int, default=2000,
                   help="tune the threshold on a fixed random sample of this many training sentences")
    c.add_argument("--normalize", choices=["mean", "sum"], default="mean")
    c.add_argument("--tune-file", default=None, metavar="FILE",
                   help="with --file: tune the threshold on a sample of this CoLA tsv (default: on the --file "
                        "files themselves, reported as in-sample)")


def _task(tasks: argparse._SubParsersAction, name: str, help_text: str, func: Callable[[argparse.Namespace], int],
          scoring: bool = True, data_help: str = "override the default data location") -> argparse.ArgumentParser:
    """`maskplay eval NAME` with the options every task takes."""
    from ..tasks.eval.files import FORMATS

    t = tasks.add_parser(name, help=help_text, description=help_text)
    t.add_argument("model_dir", metavar="MODEL_DIR")
    t.add_argument("--out", default=None, help="write results as JSON here")
    t.add_argument("--limit", type=positive_int, default=None, help="evaluate only the first N items of each set")
    t.add_argument("--batch-size", type=positive_int, default=32)
    t.add_argument("--device", default=None, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    t.add_argument("--precision", choices=[AUTO, *(x.value for x in Precision)], default=AUTO,
                   help="auto (default): bf16 where this machine runs it faster than fp32, else fp32")
    if scoring:
        t.add_argument("--method", choices=method_names(), default=Method.AUTO.value,
                       help="auto (default): the family's own score; any method a registered family declares")
    source = t.add_mutually_exclusive_group(required=name == "pairs")  # blimp's default: the shared blimp-dev
    if name == "pairs":
        source.add_argument("--data", nargs="+", default=None, help="JSONL files or directories of them (as --file)")
    else:
        source.add_argument("--data", default=None, help=data_help)
    source.add_argument("--file", action="append", default=None, metavar="FILE",
                        help="evaluate on this file instead of --data (repeatable; gzip read as such); see "
                             "docs/guides/scoring.md for the formats")
    t.add_argument("--format", choices=FORMATS[name], default=None,
                   help="the format of every --file (default: told from each file's content)")
    t.set_defaults(func=_locked(func))
    return t


def _locked(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`func` holding the lock on --out for the whole evaluation: a second run given the same --out stops at once
    (a one-line error) instead of overwriting the first's results when it ends."""
    def run(args: argparse.Namespace) -> int:
        if args.out is None:
            return func(args)
        with OutputLock(prepare_output_file(args.out)):
            return func(args)

    return run
