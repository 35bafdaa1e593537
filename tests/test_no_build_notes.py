"""The repository speaks to its users: no tracked prose or source says how the project was built - work sessions
("session 28"), the tracker's item numbers ("issue 42"), conversation turns, the builders' room rules ("the house"),
seed texts that are not in the repository ("seed 001"), or a builder's machine paths (/work/...). Dates and commit
ids say when; git history says how.

Which files: every tracked file whose name says it is prose or source (CHECKED_SUFFIXES, Makefile, .ci/*, the lm-eval
task template) - README and docs pages, model cards, code, comments and strings, configs, shell scripts. Recorded
outputs (.json, .jsonl, .log, .txt, .csv: what a command wrote, kept as written) and binary files are data and are
not read; their paths are checked like every other tracked path. Every hit is reported as path:line."""

from __future__ import annotations

import re
import subprocess
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


def test_no_tracked_text_says_how_the_project_was_built():
    hits = build_notes(tracked_files())
    assert not hits, f"{len(hits)} lines say how the project was built:\n" + "\n".join(hits)


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
