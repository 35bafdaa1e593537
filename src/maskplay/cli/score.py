"""`maskplay score`: sentence log-likelihoods, as a table, TSV or JSONL; resumable into --out."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
from pathlib import Path
from typing import IO, Any

from ..runtime.devices import resolve_device
from ..runtime.files import OutputLock, prepare_output_file
from ..runtime.precision_probe import resolve_cli
from ..tasks.score.passes import method_names
from ..tasks.score.scorer import Method, Overflow, SentenceScore
from .common import (
    MAX_LENGTH_HELP,
    add_model_arguments,
    name_input,
    non_negative_int,
    positive_float,
    positive_int,
    read_input,
    report_empty,
)
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help=summary("score"),
                       description="Log-likelihood of each sentence: the sum over its word pieces of log p "
                                   "(nats); [SOS]/[EOS] are not scored.")
    add_model_arguments(p)
    p.add_argument("sentences", nargs="*", metavar="SENTENCE")
    p.add_argument("--format", choices=["table", "jsonl", "tsv"], default="table")
    p.add_argument("--method", choices=method_names(), default=Method.AUTO.value,
                   help="auto = one-pass for T-TA, pll for BERT and UniLM, causal for GPT, XLNet and GPT-BERT, "
                        "discriminator for ELECTRA (sum of log P(original)); pll on ELECTRA = its generator's PLL; "
                        "fused = GPT-BERT's causal + PLL log-probability of each piece")
    p.add_argument("--temperature", type=positive_float, default=1.0, metavar="T",
                   help="divide the logits by T before the softmax (choose it on a dev set; default 1: as trained)")
    p.add_argument("--overflow", choices=[Overflow.ERROR.value, Overflow.WINDOW.value, Overflow.MEMORY.value],
                   default=Overflow.ERROR.value,
                   help="a sentence longer than the model: error; window = score it in overlapping windows (every "
                        "family); memory = XLNet's causal score, or a GPT with relative positions (transformer-xl, alibi, "
                        "t5, rotary, none): consecutive segments, each reading the Transformer-XL memory of the text "
                        "before it")
    p.add_argument("--memory-tokens", type=non_negative_int, default=None, metavar="N",
                   help="--overflow memory: how many tokens of memory each segment reads (default: xlnet.mem_len "
                        "when the model sets one, else 3x the segment length); 0 = none")
    p.add_argument("--max-length", type=positive_int, default=None, metavar="N", help=MAX_LENGTH_HELP)
    p.add_argument("--segment-tokens", type=positive_int, default=None, metavar="N",
                   help="--overflow memory: tokens per segment (default: the model's max_position)")
    p.add_argument("--explain", action="store_true",
                   help="show each piece's surprisal (ELECTRA: its probability of having been replaced); mark the "
                        "most surprising word")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="colours for --explain (auto: only when stdout is a terminal)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="write the rows here instead of stdout, batch by batch in input order (locked: one writer)")
    p.add_argument("--resume", action="store_true",
                   help="continue a partly written --out (a killed run): rows already there are kept, not rescored")
    p.add_argument("--max-pieces", type=positive_int, default=DEFAULT_MAX_PIECES, metavar="N",
                   help=f"refuse a line of more than N word pieces (default {DEFAULT_MAX_PIECES:,}); with "
                        "--overflow window it would take minutes")
    p.set_defaults(func=run_score)


DEFAULT_MAX_PIECES = 20_000
LONG_LINE_WINDOWS = 50  # a line scored in more windows than this is announced on stderr


def run_score(args: argparse.Namespace) -> int:
    from ..runtime.progress import Progress
    from ..tasks.score.scorer import Scorer
    from ..tasks.score.text import is_empty

    device = resolve_device(args.device)
    if args.max_pieces < 1:
        raise ValueError(f"--max-pieces must be at least 1, got {args.max_pieces}")
    if args.resume and args.out is None:
        raise ValueError("--resume continues a partly written --out FILE; give --out")
    if args.explain and args.out is not None:
        raise ValueError("--explain writes to the terminal; it cannot be combined with --out")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    out_path = prepare_output_file(args.out) if args.out is not None else None
    rows = read_input(args)
    with OutputLock(out_path) if out_path is not None else contextlib.nullcontext():
        done = resume_point(out_path, rows, args.format) if args.resume and out_path.exists() else 0
        scorer = Scorer.from_pretrained(args.model_dir, batch_size=args.batch_size, device=device,
                                        method=args.method, overflow=Overflow(args.overflow),
                                        segment_tokens=args.segment_tokens, memory_tokens=args.memory_tokens,
                                        max_length=args.max_length, temperature=args.temperature,
                                        precision=resolve_cli(args.precision, device, model_dir=args.model_dir,
                                                             rows=args.batch_size * 32, command="score"),
                                        progress=False)
        _check_lengths(scorer, rows, args, start=done)
        if args.explain:
            return _explain(scorer, rows, args)
        out = open(out_path, "a" if done else "w", encoding="utf-8") if out_path is not None else sys.stdout
        try:
            writer = ScoreWriter(out, args.format, header=not done)
            bar = Progress(total=len(rows), initial=done, desc="score", unit="line")
            # Batch by batch, in input order: a long run shows progress and a crash loses at most one batch.
            for start in range(done, len(rows), args.batch_size):
                chunk = rows[start:start + args.batch_size]
                positions = [start + k for k, (_, text) in enumerate(chunk) if not is_empty(text)]
                scores = _score_rows(scorer, rows, positions, args)
                by_position = dict(zip(positions, scores, strict=True))
                writer.write([(index, text, by_position.get(start + k)) for k, (index, text) in enumerate(chunk)])
                bar.update(len(chunk))
            bar.close()
        finally:
            if out is not sys.stdout:
                out.close()
    report_empty(rows, args)
    if out_path is not None:
        resumed = f" ({done} were there already)" if done else ""
        print(f"wrote {out_path}: {len(rows)} rows{resumed}", file=sys.stderr)
    return 0


def _score_rows(scorer: Any, rows: list[tuple[int, str]], positions: list[int],
                args: argparse.Namespace) -> list[SentenceScore]:
    """Score rows[positions]; errors name the input line, checked for non-finite values."""
    import re

    if not positions:
        return []
    try:
        scores = scorer.score([rows[p][1] for p in positions])
    except ValueError as err:
        # the scorer numbers the sentences of this call; name the line of the whole input instead
        message = re.sub(r"^sentence (\d+) ", lambda m: f"sentence {positions[int(m.group(1))]} ", str(err))
        raise ValueError(name_input(message, rows, args)) from None
    for p, score in zip(positions, scores, strict=True):
        check_finite_score(p, score.log_prob, rows, args)
    return scores


def _check_lengths(scorer: Any, rows: list[tuple[int, str]], args: argparse.Namespace, start: int = 0) -> None:
    """Before any scoring: a line over --max-pieces is an error naming it (a 1 MB line is some 200k pieces, minutes
    of windows); a line that needs many windows is announced on stderr, so that a long wait is not silent."""
    from ..tasks.score.text import is_empty

    todo = [k for k in range(start, len(rows)) if not is_empty(rows[k][1])]
    if not todo:
        return
    backend = scorer.tokenizer.backend
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # ids only: no offsets needed here
    window = scorer.max_length - 2
    memory = Overflow(args.overflow) is Overflow.MEMORY
    for k, enc in zip(todo, encode([rows[k][1] for k in todo], add_special_tokens=False), strict=True):
        n = len(enc.ids)
        if n > args.max_pieces:
            raise ValueError(name_input(f"sentence {k} has {n:,} word pieces, more than --max-pieces "
                                         f"{args.max_pieces:,}; split it, or raise --max-pieces to score it anyway",
                                         rows, args))
        if memory:
            windows, kind = math.ceil((n + 1) / scorer.segment_tokens), "segments with memory"
        else:
            windows, kind = 1 if n <= window else math.ceil((n - window) / max(1, window // 2)) + 1, "windows"
        if windows > LONG_LINE_WINDOWS and Overflow(args.overflow) is not Overflow.ERROR:
            where = name_input(f"sentence {k} ", rows, args).rstrip(": ")
            print(f"maskplay score: {where}: {n:,} pieces, scored in {windows:,} {kind}; this takes a while",
                  file=sys.stderr)


def _explain(scorer: Any, rows: list[tuple[int, str]], args: argparse.Namespace) -> int:
    from ..tasks.score.explain import explain, legend
    from ..tasks.score.text import is_empty

    out = sys.stdout
    positions = [k for k, (_, text) in enumerate(rows) if not is_empty(text)]
    scores = dict(zip(positions, _score_rows(scorer, rows, positions, args), strict=True))
    colour = args.color == "always" or (args.color == "auto" and out.isatty())
    print(legend(colour, replaced=scorer.rule.head == "original"), file=out)
    for k, (index, _) in enumerate(rows):
        print(f"[{index}] " + (explain(scores[k], colour) if k in scores else "(empty)"), file=out)
    report_empty(rows, args)
    return 0


def check_finite_score(k: int, value: float, rows: list[tuple[int, str]], args: argparse.Namespace) -> None:
    """A nan or inf is never written as if it were a score: it means the model's weights are broken."""
    if not math.isfinite(value):
        raise ValueError(name_input(f"sentence {k} scored {value}: the model gives non-finite log-probabilities "
                                     "(damaged or diverged weights?); nothing written for it", rows, args))


