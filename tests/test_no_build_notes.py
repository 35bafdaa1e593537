"""The repository speaks to its users: no tracked prose or source says how the project was built - work sessions
("session 28"), the tracker's item numbers ("issue 42"), conversation turns, the builders' room rules ("the house"),
seed texts that are not in the repository ("seed 001"), or a builder's machine paths (/work/...). Dates and commit
ids say when; git history says how.

Which files: every tracked file whose name says it is prose or source (CHECKED_SUFFIXES, Makefile, .ci/*, the lm-eval
task template) - README and docs pages, model cards, code, comments and strings, configs, shell scripts. Recorded
outputs (.json, .jsonl, .log, .txt, .csv: what a command wrote, kept as written) and binary files are data and are
not read; their paths are checked like every other tracked path. Every hit is reported as path:line.

Stricter where only prose is written (PROSE_NOTES): in Markdown, and in the comments and docstrings of the Python and
shell files of benchmarks/, scripts/ and src/, the plain word "session" (an HTTP, client or inference session and a
`session` in a code span are allowed), and in Markdown scratch paths (/tmp/, /home/) and the words of a borrowed
machine ("lent", "carry list", "device tool", "device call", "size-limited copy"). The recorded results' JSON is
read for one thing: the commands it records (a "command", "script" or "args" value) name no scratch path."""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

CHECKED_SUFFIXES = {".py", ".md", ".toml", ".sh", ".yaml", ".yml", ".html", ".cfg", ".ini", ".rst"}
CHECKED_NAMES = {"Makefile", "_pairs_template_yaml"}  # text without a telling suffix
CHECKED_DIRS = (".ci/",)

BUILD_NOTES = {
    "a work session": re.compile(r"\b[Ss]ession \d+\b"),
    "a range of sessions": re.compile(r"\b[Ss]essions? \d+[-–]\d+"),
    "a tracker item": re.compile(r"\b[Ii]ssues? #?\d+\b"),
    "the builders' rules": re.compile(r"\b[Tt]he house\b|\b[Hh]ouse's"),
    "a seed text": re.compile(r"\b[Ss]eeds? 00\d\b"),
    "a machine path": re.compile(r"/work/"),
    "a conversation turn": re.compile(r"\b[Tt]urns? \d+"),
}
# what may look like a hit and is not one, removed from a line before BUILD_NOTES are searched: a link (another
# project's tracker, e.g. https://github.com/pytorch/pytorch/issues/123) and GitHub's short form `owner/repo#123`
ALLOWED = [
    re.compile(r"\bhttps?://\S+"),
    re.compile(r"\b[\w.-]+/[\w.-]+#\d+\b"),
]
# the plain word, where only prose is written (PROSE_FILES' Markdown, comments and docstrings)
PROSE_NOTES = {
    "the word session": re.compile(r"(?i)\bsessions?\b"),
}
MARKDOWN_NOTES = {
    "a scratch path": re.compile(r"(?<!\w)/(?:tmp|home)/"),
    "a borrowed machine": re.compile(r"(?i)\blent\b|\bcarry list\b|\bdevice (?:tool|call)s?\b|\bsize-limited cop"),
}
# a session that is not a work session: an HTTP / client / inference one, a library's Session class, code
SESSION_ALLOWED = [
    re.compile(r"(?i)\b(?:https?|aiohttp|client|requests|inference|onnx(?:runtime)?|ssh|tmux|browser|login|database)"
               r"\s+sessions?\b"),
    re.compile(r"\b\w+\.Session\b"),
    re.compile(r"(`+)[^`]*?\1"),  # a code span
]
PROSE_DIRS = ("benchmarks/", "scripts/", "src/")
SCRATCH_PATH = re.compile(r"(?<!\w)/(?:tmp|home|work)/")
COMMAND_KEYS = {"command", "script", "args"}
# tracked paths (files and folders) named after a work session, a tracker item or the builders' rules
BAD_PATH = re.compile(r"(?i)(sessions?|issues?)[-_]?\d+|(^|/)house\d*(/|$)")


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (git ls-files failed)")
    return [p for p in out.decode().split("\0") if p]


