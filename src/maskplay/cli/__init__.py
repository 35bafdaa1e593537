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
# the command names whose module's name differs
NAMES = {"plot_runs": "plot-runs", "finetune_convert": "finetune-convert", "lm_eval": "lm-eval"}
VERBOSE_HELP = "also say on stderr what --precision auto chose (it is said only when it was measured, once per machine)"


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    from .. import __version__
    from .common import OneLineParser

    # errors are one line (subcommands' parsers are of the same class): `maskplay CMD: error: argument ...`
    parser = OneLineParser(prog="maskplay", description="Transformer LMs whose family is set by the mask")
    parser.add_argument("--version", action="version", version=f"maskplay {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, action=_Commands)
    return parser, sub


def build_parser() -> argparse.ArgumentParser:
    """The whole parser, every command's options built (imports every command: what the docs and tests read)."""
    parser, sub = _top_parser()
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def _lazy_parser() -> argparse.ArgumentParser:
    """The same parser, but each command's options are built (and its module imported, torch with most) only
    when that command is the one run: `maskplay --help` and `--version` import no command."""
    from .summaries import summary

    parser, sub = _top_parser()
    for module in COMMANDS:
        name = NAMES.get(module, module)
        sub.add_lazy(name, summary(name), f"{__name__}.{module}")
    return parser


def _announcer():  # type: ignore[no-untyped-def]
    """precision_probe.announce, where a command has imported the probe (with torch); else nothing to say."""
    probe = sys.modules.get("maskplay.runtime.precision_probe")
    return probe.announce if probe is not None else (lambda show=True, verbose=False: None)


class _Commands(argparse._SubParsersAction):
    """argparse's subcommands, some of them listed (name and summary) before their parser is built."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._lazy: dict[str, str] = {}  # name -> the module whose add_parser builds it

    def add_lazy(self, name: str, help: str, module: str) -> None:
        self._lazy[name] = module
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help))
        self._name_parser_map[name] = None  # type: ignore[assignment]  # a choice (and listed) before it is built

    def add_parser(self, name: str, **kwargs):  # type: ignore[no-untyped-def]
        if name not in self._lazy:
            return super().add_parser(name, **kwargs)
        # listed already: build it without listing it again, in its place among the choices
        del self._lazy[name]
        order = list(self._name_parser_map)
        del self._name_parser_map[name]
        kwargs.pop("help", None)
        parser = super().add_parser(name, **kwargs)
        built = dict(self._name_parser_map)
        self._name_parser_map.clear()  # the same dict is the action's choices: refilled, not replaced
        self._name_parser_map.update((key, built[key]) for key in order)
        return parser

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        if values and values[0] in self._lazy:
            importlib.import_module(self._lazy[values[0]]).add_parser(self)
        return super().__call__(parser, namespace, values, option_string)


def main(argv: list[str] | None = None) -> int:
    parser = _lazy_parser()
    args = parser.parse_args(argv)
    if args.command in INFERENCE_COMMANDS:
        from ..runtime.allocator import keep_freed_memory

        keep_freed_memory()  # batch after batch, the same large activations: reuse their memory
    _announcer()(show=False)  # nothing left from an earlier command run in this process
    try:
        code = args.func(args)
        # what --precision auto chose, once the command has succeeded (an error stays one line)
        _announcer()(verbose=args.verbose)
        return code
    except (ValueError, FileNotFoundError) as err:
        _error(args.command, str(err))
        return 2
    except (FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError) as err:
        # a path the user gave that cannot be used as such (a file where a directory must be, ...): name it
        where = f"{err.filename}: " if err.filename else ""
        _error(args.command, f"{where}{err.strerror or err}")
        return 2


def _error(command: str, message: str) -> None:
    """`maskplay CMD: error: MESSAGE` on stderr, one plain line: a message built from a library's exception may
    carry terminal escapes (torch's bold) or line breaks."""
    from .common import plain_line

    print(f"maskplay {command}: error: {plain_line(message)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
