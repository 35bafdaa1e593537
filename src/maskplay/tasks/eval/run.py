"""The runners of `maskplay eval TASK MODEL_DIR` (sts, nbest, pairs, blimp, spelling, cola, blimp-plot): each reads
its data (or the --file files), loads the model once, runs the task's evaluate_* and prints its paper-style table,
then writes the numbers and settings as JSON with --out. `options` is the parsed command line (maskplay.cli.eval
declares the options; their names are the attributes read here)."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...runtime.devices import resolve_device
from ...runtime.files import prepare_output_file
from ...runtime.precision import Precision
from ...runtime.precision_probe import resolve_cli
from ..score.passes import as_method, method_name
from ..score.scorer import Overflow, Scorer
from .files import portable


def _scorer(options: argparse.Namespace) -> Scorer:
    # Evaluations never fail on one long sentence: it is scored in windows (see docs/guides/scoring.md).
    return Scorer.from_pretrained(options.model_dir, batch_size=options.batch_size, device=resolve_device(options.device),
                                  method=as_method(options.method), overflow=Overflow.WINDOW,
                                  precision=_precision(options), progress=True)


def _precision(options: argparse.Namespace) -> Precision:
    """--precision, auto resolved for this machine and the model (logged on stderr)."""
    return resolve_cli(options.precision, resolve_device(options.device), model_dir=options.model_dir,
                       rows=options.batch_size * 32, command=f"eval {options.task}")


def _early_checks(options: argparse.Namespace) -> None:
    """The arguments that can be wrong, checked before any data or model is read."""
    from .common import check_limit

    check_limit(options.limit)
    resolve_device(options.device)
    if options.out is not None:
        prepare_output_file(options.out)


def _header(options: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    files = {"files": [portable(f) for f in options.file], "format": options.format} if options.file else {}
    return {"task": options.task, "model_dir": portable(options.model_dir), "limit": options.limit, **files, **extra}


def _given_files(options: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(result name, path, format) of each --file (directories expanded), every file read for its format before
    any model is loaded."""
    from .files import FORMATS, detect, expand, unique_names

    if options.data is not None:
        raise ValueError("give --file or --data, not both")
    paths = expand(options.task, options.file)
    names = unique_names(paths)
    formats = FORMATS[options.task]
    return [(name, path, options.format or (formats[0] if len(formats) == 1 else detect(options.task, path)))
            for name, path in zip(names, paths, strict=True)]


def _timed(label: str) -> Callable[[], None]:
    start = time.perf_counter()
    return lambda: print(f"({label}: {time.perf_counter() - start:.1f} s)")


def run_sts(options: argparse.Namespace) -> int:
    from ..score.embed import Embedder, Pooling
    from .baselines import evaluate_baselines
    from .common import data_path, write_results
    from .sts import SICK, STSB, baseline_idf, evaluate_sts, load_sick, load_stsb

    _early_checks(options)
    if options.idf_from is not None and not options.file:
        raise ValueError("--idf-from goes with --file (STS-B's IDF comes from its train sentences, SICK's from its "
                         "TRAIN rows)")
    given = _load_sts_files(options) if options.file else None
    embedder = Embedder.from_pretrained(options.model_dir, device=resolve_device(options.device),
                                        precision=_precision(options), frequencies=options.frequencies)
    options.pooling = options.pooling or embedder.default_pooling.value
    settings = {"pooling": options.pooling, "layer": options.layer, "diagonal_mask": options.diagonal_mask,
                "static": options.static, "remove_components": options.remove_components,
                "family": embedder.model.config.family}
    if options.pooling == Pooling.SIF.value:
        settings["sif_a"] = options.sif_a
        settings["frequencies"] = portable(Path(options.frequencies)) if options.frequencies else "model directory"

    def embed(texts: list[str]):
        return embedder.encode(texts, pooling=Pooling(options.pooling), layer=options.layer,
                               diagonal_mask=options.diagonal_mask, batch_size=options.batch_size,
                               overflow=Overflow.TRUNCATE, progress=True, static=options.static, sif_a=options.sif_a,
                               remove_components=options.remove_components)

    done = _timed("sts")
    results = {}
    root = Path(options.data) if options.data else None
    labels = {"stsb": "STS-B dev", "sick": "SICK tr+trial"}
    for name, (pairs, info) in (given or {}).items():
        results[name] = {**info, **evaluate_sts(pairs, embed)}
        labels[name] = name
    for name in options.datasets if given is None else []:
        rel = STSB if name == "stsb" else SICK
        path = data_path(root.joinpath(*rel) if root else None, *rel)
        pairs = (load_stsb if name == "stsb" else load_sick)(path, options.limit)
        results[name] = {"file": portable(path), **evaluate_sts(pairs, embed),
                         "baselines": evaluate_baselines(pairs, baseline_idf(pairs, name, path))}
    _print_sts(results, labels, settings, options)
    done()
    write_results(options.out, {**_header(options, settings), "results": results})
    return 0


