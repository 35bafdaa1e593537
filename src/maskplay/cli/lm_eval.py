"""`maskplay lm-eval ARGS...`: lm-evaluation-harness's own command line (`lm-eval ARGS...`) with the model type
`maskplay` registered and maskplay's task folder (maskplay_pairs) on --include_path. lm-eval 0.4.x finds no
plugins by itself, hence this command. Needs the optional extra: pip install 'maskplay[lm-eval]'."""

from __future__ import annotations

import argparse
import math
import sys

LM_EVAL_COMMANDS = ("run", "ls", "validate")  # lm-eval's subcommands; without one it runs `run`
HELP = ("-h", "--help")

EPILOG = """examples:
  maskplay lm-eval --model maskplay --model_args pretrained=gpt-mini-wiki --tasks maskplay_pairs --device cpu
  maskplay lm-eval --model maskplay --model_args pretrained=tta-mini-wiki,precision=fp32 --tasks maskplay_pairs \\
      --metadata '{"pairs": "../shared/data/blimp-dev/adjunct_island.jsonl.gz"}' --batch_size 32
  maskplay lm-eval ls tasks        (lm-eval's own help: maskplay lm-eval --help)
See docs/LM_EVAL.md."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lm-eval", help="run lm-evaluation-harness on a maskplay model (--model maskplay)",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                       add_help=False, prefix_chars="\0")  # every argument, --help included, goes to lm-eval
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, metavar="ARGS")
    p.set_defaults(func=run)


def lm_eval_argv(args: list[str], tasks_dir: str) -> list[str]:
    """lm-eval's arguments: a subcommand first (`run` when none is given, as lm-eval itself does), and maskplay's
    task folder added to --include_path (after the user's folders, colon-separated)."""
    if not args or args[0] in HELP:
        return list(args)
    if args[0] not in LM_EVAL_COMMANDS:
        args = ["run", *args]
    if any(a in HELP for a in args[1:2]):
        return args
    out, found, k = [], False, 0
    while k < len(args):
        arg = args[k]
        if arg == "--include_path" and k + 1 < len(args):
            out += [arg, f"{args[k + 1]}:{tasks_dir}"]
            found, k = True, k + 2
            continue
        if arg.startswith("--include_path="):
            out.append(f"{arg}:{tasks_dir}")
            found = True
        else:
            out.append(arg)
        k += 1
    if not found:
        out += ["--include_path", tasks_dir]
    check_limit(out)
    return out


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

        from ..lm_eval_backend import TASKS_DIR, register
    except ImportError as err:
        raise ValueError(f"lm-eval is not installed ({err}); install the extra: pip install 'maskplay[lm-eval]'") from None
    register()
    argv = lm_eval_argv(list(args.lm_eval_args), str(TASKS_DIR))
    saved = sys.argv
    sys.argv = ["maskplay lm-eval", *argv]
    try:
        setup_logging()
        cli = HarnessCLI()
        cli.execute(cli.parse_args())
    finally:
        sys.argv = saved
    return 0
