"""Write the reference pages that cannot drift from the code: docs/reference/cli.md (every command's and
subcommand's options, read from the argparse parser `maskplay` builds) and docs/reference/config.md (every key of a
training config, read from the config dataclasses: type, default and the comment the source gives it).

    python scripts/docs/reference.py            # rewrite both pages
    python scripts/docs/reference.py --check    # exit 1 naming the stale pages (tests/test_docs.py runs this check)

The output depends on the code only: no terminal width (the help text is read from the parser, not formatted by
argparse), no machine paths, sorted where the code's order is not meaningful."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
CONFIG_PAGE = ROOT / "docs" / "reference" / "config.md"
REGENERATE = "python scripts/docs/reference.py"


# ---------------------------------------------------------------------------------------------------- the CLI page


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped, angle brackets shown as text."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _prose(text: str) -> str:
    return textwrap.dedent(text).strip().replace("<", "&lt;").replace(">", "&gt;")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of a parser's subcommands, in the order it lists them; an alias (a parser
    reached under two names) once, under its first name."""
    out: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            out.append((name, helps.get(name, ""), sub))
    return out


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        if action.nargs == 0:
            return ""
        metavar = action.metavar or (action.dest.upper() if action.choices is None else None)
        if metavar is None:
            return "{" + ",".join(str(c) for c in action.choices) + "}"
        return str(metavar) if action.nargs in (None, 1) else f"{metavar} ..."
    name = str(action.metavar or action.dest)
    return {"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]"}.get(str(action.nargs), name)


# defaults that depend on the machine the parser is built on, written as the rule that makes them
MACHINE_DEFAULTS = {("maskplay prepare", "workers"): "min(4, CPU cores)"}


def _default(path: str, action: argparse.Action) -> str:
    if (path, action.dest) in MACHINE_DEFAULTS:
        return MACHINE_DEFAULTS[path, action.dest]
    value = action.default
    if value is None or value is argparse.SUPPRESS or action.nargs == 0 or value == []:
        return ""
    return f"`{value}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help is argparse.SUPPRESS:
        text = ""
    else:
        text = parser._get_formatter()._expand_help(action)  # %(default)s and friends, as --help prints them
    if action.choices is not None and action.option_strings and action.metavar is not None:
        text = f"{text} (one of: {', '.join(str(c) for c in action.choices)})".strip()
    return _cell(text)


def _usage(path: str, parser: argparse.ArgumentParser) -> str:
    parts = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parts.append("{" + ",".join(name for name, _, _ in _subcommands(parser)) + "} ...")
        elif not action.option_strings:
            parts.append(_argument(action))
    if any(a.option_strings and a.dest != "help" for a in parser._actions):
        parts.append("[options]")
    return " ".join(parts)


def _slug(name: str) -> str:
    """GitHub's anchor of the heading `maskplay NAME` (letters, digits and hyphens: a command name is one)."""
    return name.lower().replace(" ", "-")


def _command_section(path: str, help_line: str, parser: argparse.ArgumentParser, lines: list[str]) -> None:
    depth = path.count(" ")
    lines += [f"{'#' * min(depth + 1, 4)} `{path}`", ""]
    if help_line:
        lines += [_prose(help_line[0].upper() + help_line[1:]) + ("" if help_line.endswith(".") else "."), ""]
    lines += ["```text", _usage(path, parser), "```", ""]
    raw = parser.formatter_class is argparse.RawDescriptionHelpFormatter
    for text in (parser.description, parser.epilog):
        if text and text != help_line:
            lines += (["```text", textwrap.dedent(text).strip("\n"), "```", ""] if raw else [_prose(text), ""])
    rows = [a for a in parser._actions
            if not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction, argparse._VersionAction))]
    if rows:
        lines += ["| argument | value | default | what it does |", "|---|---|---|---|"]
        for a in rows:
            name = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{_argument(a)}`"
            value = _argument(a) if a.option_strings else ""
            value = f"`{value}`" if value else ""
            lines.append(f"| {name} | {_cell(value)} | {_cell(_default(path, a))} | {_help(parser, a)} |")
        lines.append("")
    subs = _subcommands(parser)
    if subs:
        lines += ["Subcommands: " + ", ".join(f"`{name}`" for name, _, _ in subs) + ".", ""]
    for name, sub_help, sub in subs:
        _command_section(f"{path} {name}", sub_help, sub, lines)


def cli_page() -> str:
    from maskplay.cli import build_parser

    parser = build_parser()
    lines = ["# Command-line reference", "",
             f"<!-- Generated by `{REGENERATE}` from the argparse parsers of src/maskplay/cli; do not edit. -->", "",
             "Every `maskplay` command and subcommand with its arguments, as `maskplay CMD --help` lists them. "
             "Options that take a path accept `-` for stdin where the help says so; every numeric option declares its "
             "range, and a bad value is a one-line error with exit status 2. The task guides ([docs/README.md]"
             "(../README.md)) show the commands in use.", "",
             "| command | what it does |", "|---|---|"]
    top = _subcommands(parser)
    for name, help_line, _ in top:
        lines.append(f"| [`maskplay {name}`](#maskplay-{_slug(name)}) | {_cell(help_line)} |")
    lines += ["", "Global options: `--version` prints the version, `--help` (on any command) its usage.", ""]
    for name, help_line, sub in top:
        _command_section(f"maskplay {name}", help_line, sub, lines)
    return "\n".join(lines).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------------- the config page


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join("none" if a is type(None) else _type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    return {int: "int", float: "float", str: "string", bool: "bool"}.get(hint, getattr(hint, "__name__", str(hint)))


def _toml(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list):
        return "`[" + ", ".join(_toml(v).strip("`") for v in value) + "]`"
    return f"`{value!r}`"


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class's source: the comment lines just above it and the one at its end."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, tuple[bool, str]] = {}  # line -> (comment alone on its line, text)
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            alone = not lines[row - 1][:col].strip()
            comments[row] = (alone, tok.string.lstrip("#").strip())
    out: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    previous = ""
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        row = node.lineno - 1
        while row in comments and comments[row][0]:
            above.insert(0, comments[row][1])
            row -= 1
        inline = [comments[r][1] for r in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                  if r in comments and not comments[r][0]]
        text = " ".join(above + inline)
        if not text and previous and node.target.id in out[previous]:  # one comment for two fields (ffn, ffn_bias)
            text = f"see `{previous}`"
        out[node.target.id] = text
        previous = node.target.id
    return out


def _doc(cls: type) -> str:
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):  # the signature dataclass writes when a class has no docstring
        return ""
    return " ".join(doc.split())