def is_checked(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return (Path(name).suffix in CHECKED_SUFFIXES or name in CHECKED_NAMES or path.startswith(CHECKED_DIRS)) \
        and path != SELF


def build_notes(paths: list[str], root: Path = ROOT) -> list[str]:
    """`path:line: what: the line` for every line of the checked files among `paths` (relative to `root`) that says
    how the project was built."""
    hits = []
    for path in filter(is_checked, paths):
        file = root / path
        if not file.is_file():  # deleted in the work tree, not yet in the index
            continue
        data = file.read_bytes()
        if b"\0" in data:  # binary
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            text = line
            for allowed in ALLOWED:
                text = allowed.sub(" ", text)
            for what, pattern in BUILD_NOTES.items():
                if pattern.search(text):
                    hits.append(f"{path}:{number}: {what}: {line.strip()[:160]}")
    return hits


def prose_of(path: str, text: str) -> list[tuple[int, str]]:
    """(line number, text) of what is prose in a file: every line of Markdown; the comments and docstrings of a
    Python file; the comments of a shell script. Other files: nothing."""
    if path.endswith(".md"):
        return list(enumerate(text.splitlines(), 1))
    out: list[tuple[int, str]] = []
    if path.endswith(".py"):
        try:
            out += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                    if tok.type == tokenize.COMMENT]
            tree = ast.parse(text)
        except (SyntaxError, tokenize.TokenError):
            return out
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                        and isinstance(first.value.value, str)):
                    out += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
        out.sort()
    elif path.endswith(".sh"):
        out += [(n, line[line.index("#"):]) for n, line in enumerate(text.splitlines(), 1)
                if "#" in line and not line.lstrip().startswith("#!")]
    return out


def prose_notes(paths: list[str], root: Path = ROOT) -> list[str]:
    """`path:line: what: the text` for the stricter rules (PROSE_NOTES in Markdown and in the comments and docstrings
    of benchmarks/, scripts/ and src/; MARKDOWN_NOTES in Markdown)."""
    hits = []
    for path in paths:
        markdown = path.endswith(".md")
        if path == SELF or not (markdown or (path.startswith(PROSE_DIRS) and path.endswith((".py", ".sh")))):
            continue
        file = root / path
        if not file.is_file():
            continue
        for number, line in prose_of(path, file.read_text(encoding="utf-8", errors="replace")):
            text = line
            for allowed in ALLOWED:
                text = allowed.sub(" ", text)
            prose = text  # the session rule reads it without code spans and other sessions
            for allowed in SESSION_ALLOWED:
                prose = allowed.sub(" ", prose)
            hits += [f"{path}:{number}: {what}: {line.strip()[:160]}" for what, pattern in PROSE_NOTES.items()
                     if pattern.search(prose)]
            if markdown:
                hits += [f"{path}:{number}: {what}: {line.strip()[:160]}" for what, pattern in MARKDOWN_NOTES.items()
                         if pattern.search(text)]
    return hits


