"""Check every relative link and #anchor in the repository's Markdown files, offline.

    python scripts/docs/check_links.py            # every tracked (or new, not ignored) .md file
    python scripts/docs/check_links.py FILE ...   # these files only

A link is broken when its file or directory does not exist, or when its #anchor is not a heading (or an explicit `<a
name>` / `id`) of the Markdown file it points to, by GitHub's rule for heading anchors: the heading's text as
rendered, lower-cased, every character that is not a letter, a digit, a space, `-` or `_` removed, spaces made
hyphens; a repeated heading gets -1, -2, ... A link to a file outside the repository is broken too (a clone lacks
it). Links to other sites (http:, https:, mailto:) are not fetched. Every broken link is listed, one per line
(`file:line: target: why`), and the exit status is 1 if there is one.

A repository path written as code (in a `code span` or a fenced or indented code block) is checked too: a word that
begins with benchmarks/, configs/, docs/, results/, scripts/ or src/ and ends in .py, .sh, .json, .jsonl, .md, .png,
.toml or .log must name a file of the repository (from its root). Not checked: a path a command writes (the argument
of --out, --plot, -o, > or >>) and a path with a placeholder in it (<...>, {...}, *, ?, $, or an upper-case word
such as NAME)."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\"|\s+'[^']*')?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"""<[a-z]+\b[^>]*?\b(?:name|id)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
SETEXT_UNDERLINE = re.compile(r"^\s{0,3}(=+|-+)\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# a repository path written as code: a word that begins with one of the top folders (not inside a longer path nor a
# git REV:path) and ends in a file extension; what a command writes and placeholders are left alone
REPO_PATH = re.compile(r"(?<![\w./~$:-])((?:benchmarks|configs|docs|results|scripts|src)/[^\s`'\"()\[\],;|]*)")
PATH_EXTENSION = re.compile(r"\.(?:py|sh|json|jsonl|md|png|toml|log)$")
OUTPUT_BEFORE = re.compile(r"(?:^|\s)(?:--out|--plot|-o|>>?)(?:\s+|=)$|>$")
PLACEHOLDER = re.compile(r"[<>{}*?$]|\b(?!(?:README|CHANGELOG|CONTRIBUTING|ARCHITECTURE|LICENSE)\b)[A-Z][A-Z0-9_]{2,}\b")
INDENTED_CODE = re.compile(r"^(?: {4}|\t)")


def markdown_files() -> list[Path]:
    """The repository's .md files: tracked, or new and not ignored (so that a page not yet committed is checked)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "*.md"],
                             cwd=ROOT, capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): every .md file below ROOT
        return sorted(p for p in ROOT.rglob("*.md") if not any(part.startswith(".") for part in p.parts))
    return sorted({ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()})


def fenced(text: str) -> list[tuple[int, str, str]]:
    """(line number, line, where) for each line: where is "fence" for a fence's own line, "code" inside a fenced
    block, "text" elsewhere."""
    out: list[tuple[int, str, str]] = []
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if not fence:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = ""
            out.append((number, line, "fence"))
        else:
            out.append((number, line, "code" if fence else "text"))
    return out


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    return [(number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line))
            for number, line, where in fenced(text) if where == "text"]


def code_texts(text: str) -> list[tuple[int, str]]:
    """(line number, code) for every line of a fenced or indented code block and every inline code span."""
    out: list[tuple[int, str]] = []
    previous_blank_or_code = True
    for number, line, where in fenced(text):
        if where == "fence":
            previous_blank_or_code = False
            continue
        if where == "code":
            out.append((number, line))
        elif INDENTED_CODE.match(line) and line.strip() and previous_blank_or_code:
            out.append((number, line))  # an indented block (or a list item's indented text: its paths are checked)
            continue
        else:
            out += [(number, m.group(0).strip("`")) for m in CODE_SPAN.finditer(line)]
        previous_blank_or_code = not line.strip()
    return out


def repo_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) for every repository path written as code that must exist (see the module's docstring)."""
    out: list[tuple[int, str]] = []
    for number, code in code_texts(text):
        for match in REPO_PATH.finditer(code):
            path = match.group(1).rstrip(".:")
            if (PATH_EXTENSION.search(path) and not PLACEHOLDER.search(path)
                    and not OUTPUT_BEFORE.search(code[:match.start()])):
                out.append((number, path))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (without the -N of a repeat)."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown file has: its headings' (repeats numbered) and its explicit names and ids."""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    counts: dict[str, int] = {}
    lines = prose_lines(text)
    raw = {n: line for n, line in enumerate(text.splitlines(), 1)}
    previous: tuple[int, str] | None = None
    for number, line in lines:
        heading = None
        match = ATX_HEADING.match(line)
        if match:
            heading = raw[number].strip().lstrip("#").strip().rstrip("#").strip()
        elif (SETEXT_UNDERLINE.match(line) and previous is not None and previous[0] == number - 1
              and previous[1].strip() and not ATX_HEADING.match(previous[1])):
            heading = raw[previous[0]].strip()
        if heading is not None:
            base = slug(heading)
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found.update(m.group(1) for m in HTML_ANCHOR.finditer(line))
        previous = (number, line)
    return frozenset(found)


def link_targets(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for number, line in prose_lines(text):
        for pattern in (INLINE_LINK, HTML_LINK):
            out += [(number, m.group(1)) for m in pattern.finditer(line)]
        match = REFERENCE_DEF.match(line)
        if match:
            out.append((number, match.group(1)))
    return [(n, t[1:-1] if t.startswith("<") and t.endswith(">") else t) for n, t in out]


def check_file(path: Path, root: Path = ROOT) -> list[str]:
    """Every broken link of a Markdown file and every repository path in its code that names no file of `root`."""
    problems: list[str] = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for number, target in link_targets(path.read_text(encoding="utf-8")):
        if EXTERNAL.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part.split("?", 1)[0])
        if file_part.startswith("/"):
            resolved = ROOT / file_part.lstrip("/")
        elif file_part:
            resolved = (path.parent / file_part).resolve()
        else:
            resolved = path
        if not resolved.exists():
            problems.append(f"{where}:{number}: {target}: no such file or directory")
            continue
        if path.is_relative_to(root) and not resolved.is_relative_to(root):
            problems.append(f"{where}:{number}: {target}: outside the repository (not in a clone of it)")
            continue
        if anchor and resolved.suffix.lower() == ".md" and resolved.is_file():
            if unquote(anchor).lower() not in anchors(resolved) and unquote(anchor) not in anchors(resolved):
                problems.append(f"{where}:{number}: {target}: no heading with anchor #{anchor} in "
                                f"{resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
    for number, repo_path in repo_paths(path.read_text(encoding="utf-8")):
        if not (root / repo_path).exists():
            problems.append(f"{where}:{number}: {repo_path}: no such file in the repository (a path written as code)")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    files = [Path(a).resolve() for a in args] if args else markdown_files()
    problems = [p for f in files for p in check_file(f)]
    for problem in problems:
        print(problem)
    if problems:
        files = len({p.split(":")[0] for p in problems})
        print(f"{len(problems)} broken link(s) or missing path(s) in {files} file(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
