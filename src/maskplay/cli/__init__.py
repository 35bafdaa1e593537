"""The `maskplay` command line. Each subcommand lives in its own module; this file only wires them up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..masks import MASK_FAMILIES

Command = Callable[[argparse.Namespace], int]


def _masks(args: argparse.Namespace) -> int:
    from ..files import prepare_output_file
    from ..viz import draw_masks

    families = list(MASK_FAMILIES[:-1]) if args.family == "all" else [args.family]
    prepare_output_file(args.out)
    out = draw_masks(families, args.length, args.out, padding=args.padding)
    print(f"wrote {out}")
    return 0


def add_masks_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("masks", help="draw a family's attention mask as a picture")
    p.add_argument("--family", choices=[*MASK_FAMILIES, "all"], default="tta")
    p.add_argument("--length", type=int, default=8)
    p.add_argument("--padding", type=int, default=0, help="padded positions at the end of the sequence")
    p.add_argument("--out", default="mask.png")
    p.set_defaults(func=_masks)


# Subcommands registered by other modules: (module, function that adds its parser).
REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = [add_masks_parser]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="maskplay", description="Transformer LMs whose family is set by the mask")
    parser.add_argument("--version", action="version", version=f"maskplay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in REGISTRY:
        add(sub)
    _register_optional(sub)
    return parser


def _register_optional(sub: argparse._SubParsersAction) -> None:
    """Subcommands whose modules may import heavy dependencies; each module exposes add_parser(sub)."""
    import importlib

    for name in ("maskplay.cli.tokenizer", "maskplay.cli.prepare", "maskplay.cli.pretrain",
                 "maskplay.cli.score", "maskplay.cli.eval", "maskplay.report", "maskplay.cli.export",
                 "maskplay.cli.convert", "maskplay.cli.titles", "maskplay.cli.seq2seq", "maskplay.cli.generate",
                 "maskplay.cli.finetune", "maskplay.cli.simcse", "maskplay.grow"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name or (err.name and name.startswith(err.name)):
                continue  # that part of maskplay is not built yet
            raise
        module.add_parser(sub)


INFERENCE_COMMANDS = ("score", "embed", "eval")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in INFERENCE_COMMANDS:
        from ..allocator import keep_freed_memory

        keep_freed_memory()  # batch after batch, the same large activations: reuse their memory
    from ..precision_probe import announce

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
