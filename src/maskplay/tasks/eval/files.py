"""Evaluation data given with `--file`: reading (plain or gzip, told from the bytes), naming, and telling the
format of a file from its content (`--format` overrides). Each task's loaders live in its own module; this one
only decides which loader a file goes to, and how a results file writes a path (portable)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from ...data.source import is_stream

GZIP_MAGIC = b"\x1f\x8b"

# task -> the formats its --file understands (the first is only a name; detection decides)
FORMATS: dict[str, tuple[str, ...]] = {
    "sts": ("stsb", "stsb-header", "sick", "semeval"),
    "pairs": ("blimp",),
    "blimp": ("blimp",),
    "nbest": ("jsonl", "mlm-scoring"),
    "spelling": ("zesch",),
    "cola": ("cola",),
}

# what a directory given to --file stands for, per task
DIRECTORY_GLOBS: dict[str, tuple[str, ...]] = {
    "sts": ("*.input.*.txt",),
    "pairs": ("*.jsonl", "*.jsonl.gz"),
    "blimp": ("*.jsonl", "*.jsonl.gz"),
}

SEMEVAL_INPUT = re.compile(r"^(?P<head>.*)\.input\.(?P<name>.+)\.txt$")
SEMEVAL_GOLD = re.compile(r"^(?P<head>.*)\.gs\.(?P<name>.+)\.txt$")


def read_text(path: str | Path) -> str:
    """The file as text: gzip when its first bytes say so (whatever the suffix; a .gz that is not gzip is an
    error), UTF-8 (a BOM is dropped), a FIFO or <(...) read as a file is (maskplay.data.source, the one reader).
    An unreadable gzip, bytes that are not UTF-8 or a NUL byte are a one-line error naming the file and line."""
    from ...data.source import read_text as read_source

    return read_source(path)[1]


def lines(path: str | Path) -> list[str]:
    """The file's lines without their line ends (\\n or \\r\\n); line k of the file is element k - 1."""
    return [line.removesuffix("\r") for line in read_text(path).split("\n")]


def expand(task: str, given: Sequence[str | Path]) -> list[Path]:
    """--file arguments as files: a directory stands for its files of the task's kind (sorted), where the task
    has such a kind (sts: SemEval `*.input.*.txt`, pairs and blimp: `*.jsonl` and `*.jsonl.gz`)."""
    files: list[Path] = []
    for p in map(Path, given):
        if p.is_dir():
            globs = DIRECTORY_GLOBS.get(task)
            if not globs:
                raise ValueError(f"{p} is a directory; `eval {task} --file` takes files")
            found = sorted({f for g in globs for f in p.glob(g) if f.is_file()})
            if not found:
                raise FileNotFoundError(f"{p}: no {' or '.join(globs)} files in this directory")
            files.extend(found)
        elif p.is_file() or is_stream(p):  # a FIFO or <(...) is read as a file is
            files.append(p)
        else:
            raise FileNotFoundError(f"{p} not found")
    return files


def base_name(path: Path) -> str:
    """x.jsonl.gz -> x, STS.input.headlines.txt -> headlines (the SemEval name), sts-dev.csv -> sts-dev."""
    m = SEMEVAL_INPUT.match(path.name) or SEMEVAL_GOLD.match(path.name)
    if m:
        return m["name"]
    name = path.name.removesuffix(".gz")
    return name.rsplit(".", 1)[0] if "." in name else name


def unique_names(paths: Sequence[Path]) -> list[str]:
    """A result name per file: its base name, or, where two files share one (headlines of STS13 and STS14),
    the path as given. The same file twice is an error."""
    resolved = [p.resolve() for p in paths]
    twice = sorted({str(p) for p, r in zip(paths, resolved, strict=True) if resolved.count(r) > 1})
    if twice:
        raise ValueError(f"{twice[0]} is given more than once")
    names = [base_name(p) for p in paths]
    return [n if names.count(n) == 1 else str(p) for n, p in zip(names, paths, strict=True)]


def semeval_pair(path: Path) -> tuple[Path, Path]:
    """(input file, gold file) of a SemEval STS file given by either name: STS.input.X.txt / STS.gs.X.txt
    (also the STS2016.input.X.txt spelling)."""
    m = SEMEVAL_INPUT.match(path.name)
    if m:
        gold = path.with_name(f"{m['head']}.gs.{m['name']}.txt")
        if not gold.is_file():
            raise FileNotFoundError(f"{path}: its gold file {gold.name} is not beside it")
        return path, gold
    m = SEMEVAL_GOLD.match(path.name)
    if m:
        source = path.with_name(f"{m['head']}.input.{m['name']}.txt")
        if not source.is_file():
            raise FileNotFoundError(f"{path}: its input file {source.name} is not beside it")
        return source, path
    raise ValueError(f"{path}: a SemEval STS file is named STS.input.NAME.txt (with STS.gs.NAME.txt beside it)")


def _first_line(path: Path) -> str:
    return next((line for line in lines(path) if line.strip()), "")


def detect(task: str, path: Path) -> str:
    """The format of `path` for `task`, told from its content (and, for SemEval, from the gold file beside
    it). Undecidable content is an error that names the formats and --format."""
    if task == "sts":
        if SEMEVAL_INPUT.match(path.name) or SEMEVAL_GOLD.match(path.name):
            return "semeval"
        first = _first_line(path)
        cells = first.split("\t")
        if "sentence_A" in cells and "relatedness_score" in cells:
            return "sick"
        if any({"sentence1", "sentence2"} <= set(c.strip() for c in first.split(d)) for d in "\t,"):
            return "stsb-header"
        if len(cells) >= 7 and _is_number(cells[4]):
            return "stsb"
    elif task == "pairs":
        d = _json_object(_first_line(path))
        if d is not None and "sentence_good" in d and "sentence_bad" in d:
            return "blimp"
    elif task == "nbest":
        first = _first_line(path)
        d = _json_object(first)
        if d is not None and "hyps" in d:
            return "jsonl"
        if first.lstrip().startswith("{"):
            text = read_text(path)
            head = re.search(r'"(?:ref|hyp_\d+)"\s*:', text[:100_000])
            if head:
                return "mlm-scoring"
    elif task == "spelling":
        block = [line for line in lines(path)[:7] if line.strip()]
        if len(block) >= 6 and _is_int(block[4]):
            return "zesch"
    elif task == "cola":
        cells = _first_line(path).split("\t")
        if len(cells) == 4 and cells[1] in ("0", "1"):
            return "cola"
    raise ValueError(f"{path}: cannot tell its format from its first line; `eval {task}` reads "
                     f"{', '.join(FORMATS[task])} (pass --format to say which)")


def _json_object(line: str) -> dict | None:
    try:
        d = json.loads(line)
    except json.JSONDecodeError:
        return None
    return d if isinstance(d, dict) else None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def portable(path: str | Path) -> str:
    """A path as results files hold it: never absolute (results are shared and compared across machines), so
    relative to the working directory when below it, else the last two components."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(Path(*path.parts[-2:]))
