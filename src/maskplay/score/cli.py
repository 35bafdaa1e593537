"""`maskplay score` and `maskplay embed`."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path

import numpy as np

from ..devices import resolve_device
from ..modeling import atomic_path, prepare_output_file
from ..precision import Precision
from .scorer import Method, Overflow, SentenceScore


def _read_input(args: argparse.Namespace) -> list[tuple[int, str]]:
    """(index, sentence): index = line number for --file / stdin, argument position for SENTENCE args."""
    from .text import read_lines

    sentences = getattr(args, "sentences", None) or []
    if sentences and args.file is not None:
        raise ValueError("give sentences as arguments or with --file, not both")
    if sentences:
        for k, s in enumerate(sentences, start=1):
            if not s.strip():
                raise ValueError(f"sentence argument {k} is empty")
        return list(enumerate(sentences, start=1))
    if args.file is None and sys.stdin.isatty():
        raise ValueError("no input: give sentences as arguments, --file F, or pipe them on stdin")
    return read_lines(args.file)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="config.json + model.safetensors + tokenizer.json")
    p.add_argument("--file", default=None, help="one sentence per line (UTF-8); '-' = stdin")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--precision", choices=[p.value for p in Precision], default=Precision.fp32.value)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="sentence log-likelihoods (T-TA one pass, BERT PLL, GPT causal)",
                       description="Log-likelihood of each sentence: the sum over its word pieces of log p "
                                   "(nats); [SOS]/[EOS] are not scored.")
    _add_common(p)
    p.add_argument("sentences", nargs="*", metavar="SENTENCE")
    p.add_argument("--format", choices=["table", "jsonl", "tsv"], default="table")
    p.add_argument("--method", choices=[m.value for m in Method], default=Method.AUTO.value,
                   help="auto = one-pass for T-TA, pll for BERT, causal for GPT, discriminator for ELECTRA "
                        "(sum of log P(original)); pll on ELECTRA = its generator's PLL")
    p.add_argument("--overflow", choices=[Overflow.ERROR.value, Overflow.WINDOW.value], default=Overflow.ERROR.value,
                   help="a sentence longer than the model: error, or score it in overlapping windows")
    p.add_argument("--explain", action="store_true",
                   help="show each piece's surprisal (ELECTRA: its probability of having been replaced); mark the "
                        "most surprising word")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="colours for --explain (auto: only when stdout is a terminal)")
    p.set_defaults(func=run_score)

    e = sub.add_parser("embed", help="sentence embeddings to .npy or .jsonl")
    _add_common(e)
    e.add_argument("--out", required=True, help="X.npy (float32 matrix, one row per line) or X.jsonl")
    from .embed import Pooling

    e.add_argument("--pooling", choices=[p.value for p in Pooling], default=Pooling.MEAN.value)
    e.add_argument("--layer", type=int, default=-1,
                   help="hidden state: 0 = the embedding output (the input of block 1), 1..N = the output of "
                        "block N, -1 = last")
    e.add_argument("--diagonal-mask", action=argparse.BooleanOptionalAction, default=True,
                   help="T-TA only: --no-diagonal-mask lets each position see its own token")
    e.add_argument("--normalize", action="store_true", help="unit-length rows")
    e.add_argument("--overflow", choices=[Overflow.ERROR.value, Overflow.TRUNCATE.value],
                   default=Overflow.ERROR.value)
    e.set_defaults(func=run_embed, sentences=None)


def run_score(args: argparse.Namespace) -> int:
    from .scorer import Scorer

    device = resolve_device(args.device)
    rows = _read_input(args)
    scorer = Scorer.from_pretrained(args.model_dir, batch_size=args.batch_size, device=device,
                                    method=Method(args.method), overflow=Overflow(args.overflow),
                                    precision=Precision(args.precision), progress=sys.stderr.isatty())
    try:
        scores = scorer.score([text for _, text in rows])
    except ValueError as err:
        raise ValueError(_name_input(str(err), rows, args)) from None
    for k, score in enumerate(scores):
        check_finite_score(k, score.log_prob, rows, args)
    out = sys.stdout
    if args.explain:
        from .explain import explain, legend

        colour = args.color == "always" or (args.color == "auto" and out.isatty())
        print(legend(colour, replaced=scorer.method is Method.DISCRIMINATOR), file=out)
        for (index, _), score in zip(rows, scores, strict=True):
            print(f"[{index}] " + explain(score, colour), file=out)
        return 0
    write_scores(out, rows, scores, args.format)
    return 0


def check_finite_score(k: int, value: float, rows: list[tuple[int, str]], args: argparse.Namespace) -> None:
    """A nan or inf is never written as if it were a score: it means the model's weights are broken."""
    if not math.isfinite(value):
        raise ValueError(_name_input(f"sentence {k} scored {value}: the model gives non-finite log-probabilities "
                                     "(damaged or diverged weights?); nothing written for it", rows, args))