def _print_sts(results: dict[str, dict[str, Any]], labels: dict[str, str], settings: dict[str, Any],
               options: argparse.Namespace) -> None:
    """The results table and where each TF-IDF baseline took its IDF from."""
    print(f"Unsupervised STS ({settings['family']}, {options.pooling} pooling, "
          f"{'the word-piece table' if options.static else f'layer {options.layer}'}"
          f"{f', {options.remove_components} component(s) removed' if options.remove_components else ''}"
          f"{', no diagonal mask' if not options.diagonal_mask else ''}): cosine vs gold, x 100")
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


def _load_sts_files(options: argparse.Namespace) -> dict[str, tuple[list, dict[str, Any]]]:
    from .baselines import evaluate_baselines
    from .files import semeval_pair
    from .sts import baseline_idf, load_sts_file

    out = {}
    for name, path, fmt in _given_files(options):
        pairs, skipped = load_sts_file(path, fmt, options.limit)
        info: dict[str, Any] = {"file": portable(path), "format": fmt}
        if fmt == "semeval":
            source, gold = semeval_pair(path)
            info.update(file=portable(source), gold_file=portable(gold), skipped_empty_gold=skipped)
        info["baselines"] = evaluate_baselines(pairs, baseline_idf(pairs, fmt, path, options.idf_from))
        out[name] = (pairs, info)
    return out


