"""`maskplay lm-eval ARGS...`: lm-evaluation-harness's own command line (`lm-eval ARGS...`) with the model type
`maskplay` registered and maskplay's task folder (maskplay_pairs) added to --include_path. lm-eval 0.4.x finds no
plugins by itself, hence this command. Needs the optional extra: pip install 'maskplay[lm-eval]'."""

from __future__ import annotations

import argparse
import math
import sys

from .summaries import summary

LM_EVAL_COMMANDS = ("run", "ls", "validate")  # lm-eval's subcommands; without one it runs `run`
HELP = ("-h", "--help")

EPILOG = """examples:
  maskplay lm-eval --model maskplay --model_args pretrained=gpt-mini-wiki --tasks maskplay_pairs --device cpu
  maskplay lm-eval --model maskplay --model_args pretrained=tta-mini-wiki,precision=fp32 --tasks maskplay_pairs \\
      --metadata '{"pairs": "../shared/data/blimp-dev/adjunct_island.jsonl.gz"}' --batch_size 32
  maskplay lm-eval ls tasks        (lm-eval's own help: maskplay lm-eval --help)
See docs/guides/lm-eval.md."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lm-eval", help=summary("lm-eval"),
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                       add_help=False, prefix_chars="\0")  # every argument, --help included, goes to lm-eval
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, metavar="ARGS")
    p.set_defaults(func=run)


def lm_eval_argv(args: list[str]) -> list[str]:
    """lm-eval's arguments: a subcommand first (`run` when none is given, as lm-eval itself does). maskplay's task
    folder is added after parsing (include_paths): lm-eval 0.4.x reads --include_path as one path."""
    if not args or args[0] in HELP:
        return list(args)
    if args[0] not in LM_EVAL_COMMANDS:
        args = ["run", *args]
    check_limit(args)
    return args


def include_paths(given: str | list[str] | None, tasks_dir: str) -> list[str]:
    """The task folders for lm-eval's TaskManager, which takes a list: the user's --include_path (several may be
    joined with the path separator, as lm-eval's own help suggests though 0.4.x does not split them), then maskplay's
    own folder."""
    import os

    if given is None:
        paths: list[str] = []
    elif isinstance(given, str):
        paths = [p for p in given.split(os.pathsep) if p]
    else:
        paths = list(given)
    for path in paths:
        if not os.path.isdir(path) and not path.endswith((".yaml", ".yml")):
            raise ValueError(f"--include_path {path}: no such directory")
    return [*paths, tasks_dir]


def check_limit(args: list[str]) -> None:
    """lm-eval's --limit (a count, or a fraction of each task below 1) must be a positive number: lm-eval itself
    takes -3 to islice and fails deep inside."""
    for k, arg in enumerate(args):
        if arg == "--limit" or arg.startswith("--limit="):
            value = arg.partition("=")[2] if "=" in arg else (args[k + 1] if k + 1 < len(args) else "")
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not (number > 0 and math.isfinite(number)):
                raise ValueError(f"--limit must be a positive number (a count, or a fraction of each task below 1), "
                                 f"got {value!r}")


def run(args: argparse.Namespace) -> int:
    try:
        from lm_eval._cli import HarnessCLI
        from lm_eval.utils import setup_logging

        from ..tasks.lm_eval_backend import TASKS_DIR, register
    except ImportError as err:
        raise ValueError(f"lm-eval is not installed ({err}); install the extra: pip install 'maskplay[lm-eval]'") from None
    register()
    argv = lm_eval_argv(list(args.lm_eval_args))
    saved = sys.argv
    sys.argv = ["maskplay lm-eval", *argv]
    try:
        setup_logging()
        cli = HarnessCLI()
        parsed = cli.parse_args()
        if hasattr(parsed, "include_path"):  # run, ls, validate: a list, which TaskManager takes as several folders
            parsed.include_path = include_paths(parsed.include_path, str(TASKS_DIR))
        cli.execute(parsed)
    finally:
        sys.argv = saved
    return 0
