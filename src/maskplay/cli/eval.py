"""`maskplay eval TASK MODEL_DIR`: sts, nbest, pairs, blimp, spelling, cola. Each prints its paper-style metric
and, with --out, writes the numbers and settings as JSON. `maskplay eval blimp-plot A.json B.json ...` draws
BLiMP results side by side."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..devices import resolve_device
from ..eval.files import portable
from ..files import OutputLock, prepare_output_file
from ..precision import Precision
from ..precision_probe import AUTO, resolve_cli
from ..score.scorer import Method, Overflow, Scorer
from .common import add_sif_arguments, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a model: sts, nbest, pairs, blimp, spelling, cola, seq2seq")
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")
    from .seq2seq import add_eval_parser

    add_eval_parser(tasks, "seq2seq")  # the same command as `maskplay seq2seq eval`
    s = _task(tasks, "sts", "unsupervised STS: cosine of pooled embeddings vs gold; Spearman/Pearson x 100", run_sts,
              scoring=False, data_help="the shared data directory (default: $MASKPLAY_DATA or ../shared/data)")
    from ..score.embed import Pooling

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

    from ..eval.nbest import DEFAULT_WEIGHTS, FirstPass

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

    from ..eval.spelling import FILES

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
    from ..eval.files import FORMATS

    t = tasks.add_parser(name, help=help_text, description=help_text)
    t.add_argument("model_dir", metavar="MODEL_DIR")
    t.add_argument("--out", default=None, help="write results as JSON here")
    t.add_argument("--limit", type=positive_int, default=None, help="evaluate only the first N items of each set")
    t.add_argument("--batch-size", type=positive_int, default=32)
    t.add_argument("--device", default=None, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    t.add_argument("--precision", choices=[AUTO, *(x.value for x in Precision)], default=AUTO,
                   help="auto (default): bf16 where this machine runs it faster than fp32, else fp32")
    if scoring:
        t.add_argument("--method", choices=[m.value for m in Method], default=Method.AUTO.value)
    source = t.add_mutually_exclusive_group(required=name == "pairs")  # blimp's default: the shared blimp-dev
    if name == "pairs":
        source.add_argument("--data", nargs="+", default=None, help="JSONL files or directories of them (as --file)")
    else:
        source.add_argument("--data", default=None, help=data_help)
    source.add_argument("--file", action="append", default=None, metavar="FILE",
                        help="evaluate on this file instead of --data (repeatable; gzip read as such); see "
                             "docs/SCORING.md for the formats")
    t.add_argument("--format", choices=FORMATS[name], default=None,
                   help="the format of every --file (default: told from each file's content)")
    t.set_defaults(func=_locked(func))
    return t


def _scorer(args: argparse.Namespace) -> Scorer:
    # Evaluations never fail on one long sentence: it is scored in windows (see docs/SCORING.md).
    return Scorer.from_pretrained(args.model_dir, batch_size=args.batch_size, device=resolve_device(args.device),
                                  method=Method(args.method), overflow=Overflow.WINDOW,
                                  precision=_precision(args), progress=True)


def _precision(args: argparse.Namespace) -> Precision:
    """--precision, auto resolved for this machine and the model (logged on stderr)."""
    return resolve_cli(args.precision, resolve_device(args.device), model_dir=args.model_dir,
                       rows=args.batch_size * 32, command=f"eval {args.task}")


def _locked(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`func` holding the lock on --out for the whole evaluation: a second run given the same --out stops at once
    (a one-line error) instead of overwriting the first's results when it ends."""
    def run(args: argparse.Namespace) -> int:
        if args.out is None:
            return func(args)
        with OutputLock(prepare_output_file(args.out)):
            return func(args)

    return run


def _early_checks(args: argparse.Namespace) -> None:
    """The arguments that can be wrong, checked before any data or model is read."""
    from ..eval.common import check_limit

    check_limit(args.limit)
    resolve_device(args.device)
    if args.out is not None:
        prepare_output_file(args.out)


