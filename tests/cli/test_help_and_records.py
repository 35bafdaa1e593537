"""Help and records that match the code: every command that takes a family names each family it takes in its
help (the families come from the registry, the commands from maskplay.cli.build_parser()), and no results/**/*.json
holds an absolute path."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from maskplay.cli import build_parser
from maskplay.families import families
from maskplay.families.hf import converted_families
from maskplay.registry import family_names
from maskplay.tasks.decoding import generating_families

ROOT = Path(__file__).resolve().parents[2]

# Commands whose families are a rule of the family contract, not an argument's choices
BY_RULE: dict[str, Callable[[], set[str]]] = {
    "convert": lambda: set(converted_families()),  # a HuggingFace twin (families/hf)
    "generate": lambda: set(generating_families()),  # can_generate
    "score": lambda: {cls.family for cls in families() if cls.score_methods},  # every family that scores
}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[str, argparse.ArgumentParser, str]]:
    """(command path, its parser, its one-line summary in its parent's list) for every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub, summaries.get(name, "")
                yield from commands(sub, (*path, name))


def named(text: str, names: set[str] | tuple[str, ...]) -> set[str]:
    """The family names `text` mentions, in any case and with hyphens inside (T-TA, BERT-MLM, UniLM, XLNet); the
    longer names first, each mention taken out once found (gpt-bert names neither gpt nor bert)."""
    found = set()
    for name in sorted(names, key=len, reverse=True):
        pattern = re.compile(r"\b" + "-?".join(map(re.escape, name)) + r"\b", re.I)
        if pattern.search(text):
            found.add(name)
            text = pattern.sub(" ", text)
    return found


def prose(parser: argparse.ArgumentParser) -> str:
    """What a command's --help says in words: its description, epilog and the help of each argument (not the
    usage line or the {choice,...} lists, which name the choices whatever the words say)."""
    helps = [a.help for a in parser._actions if isinstance(a.help, str) and a.help != argparse.SUPPRESS]
    return " ".join(filter(None, [parser.description, parser.epilog, *helps]))


def taken(name: str, parser: argparse.ArgumentParser) -> set[str]:
    """The families a command takes: those its --family choices name (a family, or one of its streams such as
    xlnet-query), and those of its rule in BY_RULE."""
    out: set[str] = set(BY_RULE[name]()) if name in BY_RULE else set()
    for action in parser._actions:
        if action.dest != "family" or action.choices is None:
            continue
        for choice in map(str, action.choices):
            out.update(f for f in family_names() if choice == f or choice.startswith(f + "-"))
    return out


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    problems = []
    for name, sub, summary in commands(parser):
        want = taken(name, sub)
        if not want:
            continue
        missing = sorted(want - named(prose(sub), family_names()))
        if missing:
            problems.append(f"`maskplay {name} --help` does not name {missing}")
        listed = named(summary, family_names())
        if listed and listed != want:  # the one-line summary names all the families it takes, or none
            problems.append(f"`maskplay --help` on {name}: names {sorted(listed)}, takes {sorted(want)}")
    return problems


def test_every_family_taken_is_named_in_the_help():
    parser = build_parser()
    assert {"pretrain", "convert", "masks", "generate", "score", "seq2seq train"} <= {
        name for name, sub, _ in commands(parser) if taken(name, sub)}
    assert help_problems(parser) == []


def test_the_help_check_finds_a_stale_family_list():
    parser = argparse.ArgumentParser(prog="maskplay")
    sub = parser.add_subparsers()
    p = sub.add_parser("pretrain", help="pretrain a model (T-TA, BERT-MLM, GPT)", description="train a model")
    p.add_argument("--family", choices=family_names())
    problems = help_problems(parser)
    assert named("GPT-BERT, T-TA and BERT-MLM", ("gpt", "bert", "gpt-bert", "tta")) == {"gpt-bert", "tta", "bert"}
    assert len(problems) == 2 and "electra" in problems[0] and "names ['bert', 'gpt', 'tta']" in problems[1]


def absolute_paths(value: object, where: str = "") -> Iterator[str]:
    """Every string in a JSON value that is an absolute path (POSIX /..., ~/..., a Windows drive), with where it is."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from absolute_paths(key, f"{where}/{key} (key)")
            yield from absolute_paths(item, f"{where}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from absolute_paths(item, f"{where}/{index}")
    elif isinstance(value, str) and re.match(r"(/[^/\s]|~/|[A-Za-z]:[\\/])", value):
        yield f"{where}: {value!r}"


def test_no_results_json_holds_an_absolute_path():
    files = sorted((ROOT / "results").rglob("*.json"))
    assert files, "no results/**/*.json found"
    found = [f"{path.relative_to(ROOT)}{hit}" for path in files
             for hit in absolute_paths(json.loads(path.read_text(encoding="utf-8")))]
    assert found == []


@pytest.mark.parametrize("value, hits", [({"out": "/tmp/x.json"}, 1), ({"a": [{"b": "~/runs"}]}, 1),
                                         ({"c:\\data": 1}, 1), ({"out": "runs/x", "ratio": "1/2"}, 0),
                                         (["/", "a/b"], 0)])
def test_the_path_check(value, hits):
    assert len(list(absolute_paths(value))) == hits


def test_an_error_message_is_printed_as_one_plain_line():
    """What a library's exception says may carry terminal escapes and line breaks; the printed line has none."""
    from maskplay.cli.common import plain_line

    text = ("load failed, \x1b[1mdo those steps only if you trust it\x1b[0m. \n\t(1) re-save \x1b]8;;http://x\x07it"
            "\x1b]8;;\x07\r\n\x07\x1bc\x9b31m done")
    assert plain_line(text) == "load failed, do those steps only if you trust it. (1) re-save it done"
    assert plain_line("ünï a  b") == "ünï a  b"  # printable text, spaces included, is left as it is
