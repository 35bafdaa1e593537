"""Check every relative link and #anchor in the repository's Markdown files, offline.

    python scripts/docs/check_links.py            # every tracked (or new, not ignored) .md file
    python scripts/docs/check_links.py FILE ...   # these files only

A link is broken when its file or directory does not exist, or when its #anchor is not a heading (or an explicit
`<a name>` / `id`) of the Markdown file it points to, by GitHub's rule for heading anchors: the heading's text as
rendered, lower-cased, every character that is not a letter, a digit, a space, `-` or `_` removed, spaces made
hyphens; a repeated heading gets -1, -2, ... Links to other sites (http:, https:, mailto:) are not fetched. Every
broken link is listed, one per line (`file:line: target: why`), and the exit status is 1 if there is one."""

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


def markdown_files() -> list[Path]:
    """The repository's .md files: tracked, or new and not ignored (so that a page not yet committed is checked)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "*.md"],
                             cwd=ROOT, capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): every .md file below ROOT
        return sorted(p for p in ROOT.rglob("*.md") if not any(part.startswith(".") for part in p.parts))
    return sorted({ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()})


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    out: list[tuple[int, str]] = []
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if not fence:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = ""
            continue
        if not fence:
            out.append((number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
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


def check_file(path: Path) -> list[str]:
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
        if anchor and resolved.suffix.lower() == ".md" and resolved.is_file():
            if unquote(anchor).lower() not in anchors(resolved) and unquote(anchor) not in anchors(resolved):
                problems.append(f"{where}:{number}: {target}: no heading with anchor #{anchor} in "
                                f"{resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    files = [Path(a).resolve() for a in args] if args else markdown_files()
    problems = [p for f in files for p in check_file(f)]
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken link(s) in {len({p.split(':')[0] for p in problems})} file(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