def _name_input(message: str, rows: list[tuple[int, str]], args: argparse.Namespace) -> str:
    """Turn 'sentence K ...' (a 0-based list index) into the line or argument the user wrote."""
    import re

    match = re.match(r"sentence (\d+) ", message)
    if not match:
        return message
    index = rows[int(match.group(1))][0]
    where = f"{args.file or '<stdin>'}:{index}" if not getattr(args, "sentences", None) else f"sentence argument {index}"
    return f"{where}: " + message[match.end():]


def write_scores(out: io.TextIOBase, rows: list[tuple[int, str]], scores: list[SentenceScore], fmt: str) -> None:
    if fmt == "jsonl":
        for (index, _), s in zip(rows, scores, strict=True):
            print(json.dumps({"index": index, **s.to_dict()}, ensure_ascii=False), file=out)
    elif fmt == "tsv":
        print("index\tlog_prob\tnum_tokens\tmean_log_prob\ttext", file=out)
        for (index, _), s in zip(rows, scores, strict=True):
            text = s.text.replace("\t", " ")  # keep the columns unambiguous
            print(f"{index}\t{s.log_prob:.6f}\t{s.num_tokens}\t{s.mean_log_prob:.6f}\t{text}", file=out)
    else:
        print(f"{'#':>5} {'log p':>10} {'pieces':>6} {'mean':>8}  sentence", file=out)
        for (index, _), s in zip(rows, scores, strict=True):
            note = f"  [{s.windows} windows]" if s.windows > 1 else ""
            print(f"{index:>5} {s.log_prob:>10.3f} {s.num_tokens:>6} {s.mean_log_prob:>8.3f}  {s.text}{note}", file=out)


def run_embed(args: argparse.Namespace) -> int:
    from .embed import Embedder, Pooling

    out = Path(args.out)
    if out.suffix not in (".npy", ".jsonl"):
        raise ValueError(f"--out {out}: the name must end in .npy or .jsonl")
    prepare_output_file(out)  # before the model is loaded and the text embedded: fail in a second, not an hour
    device = resolve_device(args.device)
    rows = _read_input(args)
    embedder = Embedder.from_pretrained(args.model_dir, device=device, precision=Precision(args.precision))
    try:
        matrix = embedder.encode([t for _, t in rows], pooling=Pooling(args.pooling), layer=args.layer,
                                 diagonal_mask=args.diagonal_mask, normalize=args.normalize,
                                 batch_size=args.batch_size, overflow=Overflow(args.overflow),
                                 progress=sys.stderr.isatty())
    except ValueError as err:
        raise ValueError(_name_input(str(err), rows, args)) from None
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if len(bad):
        raise ValueError(_name_input(f"sentence {int(bad[0])} has a non-finite embedding ({len(bad)} of {len(rows)} "
                                     "rows): the model's weights are damaged or diverged; nothing written",
                                     rows, args))
    with atomic_path(out) as tmp:
        if out.suffix == ".npy":
            with open(tmp, "wb") as f:
                np.save(f, matrix, allow_pickle=False)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for (index, text), vector in zip(rows, matrix, strict=True):
                    f.write(json.dumps({"index": index, "text": text, "embedding": vector.tolist()},
                                       ensure_ascii=False) + "\n")
    print(f"wrote {out}: {matrix.shape[0]} x {matrix.shape[1]} ({args.pooling} pooling, layer {args.layer})")
    return 0
