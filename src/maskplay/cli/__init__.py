"""The `maskplay` command line. Each top-level command lives in its own module of this package, which exposes
add_parser(sub) (sub: the argparse subparsers) setting `func`; this file only builds the parser from them and
runs the chosen command."""

from __future__ import annotations

import argparse
import importlib
import sys

# One module per top-level command, in the order `maskplay --help` lists them. They are imported when the parser
# is built, not with this package: `from maskplay.cli.generate import ...` loads no other command.
COMMANDS = ("masks", "tokenizer", "prepare", "pretrain", "score", "embed", "eval", "plot_runs", "export",
            "convert", "models", "data", "seq2seq", "generate", "finetune", "predict", "finetune_convert", "simcse",
            "grow", "serve", "lm_eval", "distill")

INFERENCE_COMMANDS = ("score", "embed", "eval")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from .common import OneLineParser

    # errors are one line (subcommands' parsers are of the same class): `maskplay CMD: error: argument ...`
    parser = OneLineParser(prog="maskplay", description="Transformer LMs whose family is set by the mask")
    parser.add_argument("--version", action="version", version=f"maskplay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in INFERENCE_COMMANDS:
        from ..runtime.allocator import keep_freed_memory

        keep_freed_memory()  # batch after batch, the same large activations: reuse their memory
    from ..runtime.precision_probe import announce

    announce(show=False)
    try:
        code = args.func(args)
        announce()  # what --precision auto chose, once the command has succeeded (an error stays one line)
        return code
    except (ValueError, FileNotFoundError) as err:
        print(f"maskplay {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError) as err:
        # a path the user gave that cannot be used as such (a file where a directory must be, ...): name it
        where = f"{err.filename}: " if err.filename else ""
        print(f"maskplay {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