def run_nbest(options: argparse.Namespace) -> int:
    from .common import data_path, write_results
    from .nbest import FOLDER, SPLITS, FirstPass, check_grids, evaluate_nbest, load_nbest

    _early_checks(options)
    check_grids(options.weights, options.bonuses)
    if options.file:
        splits = {name: load_nbest(path, options.limit, fmt) for name, path, fmt in _given_files(options)}
    else:
        folder = data_path(options.data, FOLDER)
        splits = {s: load_nbest(data_path(folder / f"{s}.jsonl.gz"), options.limit, "jsonl") for s in SPLITS}
    scorer = _scorer(options)
    done = _timed("nbest")
    results = evaluate_nbest(splits, _sentence_values(scorer, "sum"),
                             FirstPass(options.first_pass), options.weights, options.bonuses)
    lists = "your lists" if options.file else "LibriSpeech 30-best (ESPnet conformer+HuBERT)"
    print(f"N-best reranking, {lists}; LM {scorer.model.config.family} "
          f"({method_name(scorer.method)}); first pass = {options.first_pass}; WER %")
    width = max(11, *(len(x) + 2 for x in results))
    print(f"{'split':<{width}}{'utts':>6}{'words':>7}{'1-best':>8}{'oracle':>8}{'rerank':>8}  weight (tuned on)")
    for name, r in results.items():
        print(f"{name:<{width}}{r['utterances']:>6}{r['ref_words']:>7}{r['one_best_wer']:>8.2f}{r['oracle_wer']:>8.2f}"
              f"{r['reranked_wer']:>8.2f}  w={r['weight']:g} b={r['bonus']:g} ({r['tuned_on']})")
    done()
    write_results(options.out, {**_header(options, {"method": method_name(scorer.method), "first_pass": options.first_pass,
                                              "weights": options.weights, "bonuses": options.bonuses}),
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


def run_pairs(options: argparse.Namespace) -> int:
    from .common import write_results
    from .files import base_name
    from .pairs import evaluate_pairs, load_pairs, pair_files

    _early_checks(options)
    if options.file:
        files = {name: load_pairs(path, options.limit) for name, path, _ in _given_files(options)}
    else:
        files = {base_name(f): load_pairs(f, options.limit) for f in pair_files(options.data)}
    scorer = _scorer(options)
    done = _timed("pairs")
    results = evaluate_pairs(files, _sentence_values(scorer, options.normalize))
    print(f"Minimal pairs ({scorer.model.config.family}, {method_name(scorer.method)}, {options.normalize} log p): "
          "accuracy %")
    width = max(12, *(len(k) for k in results["files"]))
    for name, r in results["files"].items():
        print(f"{name:<{width}}{r['pairs']:>7}{r['accuracy']:>8.1f}")
    print(f"{'overall':<{width}}{results['pairs']:>7}{results['accuracy']:>8.1f}   (mean over files "
          f"{results['macro_accuracy']:.1f})")
    done()
    write_results(options.out, {**_header(options, {"method": method_name(scorer.method), "normalize": options.normalize,
                                              **({} if options.file else {"files": [portable(p) for p in options.data]})}),
                             "results": results})
    return 0


def run_blimp(options: argparse.Namespace) -> int:
    from .blimp import FOLDER, evaluate_blimp, format_table, load_blimp, reference_points
    from .common import data_path, write_results
    from .files import expand

    _early_checks(options)
    if options.file:
        paths, source = [path for _, path, _ in _given_files(options)], {}
    else:
        folder = data_path(options.data, FOLDER)
        paths, source = expand("blimp", [folder]), {"data": portable(folder)}
    pairs = load_blimp(paths, options.limit)
    scorer = _scorer(options)
    done = _timed("blimp")
    result = evaluate_blimp(_sentence_values(scorer, "sum"), pairs)
    print(f"BLiMP, {len(result['paradigms'])} paradigms ({'your files' if options.file else source['data']}), "
          f"{scorer.model.config.family} ({method_name(scorer.method)}, {scorer.precision.value}): right when "
          f"log p(good) > log p(bad) (a tie is wrong); accuracy %")
    print("\n".join(format_table(result, options.per_paradigm)))
    done()
    write_results(options.out, {**_header(options, {"method": method_name(scorer.method),
                                                    "family": scorer.model.config.family,
                                                    "precision": scorer.precision.value, **source,
                                                    "references": reference_points(result)}),
                             "results": result})
    return 0


def run_blimp_plot(options: argparse.Namespace) -> int:
    from ..viz import draw_blimp
    from .blimp import REFERENCE_MODELS, reference_points

    if options.labels is not None and len(options.labels) != len(options.results):
        raise ValueError(f"--labels: {len(options.labels)} names for {len(options.results)} results files")
    prepare_output_file(options.out)
    runs: dict[str, dict[str, Any]] = {}
    limits = set()
    for k, path in enumerate(options.results):
        label, result, limit = _blimp_results(path)
        limits.add(limit)
        label = options.labels[k] if options.labels else label
        if label in runs:
            raise ValueError(f"two results are labelled {label!r}: give --labels")
        runs[label] = result
    first = next(iter(runs.values()))
    same = len({tuple(r["paradigms"]) for r in runs.values()}) == 1
    refs = reference_points(first) if same else None
    if refs:
        refs = {m: {**v["phenomena"], "macro mean": v["macro_accuracy"]} for m, v in refs.items()}
    out = draw_blimp({label: {**{t: p["accuracy"] for t, p in r["phenomena"].items()}, "macro mean": r["macro_accuracy"]}
                      for label, r in runs.items()}, refs, options.out,
                     note=", ".join(f"first {n} pairs of each paradigm" if n else "all pairs" for n in sorted(
                         limits, key=lambda n: n or math.inf)))
    print(f"wrote {out}" + ("" if refs else f" (no {', '.join(REFERENCE_MODELS)} lines: the results are not all on "
                                             "the same development-half paradigms)"))
    return 0


def _blimp_results(path: str) -> tuple[str, dict[str, Any], int | None]:
    """(label, results, --limit) of one `eval blimp --out` file; anything else is a one-line error naming it."""
    import json

    from .blimp import check_result

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


def run_spelling(options: argparse.Namespace) -> int:
    from .common import data_path, write_results
    from .spelling import FILES, FOLDER, evaluate_spelling, load_rwse

    _early_checks(options)
    if options.file:
        files = {name: load_rwse(path, options.limit) for name, path, _ in _given_files(options)}
    else:
        folder = data_path(options.data, FOLDER)
        files = {name: load_rwse(data_path(folder / f"{name}.txt"), options.limit) for name in FILES}
    tune_on = options.tune_on or next(iter(files))
    if tune_on not in files:
        raise ValueError(f"--tune-on {tune_on}: not among the files {', '.join(files)}")
    scorer = _scorer(options)
    done = _timed("spelling")
    results = evaluate_spelling(files, scorer.score, tune_on)
    print(f"Real-word error detection (Zesch 2012), {scorer.model.config.family} ({method_name(scorer.method)}); "
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
    write_results(options.out, {**_header(options, {"method": method_name(scorer.method), "tune_on": tune_on}),
                             "results": results})
    return 0


def run_cola(options: argparse.Namespace) -> int:
    from .cola import DEVS, FOLDER, TRAIN, evaluate_cola, load_cola, sample
    from .common import data_path, limit_rows, write_results

    _early_checks(options)
    if options.train_limit is not None and options.train_limit < 2:
        raise ValueError(f"--train-limit must be at least 2, got {options.train_limit}")
    in_sample = False
    if options.file:
        # a file named train.tsv must not take the place of the results' own "train" entry
        devs = {(str(path) if name in ("threshold", "train", "in_sample") else name):
                limit_rows(load_cola(path), options.limit) for name, path, _ in _given_files(options)}
        in_sample = options.tune_file is None
        tuning = [j for rows in devs.values() for j in rows] if in_sample else load_cola(options.tune_file)
        train = sample(tuning, options.train_limit)
    else:
        if options.tune_file is not None:
            raise ValueError("--tune-file goes with --file (with --data the threshold is tuned on in_domain_train)")
        folder = data_path(options.data, *FOLDER)
        train = sample(load_cola(data_path(folder / TRAIN)), options.train_limit)
        devs = {Path(d).stem: limit_rows(load_cola(data_path(folder / d)), options.limit) for d in DEVS}
    scorer = _scorer(options)
    done = _timed("cola")
    results = evaluate_cola(train, devs, _sentence_values(scorer, options.normalize))
    results["in_sample"] = in_sample
    source = ("the files themselves (in-sample)" if in_sample else portable(options.tune_file)) if options.file else "train"
    print(f"Unsupervised CoLA, {scorer.model.config.family} ({method_name(scorer.method)}, {options.normalize} log p >= "
          f"{results['threshold']:.3f}; threshold tuned on {len(train)} sentences of {source}, MCC there "
          f"{results['train']['mcc']:.1f})")
    width = max(22, *(len(x) + 2 for x in devs))
    print(f"{'set':<{width}}{'sentences':>10}{'MCC x100':>10}{'acc %':>8}")
    for name in devs:
        r = results[name]
        print(f"{name:<{width}}{r['sentences']:>10}{r['mcc']:>10.1f}{r['accuracy']:>8.1f}")
    done()
    write_results(options.out, {**_header(options, {"method": method_name(scorer.method), "normalize": options.normalize,
                                              "train_limit": options.train_limit,
                                              **({"tune_file": portable(options.tune_file)} if options.tune_file else {})}),
                             "results": results})
    return 0
