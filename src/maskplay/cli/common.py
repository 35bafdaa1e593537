"""What `maskplay score` and `maskplay embed` share (and `eval sts`, the SIF options): the model and input
options, reading the sentences, and naming an input line in a message."""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import NoReturn

MAX_LENGTH_HELP = ("tokens per pass, [SOS]/[EOS] included (default and most: the model's max_position); a longer "
                   "line goes to --overflow. A long-attention model (docs/guides/long-text.md) reads up to max_position "
                   "tokens in one pass")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL_DIR and the options of reading the input and running the model."""
    from ..runtime.precision import Precision  # here, not at the top: `maskplay --help` imports this module, not torch
    from ..runtime.precision_probe import AUTO

    p.add_argument("model_dir", metavar="MODEL_DIR", help="config.json + model.safetensors + tokenizer.json")
    p.add_argument("--file", default=None, help="one sentence per line (UTF-8); '-' = stdin")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
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
    p.add_argument("--sif-a", type=positive_float, default=1e-3, metavar="A",
                   help="--pooling sif: weight a / (a + p(piece))")
    p.add_argument("--remove-components", type=non_negative_int, default=0, metavar="K",
                   help="remove the projection on the first K principal components of the embedded set (SIF: 1)")


def read_input(args: argparse.Namespace) -> list[tuple[int, str]]:
    """(index, sentence): index = line number for --file / stdin, argument position for SENTENCE args. Blank
    lines and empty arguments are kept (scored as empty rows) unless --empty error."""
    from ..tasks.score.text import is_empty, read_lines

    sentences = getattr(args, "sentences", None) or []
    if sentences and args.file is not None:
        raise ValueError("give sentences as arguments or with --file, not both")
    if sentences:
        check_text_arguments(sentences, "sentence argument")
        for k, s in enumerate(sentences, start=1):
            if is_empty(s) and args.empty == "error":
                raise ValueError(f"sentence argument {k} is empty")
        if all(is_empty(s) for s in sentences):
            raise ValueError("every sentence argument is empty: there is nothing to score or embed")
        return list(enumerate(sentences, start=1))
    if args.file is None and sys.stdin.isatty():
        raise ValueError("no input: give sentences as arguments, --file F, or pipe them on stdin")
    return read_lines(args.file, empty=args.empty)


def check_text_arguments(texts: list[str], what: str) -> None:
    """Command-line texts must be UTF-8: argv's undecodable bytes reach Python as lone surrogates
    (surrogateescape), which no tokenizer can encode; the same rule as a file's invalid bytes."""
    for k, text in enumerate(texts, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(f"{what} {k} is not valid UTF-8 (byte {err.start}: undecodable bytes or a lone "
                             "surrogate)") from None


def report_empty(rows: list[tuple[int, str]], args: argparse.Namespace) -> None:
    """The summary line on stderr: how many input lines were empty and kept as empty rows."""
    from ..tasks.score.text import is_empty

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


# ---- option ranges: every numeric option declares its range where it is declared ------------------------------
# argparse `type=` functions: a value out of range is refused while the command line is parsed, before any work,
# as one line naming the option (`maskplay CMD: error: argument --batch-size: 0 is not a positive integer`).

def _shown(value: str) -> str:
    """The value as the user typed it, or its repr when it holds line breaks or other unprintable characters
    (the error stays one line)."""
    return value if value.isprintable() else repr(value)


def _number(value: str, kind: type) -> int | float:
    try:
        return kind(value)
    except ValueError:
        name = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not {name}") from None


def positive_int(value: str) -> int:
    """An integer >= 1 (sizes, counts, steps between events)."""
    n = _number(value, int)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a positive integer (>= 1)")
    return n  # type: ignore[return-value]


def non_negative_int(value: str) -> int:
    """An integer >= 0 (0 meaning none / off where the help says so)."""
    n = _number(value, int)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a non-negative integer (>= 0)")
    return n  # type: ignore[return-value]


def finite_float(value: str) -> float:
    """Any finite number (nan and inf refused)."""
    x = float(_number(value, float))
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a finite number")
    return x


def positive_float(value: str) -> float:
    """A finite number > 0 (rates, temperatures, budgets)."""
    x = finite_float(value)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a positive number (> 0)")
    return x


def non_negative_float(value: str) -> float:
    """A finite number >= 0 (0 meaning none / off where the help says so)."""
    x = finite_float(value)
    if x < 0:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a non-negative number (>= 0)")
    return x


def probability(value: str) -> float:
    """0 < p <= 1 (a nucleus mass, a fraction that must keep something)."""
    x = finite_float(value)
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not in (0, 1]")
    return x


def fraction(value: str) -> float:
    """0 <= p < 1 (dropout, a share held out or warmed up)."""
    x = finite_float(value)
    if not 0 <= x < 1:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not in [0, 1)")
    return x


def percent(value: str) -> float:
    """0 <= p < 100."""
    x = finite_float(value)
    if not 0 <= x < 100:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a percentage in [0, 100)")
    return x


def seed_int(value: str) -> int:
    """A random seed: 0 <= s < 2**63 (what torch.manual_seed and numpy take)."""
    n = _number(value, int)
    if not 0 <= n < 2**63:  # type: ignore[operator]
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a seed in [0, 2**63)")
    return n  # type: ignore[return-value]


def layer_index(value: str) -> int:
    """A layer: 0 = the embedding output, k = block k, -k = the k-th from the top (checked against the model)."""
    return _number(value, int)  # type: ignore[return-value]


# a terminal's escape sequences: CSI (ESC [ ... final byte: colours, bold), OSC (ESC ] ... BEL or ESC backslash: titles,
# links) and the short ones (ESC, intermediate bytes, one final character)
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?")
_CONTROLS = re.compile(r" *[\x00-\x1f\x7f-\x9f]+ *")


def plain_line(text: str) -> str:
    """An error's text as one plain line: a library's terminal escapes (torch marks words bold) removed, and each
    run of other control characters (line breaks, tabs, ...) made one space."""
    return _CONTROLS.sub(" ", _ESCAPES.sub("", text)).strip()


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr, `maskplay CMD: error: ...` with a pointer to
    --help, and exit code 2, as the errors of the command handlers are (docs/reference/errors.md)."""

    def error(self, message: str) -> NoReturn:
        # a value with a line break in it (argparse quotes some values, not all) must not break the line
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