def _header(args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    files = {"files": [portable(f) for f in args.file], "format": args.format} if args.file else {}
    return {"task": args.task, "model_dir": portable(args.model_dir), "limit": args.limit, **files, **extra}


def _given_files(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(result name, path, format) of each --file (directories expanded), every file read for its format before
    any model is loaded."""
    from ..eval.files import FORMATS, detect, expand, unique_names

    if args.data is not None:
        raise ValueError("give --file or --data, not both")
    paths = expand(args.task, args.file)
    names = unique_names(paths)
    formats = FORMATS[args.task]
    return [(name, path, args.format or (formats[0] if len(formats) == 1 else detect(args.task, path)))
            for name, path in zip(names, paths, strict=True)]


def _timed(label: str) -> Callable[[], None]:
    start = time.perf_counter()
    return lambda: print(f"({label}: {time.perf_counter() - start:.1f} s)")


def run_sts(args: argparse.Namespace) -> int:
    from ..eval.baselines import evaluate_baselines
    from ..eval.common import data_path, write_results
    from ..eval.sts import SICK, STSB, baseline_idf, evaluate_sts, load_sick, load_stsb
    from ..score.embed import Embedder, Pooling

    _early_checks(args)
    if args.idf_from is not None and not args.file:
        raise ValueError("--idf-from goes with --file (STS-B's IDF comes from its train sentences, SICK's from its "
                         "TRAIN rows)")
    given = _load_sts_files(args) if args.file else None
    embedder = Embedder.from_pretrained(args.model_dir, device=resolve_device(args.device),
                                        precision=_precision(args), frequencies=args.frequencies)
    args.pooling = args.pooling or embedder.default_pooling.value
    settings = {"pooling": args.pooling, "layer": args.layer, "diagonal_mask": args.diagonal_mask,
                "static": args.static, "remove_components": args.remove_components,
                "family": embedder.model.config.family}
    if args.pooling == Pooling.SIF.value:
        settings["sif_a"] = args.sif_a
        settings["frequencies"] = portable(Path(args.frequencies)) if args.frequencies else "model directory"

    def embed(texts: list[str]):
        return embedder.encode(texts, pooling=Pooling(args.pooling), layer=args.layer,
                               diagonal_mask=args.diagonal_mask, batch_size=args.batch_size,
                               overflow=Overflow.TRUNCATE, progress=True, static=args.static, sif_a=args.sif_a,
                               remove_components=args.remove_components)

    done = _timed("sts")
    results = {}
    root = Path(args.data) if args.data else None
    labels = {"stsb": "STS-B dev", "sick": "SICK tr+trial"}
    for name, (pairs, info) in (given or {}).items():
        results[name] = {**info, **evaluate_sts(pairs, embed)}
        labels[name] = name
    for name in args.datasets if given is None else []:
        rel = STSB if name == "stsb" else SICK
        path = data_path(root.joinpath(*rel) if root else None, *rel)
        pairs = (load_stsb if name == "stsb" else load_sick)(path, args.limit)
        results[name] = {"file": portable(path), **evaluate_sts(pairs, embed),
                         "baselines": evaluate_baselines(pairs, baseline_idf(pairs, name, path))}
    _print_sts(results, labels, settings, args)
    done()
    write_results(args.out, {**_header(args, settings), "results": results})
    return 0


def _print_sts(results: dict[str, dict[str, Any]], labels: dict[str, str], settings: dict[str, Any],
               args: argparse.Namespace) -> None:
    """The results table and where each TF-IDF baseline took its IDF from."""
    print(f"Unsupervised STS ({settings['family']}, {args.pooling} pooling, "
          f"{'the word-piece table' if args.static else f'layer {args.layer}'}"
          f"{f', {args.remove_components} component(s) removed' if args.remove_components else ''}"
          f"{', no diagonal mask' if not args.diagonal_mask else ''}): cosine vs gold, x 100")
    width = max(14, *(len(x) + 2 for x in labels))
    print(f"{'dataset':<{width}}{'pairs':>7}{'Spearman':>10}{'Pearson':>10}  |{'BoW':>7}{'TF-IDF':>8}")
    for name, r in results.items():
        skipped = r.get("skipped_empty_gold")
        note = f"   ({skipped} pairs without a gold score skipped)" if skipped else ""
        bow, tfidf = (r["baselines"][k]["spearman"] for k in ("bow", "tfidf"))
        print(f"{labels[name]:<{width}}{r['pairs']:>7}{r['spearman']:>10.2f}{r['pearson']:>10.2f}  |"
              f"{_number(bow):>7}{_number(tfidf):>8}{note}")
    print("| baselines without a model, Spearman: cosine of word counts (BoW) and of TF-IDF vectors, lower-cased \\w+ "
          "words; IDF from")
    for name, r in results.items():
        print(f"  {labels[name]}: {r['baselines']['tfidf']['idf_from']}")


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _load_sts_files(args: argparse.Namespace) -> dict[str, tuple[list, dict[str, Any]]]:
    from ..eval.baselines import evaluate_baselines
    from ..eval.files import semeval_pair
    from ..eval.sts import baseline_idf, load_sts_file

    out = {}
    for name, path, fmt in _given_files(args):
        pairs, skipped = load_sts_file(path, fmt, args.limit)
        info: dict[str, Any] = {"file": portable(path), "format": fmt}
        if fmt == "semeval":
            source, gold = semeval_pair(path)
            info.update(file=portable(source), gold_file=portable(gold), skipped_empty_gold=skipped)
        info["baselines"] = evaluate_baselines(pairs, baseline_idf(pairs, fmt, path, args.idf_from))
        out[name] = (pairs, info)
    return out


def run_nbest(args: argparse.Namespace) -> int:
    from ..eval.common import data_path, write_results
    from ..eval.nbest import FOLDER, SPLITS, FirstPass, check_grids, evaluate_nbest, load_nbest

    _early_checks(args)
    check_grids(args.weights, args.bonuses)
    if args.file:
        splits = {name: load_nbest(path, args.limit, fmt) for name, path, fmt in _given_files(args)}
    else:
        folder = data_path(args.data, FOLDER)
        splits = {s: load_nbest(data_path(folder / f"{s}.jsonl.gz"), args.limit, "jsonl") for s in SPLITS}
    scorer = _scorer(args)
    done = _timed("nbest")
    results = evaluate_nbest(splits, _sentence_values(scorer, "sum"),
                             FirstPass(args.first_pass), args.weights, args.bonuses)
    lists = "your lists" if args.file else "LibriSpeech 30-best (ESPnet conformer+HuBERT)"
    print(f"N-best reranking, {lists}; LM {scorer.model.config.family} "
          f"({scorer.method.value}); first pass = {args.first_pass}; WER %")
    width = max(11, *(len(x) + 2 for x in results))
    print(f"{'split':<{width}}{'utts':>6}{'words':>7}{'1-best':>8}{'oracle':>8}{'rerank':>8}  weight (tuned on)")
    for name, r in results.items():
        print(f"{name:<{width}}{r['utterances']:>6}{r['ref_words']:>7}{r['one_best_wer']:>8.2f}{r['oracle_wer']:>8.2f}"
              f"{r['reranked_wer']:>8.2f}  w={r['weight']:g} b={r['bonus']:g} ({r['tuned_on']})")
    done()
    write_results(args.out, {**_header(args, {"method": scorer.method.value, "first_pass": args.first_pass,
                                              "weights": args.weights, "bonuses": args.bonuses}),
                             "results": results})
    return 0


def _sentence_values(scorer: Scorer, normalize: str) -> Callable[[list[str]], list[float]]:
    def values(texts: list[str]) -> list[float]:
        scores = scorer.score(texts)
        out = [s.mean_log_prob if normalize == "mean" else s.log_prob for s in scores]
        for text, value in zip(texts, out, strict=True):
            if not math.isfinite(value):  # a nan would silently lose every comparison it is in
                raise ValueError(f"the model scored {text!r} as {value}: its weights give non-finite "
                                 "log-probabilities (damaged?)")
        return out

    return values


def run_pairs(args: argparse.Namespace) -> int:
    from ..eval.common import write_results
    from ..eval.files import base_name
    from ..eval.pairs import evaluate_pairs, load_pairs, pair_files

    _early_checks(args)
    if args.file:
        files = {name: load_pairs(path, args.limit) for name, path, _ in _given_files(args)}
    else:
        files = {base_name(f): load_pairs(f, args.limit) for f in pair_files(args.data)}
    scorer = _scorer(args)
    done = _timed("pairs")
    results = evaluate_pairs(files, _sentence_values(scorer, args.normalize))
    print(f"Minimal pairs ({scorer.model.config.family}, {scorer.method.value}, {args.normalize} log p): accuracy %")
    width = max(12, *(len(k) for k in results["files"]))
    for name, r in results["files"].items():
        print(f"{name:<{width}}{r['pairs']:>7}{r['accuracy']:>8.1f}")
    print(f"{'overall':<{width}}{results['pairs']:>7}{results['accuracy']:>8.1f}   (mean over files "
          f"{results['macro_accuracy']:.1f})")
    done()
    write_results(args.out, {**_header(args, {"method": scorer.method.value, "normalize": args.normalize,
                                              **({} if args.file else {"files": [portable(p) for p in args.data]})}),
                             "results": results})
    return 0


def run_blimp(args: argparse.Namespace) -> int:
    from ..eval.blimp import FOLDER, evaluate_blimp, format_table, load_blimp, reference_points
    from ..eval.common import data_path, write_results
    from ..eval.files import expand

    _early_checks(args)
    if args.file:
        paths, source = [path for _, path, _ in _given_files(args)], {}
    else:
        folder = data_path(args.data, FOLDER)
        paths, source = expand("blimp", [folder]), {"data": portable(folder)}
    pairs = load_blimp(paths, args.limit)
    scorer = _scorer(args)
    done = _timed("blimp")
    result = evaluate_blimp(_sentence_values(scorer, "sum"), pairs)
    print(f"BLiMP, {len(result['paradigms'])} paradigms ({'your files' if args.file else source['data']}), "
          f"{scorer.model.config.family} ({scorer.method.value}, {scorer.precision.value}): right when "
          f"log p(good) > log p(bad) (a tie is wrong); accuracy %")
    print("\n".join(format_table(result, args.per_paradigm)))
    done()
    write_results(args.out, {**_header(args, {"method": scorer.method.value, "family": scorer.model.config.family,
                                              "precision": scorer.precision.value, **source,
                                              "references": reference_points(result)}),
                             "results": result})
    return 0


def run_blimp_plot(args: argparse.Namespace) -> int:
    from ..eval.blimp import REFERENCE_MODELS, reference_points
    from ..viz import draw_blimp

    if args.labels is not None and len(args.labels) != len(args.results):
        raise ValueError(f"--labels: {len(args.labels)} names for {len(args.results)} results files")
    prepare_output_file(args.out)
    runs: dict[str, dict[str, Any]] = {}
    limits = set()
    for k, path in enumerate(args.results):
        label, result, limit = _blimp_results(path)
        limits.add(limit)
        label = args.labels[k] if args.labels else label
        if label in runs:
            raise ValueError(f"two results are labelled {label!r}: give --labels")
        runs[label] = result
    first = next(iter(runs.values()))
    same = len({tuple(r["paradigms"]) for r in runs.values()}) == 1
    refs = reference_points(first) if same else None
    if refs:
        refs = {m: {**v["phenomena"], "macro mean": v["macro_accuracy"]} for m, v in refs.items()}
    out = draw_blimp({label: {**{t: p["accuracy"] for t, p in r["phenomena"].items()}, "macro mean": r["macro_accuracy"]}
                      for label, r in runs.items()}, refs, args.out,
                     note=", ".join(f"first {n} pairs of each paradigm" if n else "all pairs" for n in sorted(
                         limits, key=lambda n: n or math.inf)))
    print(f"wrote {out}" + ("" if refs else f" (no {', '.join(REFERENCE_MODELS)} lines: the results are not all on "
                                             "the same development-half paradigms)"))
    return 0


def _blimp_results(path: str) -> tuple[str, dict[str, Any], int | None]:
    """(label, results, --limit) of one `eval blimp --out` file; anything else is a one-line error naming it."""
    import json

    from ..eval.blimp import check_result

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("task") != "blimp":
            raise ValueError("no BLiMP results in it")
        result = data.get("results")
        check_result(result)
        if not all(isinstance(data.get(k), str) for k in ("model_dir", "method")):
            raise ValueError("model_dir and method must be strings")
        limit = data.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ValueError(f"limit is {limit!r}, not a count")
        return f"{Path(data['model_dir']).name} ({data['method']})", result, limit
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not the --out of `maskplay eval blimp` ({err})"[:400]) from None


def run_spelling(args: argparse.Namespace) -> int:
    from ..eval.common import data_path, write_results
    from ..eval.spelling import FILES, FOLDER, evaluate_spelling, load_rwse

    _early_checks(args)
    if args.file:
        files = {name: load_rwse(path, args.limit) for name, path, _ in _given_files(args)}
    else:
        folder = data_path(args.data, FOLDER)
        files = {name: load_rwse(data_path(folder / f"{name}.txt"), args.limit) for name in FILES}
    tune_on = args.tune_on or next(iter(files))
    if tune_on not in files:
        raise ValueError(f"--tune-on {tune_on}: not among the files {', '.join(files)}")
    scorer = _scorer(args)
    done = _timed("spelling")
    results = evaluate_spelling(files, scorer.score, tune_on)
    print(f"Real-word error detection (Zesch 2012), {scorer.model.config.family} ({scorer.method.value}); "
          f"threshold {results['threshold']:.2f} nats tuned on {tune_on}")
    width = max(22, *(len(x) + 2 for x in files))
    print(f"{'file':<{width}}{'items':>6}{'top1':>7}{'pair':>7}   always-flag P/R/F1      tuned P/R/F1")
    for name, r in results["files"].items():
        a, t = r["always_flag"], r["tuned"]
        mark = " (in-sample)" if t["in_sample"] else ""
        print(f"{name:<{width}}{r['items']:>6}{r['top1']:>7.1f}{r['pair_accuracy']:>7.1f}   "
              f"{a['precision']:5.1f} {a['recall']:5.1f} {a['f1']:5.1f}   {t['precision']:5.1f} {t['recall']:5.1f} "
              f"{t['f1']:5.1f}{mark}")
    done()
    write_results(args.out, {**_header(args, {"method": scorer.method.value, "tune_on": tune_on}),
                             "results": results})
    return 0


def run_cola(args: argparse.Namespace) -> int:
    from ..eval.cola import DEVS, FOLDER, TRAIN, evaluate_cola, load_cola, sample
    from ..eval.common import data_path, limit_rows, write_results

    _early_checks(args)
    if args.train_limit is not None and args.train_limit < 2:
        raise ValueError(f"--train-limit must be at least 2, got {args.train_limit}")
    in_sample = False
    if args.file:
        # a file named train.tsv must not take the place of the results' own "train" entry
        devs = {(str(path) if name in ("threshold", "train", "in_sample") else name): limit_rows(load_cola(path), args.limit)
                for name, path, _ in _given_files(args)}
        in_sample = args.tune_file is None
        tuning = [j for rows in devs.values() for j in rows] if in_sample else load_cola(args.tune_file)
        train = sample(tuning, args.train_limit)
    else:
        if args.tune_file is not None:
            raise ValueError("--tune-file goes with --file (with --data the threshold is tuned on in_domain_train)")
        folder = data_path(args.data, *FOLDER)
        train = sample(load_cola(data_path(folder / TRAIN)), args.train_limit)
        devs = {Path(d).stem: limit_rows(load_cola(data_path(folder / d)), args.limit) for d in DEVS}
    scorer = _scorer(args)
    done = _timed("cola")
    results = evaluate_cola(train, devs, _sentence_values(scorer, args.normalize))
    results["in_sample"] = in_sample
    source = ("the files themselves (in-sample)" if in_sample else portable(args.tune_file)) if args.file else "train"
    print(f"Unsupervised CoLA, {scorer.model.config.family} ({scorer.method.value}, {args.normalize} log p >= "
          f"{results['threshold']:.3f}; threshold tuned on {len(train)} sentences of {source}, MCC there "
          f"{results['train']['mcc']:.1f})")
    width = max(22, *(len(x) + 2 for x in devs))
    print(f"{'set':<{width}}{'sentences':>10}{'MCC x100':>10}{'acc %':>8}")
    for name in devs:
        r = results[name]
        print(f"{name:<{width}}{r['sentences']:>10}{r['mcc']:>10.1f}{r['accuracy']:>8.1f}")
    done()
    write_results(args.out, {**_header(args, {"method": scorer.method.value, "normalize": args.normalize,
                                              "train_limit": args.train_limit,
                                              **({"tune_file": portable(args.tune_file)} if args.tune_file else {})}),
                             "results": results})
    return 0