def _section_table(title: str, cls: type, lines: list[str], *, comments_from: type | None = None,
                   defaults_from: type | None = None, note: str = "",
                   extra: dict[str, str] | None = None) -> list[tuple[str, type]]:
    """A table of one section's keys; returns its nested tables (name, dataclass) to write after it."""
    defaults_cls = defaults_from or cls
    extra = extra or {}
    hints = typing.get_type_hints(defaults_cls)
    comments = field_comments(comments_from or cls)
    doc = _doc(comments_from or cls)
    lines += [f"## `[{title}]`", ""]
    if doc:
        lines += [_prose(doc), ""]
    if note:
        lines += [note, ""]
    nested: list[tuple[str, type]] = []
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    names = {f.name for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(defaults_cls):
        if f.name not in names or f.name == "sections":
            continue
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            nested.append((f"{title}.{f.name}", hint))
            continue
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        rows.append(f"| `{f.name}` | {_type_name(hint)} | {_cell(_toml(value))} | {_cell(comments.get(f.name, ''))} |")
    own = {g.name for g in dataclasses.fields(defaults_cls)}
    for f in dataclasses.fields(cls):  # keys of the section that the defaults' class has not (model.preset, init)
        if f.name not in own:
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            rows.append(f"| `{f.name}` | {_type_name(typing.get_type_hints(cls)[f.name])} | {_cell(_toml(value))} "
                        f"| {_cell(extra.get(f.name, ''))} |")
    lines += rows + [""]
    return nested


def config_page() -> str:
    from maskplay.config import PRESETS, ModelConfig
    from maskplay.registry import family_sections
    from maskplay.tasks.train.config import DataSection, ModelSection, OptimSection, RunSection, TrainConfig

    lines = ["# Training configuration reference", "",
             f"<!-- Generated by `{REGENERATE}` from the config dataclasses (src/maskplay/config.py, "
             "src/maskplay/tasks/train/config.py and each family's section); do not edit. -->", "",
             "A training config is a TOML file of four tables, `[model]`, `[optim]`, `[data]` and `[run]`, read by "
             "`maskplay pretrain --config FILE` (and `seq2seq train`, `distill`); `--set section.key=value` overrides "
             "any key on the command line (`--set model.electra.disc_weight=30`). An unknown table or key, or a value "
             "of the wrong type, is a one-line error naming the file and the key. Each run writes its resolved config "
             "next to its checkpoints. The shipped recipes are in configs/; the training guide "
             "([guides/training.md](../guides/training.md)) shows them in use.", "",
             "Types: `string`, `int`, `float` (an int is accepted), `bool` (`true`/`false`), `list of ...`; "
             "`none` means the key may be left out (unset).", ""]
    assert [f.name for f in dataclasses.fields(TrainConfig)] == ["model", "optim", "data", "run"]
    model_note = ("In a training config every `[model]` key but `family`, `preset` and `init` may be left out: "
                  "it then takes the preset's value (sizes: `maskplay.config.PRESETS`) or, for the keys no preset "
                  "sets, the default below, which is also what a model's config.json holds. The vocabulary size and "
                  "the special tokens' ids come from the data's tokenizer, never from the config.")
    presets = "; ".join(f"`{name}`: " + ", ".join(f"{k} {v:,}" for k, v in sizes.items())
                        for name, sizes in PRESETS.items())
    own = {"preset": f"the sizes the model starts from ({presets}); any size key below overrides one",
           "init": "a model directory (or bundled name) whose weights start the run, e.g. a BERT for UniLM's seq2seq "
                   "fine-tuning: its architecture is used and the preset and size keys are ignored; empty = random "
                   "initialisation"}
    nested = _section_table("model", ModelSection, lines, comments_from=ModelConfig, defaults_from=ModelConfig,
                            note=model_note, extra=own)
    for title, cls in nested:
        _section_table(title, cls, lines)
    for name, cls in family_sections().items():
        _section_table(f"model.{name}", cls, lines,
                       note=f"Read only by the family whose section it is (`model.family`); `[model.{name}]` in a "
                            "file, `--set model." + name + ".KEY=VALUE` on the command line.")
    for title, cls in (("optim", OptimSection), ("data", DataSection), ("run", RunSection)):
        _section_table(title, cls, lines)
    return "\n".join(lines).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------------------ the script


def pages() -> dict[Path, str]:
    return {CLI_PAGE: cli_page(), CONFIG_PAGE: config_page()}


def stale_pages() -> list[Path]:
    return [path for path, text in pages().items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run `{REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