TSV_HEADER = "index\tlog_prob\tnum_tokens\tmean_log_prob\ttext"
TABLE_HEADER = f"{'#':>5} {'log p':>10} {'pieces':>6} {'mean':>8}  sentence"


def _empty_record(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "text": text, "empty": True, "log_prob": None, "num_tokens": 0, "mean_log_prob": None,
            "windows": 0, "tokens": [], "token_log_probs": []}


class ScoreWriter:
    """Rows in one of the output formats, flushed (and, for a file, fsynced) after every batch. An empty input
    line gets a row marked empty: "empty": true and null scores in JSONL, empty fields in TSV, "-" in the table."""

    def __init__(self, out: IO[str], fmt: str, header: bool = True) -> None:
        self.out, self.fmt = out, fmt
        self.header = header and fmt in ("tsv", "table")  # written with the first rows: an early error leaves none

    def write(self, rows: list[tuple[int, str, SentenceScore | None]]) -> None:
        if self.header:
            print(TSV_HEADER if self.fmt == "tsv" else TABLE_HEADER, file=self.out)
            self.header = False
        for index, text, s in rows:
            print(self.line(index, text, s), file=self.out)
        self.out.flush()
        with contextlib.suppress(OSError, io.UnsupportedOperation, AttributeError, ValueError):
            if not self.out.isatty():
                os.fsync(self.out.fileno())

    def line(self, index: int, text: str, s: SentenceScore | None) -> str:
        if self.fmt == "jsonl":
            record = _empty_record(index, text) if s is None else {"index": index, **s.to_dict()}
            return json.dumps(record, ensure_ascii=False)
        if self.fmt == "tsv":
            clean = text.replace("\t", " ")  # keep the columns unambiguous
            if s is None:
                return f"{index}\t\t0\t\t{clean}"
            return f"{index}\t{s.log_prob:.6f}\t{s.num_tokens}\t{s.mean_log_prob:.6f}\t{clean}"
        if s is None:
            return f"{index:>5} {'-':>10} {0:>6} {'-':>8}  (empty line)"
        note = f"  [{s.windows} windows]" if s.windows > 1 else ""
        return f"{index:>5} {s.log_prob:>10.3f} {s.num_tokens:>6} {s.mean_log_prob:>8.3f}  {s.text}{note}"