def command_strings(value, key: str = "") -> list[str]:
    """Every string under a "command", "script" or "args" key of a recorded JSON, at any depth."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in command_strings(v, k if k in COMMAND_KEYS else key)]
    if isinstance(value, list):
        return [s for v in value for s in command_strings(v, key)]
    return [value] if key and isinstance(value, str) else []


def scratch_commands(paths: list[str], root: Path = ROOT) -> list[str]:
    """`path: the command` for every recorded command under results/ that names a scratch path."""
    hits = []
    for path in paths:
        if not (path.startswith("results/") and path.endswith(".json") and (root / path).is_file()):
            continue
        try:
            data = json.loads((root / path).read_text(encoding="utf-8"))
        except ValueError:
            continue
        hits += [f"{path}: a scratch path in a recorded command: {c[:160]}" for c in command_strings(data)
                 if SCRATCH_PATH.search(c)]
    return hits


def test_no_tracked_text_says_how_the_project_was_built():
    hits = build_notes(tracked_files())
    assert not hits, f"{len(hits)} lines say how the project was built:\n" + "\n".join(hits)


def test_no_prose_speaks_of_sessions_scratch_paths_or_borrowed_machines():
    hits = prose_notes(tracked_files())
    assert not hits, f"{len(hits)} lines speak to the builders, not the users:\n" + "\n".join(hits)


def test_no_recorded_command_names_a_scratch_path():
    hits = scratch_commands(tracked_files())
    assert not hits, f"{len(hits)} recorded commands name a scratch path (write the repository path):\n" + \
        "\n".join(hits)


def test_no_tracked_path_is_named_after_how_the_project_was_built():
    bad = [p for p in tracked_files() if BAD_PATH.search(p)]
    assert not bad, f"{len(bad)} tracked paths are named after a work session or item:\n" + "\n".join(bad)


@pytest.mark.parametrize("line, hit", [
    ("measured in session 28 on the H200", True),
    ("sessions 21-30 gave the host-side work", True),
    ("issue 28's two-hour model", True),
    ("This round: issues 26, 27", True),
    ("under the house's 300 lines", True),
    ("seeds 001/002 ask for it", True),
    ("python /work/main/scripts/x.py", True),
    ("as asked in turn 3", True),
    ("an aiohttp session and an onnxruntime InferenceSession", False),
    ("see https://github.com/pytorch/pytorch/issues/12345", False),
    ("fixed upstream in huggingface/transformers#31234", False),
    ("each piece masked in turn, then return 0", False),
    ("the cat sat in the old house", False),
    ("data.seed 0 and seed=1", False),
])
def test_the_patterns_tell_build_notes_from_ordinary_text(tmp_path, line, hit):
    (tmp_path / "page.md").write_text(f"first line\n{line}\n")
    hits = build_notes(["page.md", "notes.json"], root=tmp_path)  # notes.json: data, not read (and absent)
    assert len(hits) == hit and all(h.startswith("page.md:2: ") and h.endswith(line) for h in hits)


@pytest.mark.parametrize("line, hit", [
    ("the figures of the last session", True),
    ("Sessions ran out before the sweep", True),
    ("python x.py --out /tmp/run/out.json", True),
    ("run `python x.py --base /tmp/base/src` first", True),
    ("cp model ../../tmp/b68/", True),
    ("see /home/user/data", True),
    ("measured in the time the GPU was lent", True),
    ("name .whl in the call's carry list", True),
    ("up to 64 MiB for this project's device tool", True),
    ("a GPU machine that receives a size-limited copy", True),
    ("an aiohttp session and an onnxruntime InferenceSession", False),
    ("an HTTP session per client; `session.get(url)`; requests.Session()", False),
    ("the talks at https://example.org/sessions/1", False),
    ("write under runs/tmp/x and the home directory", False),
    ("the talent of a silent lens", False),
])
def test_the_prose_patterns(tmp_path, line, hit):
    (tmp_path / "page.md").write_text(f"first line\n{line}\n")
    hits = prose_notes(["page.md"], root=tmp_path)
    assert bool(hits) == hit and all(h.startswith("page.md:2: ") for h in hits), hits


def test_the_prose_of_code_is_its_comments_and_docstrings(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "x.py").write_text(
        '"""A benchmark.\n\nA long run survives the end of a session."""\n\n'
        'session = make_session()  # an HTTP session\n'
        'def f(session):\n    """Uses the session."""\n    return session  # kept for the next session\n')
    (tmp_path / "benchmarks" / "x.sh").write_text("#!/bin/sh\nSESSION=1 run  # a work session's leftovers\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("# a session, in a test: not prose of benchmarks/, scripts/, src/\n")
    hits = prose_notes(["benchmarks/x.py", "benchmarks/x.sh", "tests/t.py"], root=tmp_path)
    assert [h.split(": ", 1)[0] for h in hits] == ["benchmarks/x.py:3", "benchmarks/x.py:7", "benchmarks/x.py:8",
                                                   "benchmarks/x.sh:2"], hits


def test_recorded_commands_with_a_scratch_path(tmp_path):
    (tmp_path / "results" / "a").mkdir(parents=True)
    (tmp_path / "results" / "a" / "bad.json").write_text(json.dumps(
        {"command": "benchmarks/g.py --out /tmp/b68/generate", "rows": [{"note": "/tmp/ in data is not a command"}]}))
    (tmp_path / "results" / "a" / "args.json").write_text(json.dumps({"args": {"out": "../../tmp/b68/score.json"}}))
    (tmp_path / "results" / "a" / "good.json").write_text(json.dumps(
        {"command": ["x.py", "--out", "results/a/good.json"], "rows": [{"path": "/tmp/x"}]}))
    hits = scratch_commands(["results/a/bad.json", "results/a/args.json", "results/a/good.json"], root=tmp_path)
    assert [h.split(":", 1)[0] for h in hits] == ["results/a/bad.json", "results/a/args.json"], hits
