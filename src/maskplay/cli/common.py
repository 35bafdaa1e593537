"""What `maskplay score` and `maskplay embed` share (and `eval sts`, the SIF options): the model and input
options, reading the sentences, and naming an input line in a message."""

from __future__ import annotations

import argparse
import re
import sys

from ..precision import Precision
from ..precision_probe import AUTO

MAX_LENGTH_HELP = ("tokens per pass, [SOS]/[EOS] included (default and most: the model's max_position); a longer "
                   "line goes to --overflow. A long-attention model (docs/LONG_TEXT.md) reads up to max_position "
                   "tokens in one pass")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL_DIR and the options of reading the input and running the model."""
    p.add_argument("model_dir", metavar="MODEL_DIR", help="config.json + model.safetensors + tokenizer.json")
    p.add_argument("--file", default=None, help="one sentence per line (UTF-8); '-' = stdin")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--precision", choices=[AUTO, *(p.value for p in Precision)], default=AUTO,
                   help="auto (default): bf16 where this machine runs it faster than fp32, else fp32 (measured once, "
                        "cached); int8 (CPU) only when asked")
    p.add_argument("--empty", choices=["keep", "error"], default="keep",
                   help="a blank input line: keep it as an output row marked empty (default; counted on stderr), "
                        "or stop with an error naming it")


def add_sif_arguments(p: argparse.ArgumentParser) -> None:
    """--static, --frequencies, --sif-a, --remove-components: shared by `eval sts` and `embed`."""
    p.add_argument("--static", action="store_true",
                   help="pool the word-piece embedding table's vectors (no position, no context) instead of a layer")
    p.add_argument("--frequencies", default=None, metavar="PATH",
                   help="--pooling sif: piece counts from a `maskplay prepare` directory (its train split), a model "
                        "directory with piece_counts.npy or such a .npy file (default: the model directory's)")
    p.add_argument("--sif-a", type=float, default=1e-3, metavar="A", help="--pooling sif: weight a / (a + p(piece))")
    p.add_argument("--remove-components", type=int, default=0, metavar="K",
                   help="remove the projection on the first K principal components of the embedded set (SIF: 1)")


def read_input(args: argparse.Namespace) -> list[tuple[int, str]]:
    """(index, sentence): index = line number for --file / stdin, argument position for SENTENCE args. Blank
    lines and empty arguments are kept (scored as empty rows) unless --empty error."""
    from ..score.text import is_empty, read_lines

    sentences = getattr(args, "sentences", None) or []
    if sentences and args.file is not None:
        raise ValueError("give sentences as arguments or with --file, not both")
    if sentences:
        for k, s in enumerate(sentences, start=1):
            if is_empty(s) and args.empty == "error":
                raise ValueError(f"sentence argument {k} is empty")
        if all(is_empty(s) for s in sentences):
            raise ValueError("every sentence argument is empty: there is nothing to score or embed")
        return list(enumerate(sentences, start=1))
    if args.file is None and sys.stdin.isatty():
        raise ValueError("no input: give sentences as arguments, --file F, or pipe them on stdin")
    return read_lines(args.file, empty=args.empty)


def report_empty(rows: list[tuple[int, str]], args: argparse.Namespace) -> None:
    """The summary line on stderr: how many input lines were empty and kept as empty rows."""
    from ..score.text import is_empty

    empty = [index for index, text in rows if is_empty(text)]
    if empty:
        where = "sentence argument(s)" if getattr(args, "sentences", None) else "line(s)"
        shown = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
        print(f"maskplay {args.command}: {len(empty)} empty {where} kept as empty rows ({shown})", file=sys.stderr)


def name_input(message: str, rows: list[tuple[int, str]], args: argparse.Namespace) -> str:
    """Turn 'sentence K ...' (a 0-based list index) into the line or argument the user wrote."""
    match = re.match(r"sentence (\d+) ", message)
    if not match:
        return message
    index = rows[int(match.group(1))][0]
    where = f"{args.file or '<stdin>'}:{index}" if not getattr(args, "sentences", None) else f"sentence argument {index}"
    return f"{where}: " + message[match.end():]