def write_scores(out: IO[str], rows: list[tuple[int, str]], scores: list[SentenceScore | None], fmt: str) -> None:
    """All rows at once (None = an empty line's row)."""
    ScoreWriter(out, fmt).write([(index, text, s) for (index, text), s in zip(rows, scores, strict=True)])


def resume_point(path: Path, rows: list[tuple[int, str]], fmt: str) -> int:
    """How many rows of `rows` a partly written output already holds. A last line cut short by a kill is removed
    (the file is truncated to its last whole row); rows that do not match the input are an error, so that a
    resumed file never mixes two inputs."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # whatever follows the last newline is a row cut short
    lines = data[:end].decode("utf-8", errors="replace").split("\n")[:-1] if end else []
    if fmt in ("tsv", "table") and lines:
        header = TSV_HEADER if fmt == "tsv" else TABLE_HEADER
        if lines[0] != header:
            raise ValueError(f"--resume: {path}:1 is not the {fmt} header; was it written with another --format?")
        lines = lines[1:]
    if len(lines) > len(rows):
        raise ValueError(f"--resume: {path} has {len(lines)} rows, the input only {len(rows)}")
    first = 2 if fmt in ("tsv", "table") else 1
    for k, line in enumerate(lines):
        index, text = rows[k]
        try:
            if fmt == "jsonl":
                record = json.loads(line)
                got_index, got_text = record["index"], record["text"]
            elif fmt == "tsv":
                fields = line.split("\t")
                got_index, got_text = int(fields[0]), "\t".join(fields[4:])
                text = text.replace("\t", " ")
            else:
                got_index, got_text = int(line.split()[0]), text
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(f"--resume: {path}:{k + first} is not a {fmt} score row") from None
        if got_index != index or got_text != text:
            raise ValueError(f"--resume: {path}:{k + first} is row {got_index} {got_text[:40]!r}, but the input's row "
                             f"{k + 1} is {index} {text[:40]!r}: this file was written for another input")
    if end != len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
    return len(lines)  # 0: the caller starts the file afresh (header included)


