"""Corpus readers: plain text, hard-wrapped paragraphs, JSONL and WikiExtractor output, each optionally
gzip-compressed. Every format yields `Document`s whose `paragraphs` are the non-blank units of text that the
sentence splitter and the tokenizer trainer see.

Files are read as bytes and decoded line by line, so an invalid UTF-8 sequence can be reported with its exact
byte offset (in the decompressed data for .gz files) instead of a codec error with no location."""

from __future__ import annotations

import codecs
import gzip
import html
import io
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .source import bad_utf8_message, is_stream, nul_message, raw_bytes

# auto: by extension (.jsonl/.json) and first line (<doc ...> = WikiExtractor); plain files are sniffed
# for hard wrapping (see _looks_wrapped).
FORMATS = ("auto", "text", "paragraphs", "jsonl", "wikiextractor")
INVALID_UTF8_POLICIES = ("error", "replace")

GZIP_MAGIC = b"\x1f\x8b"
DOC_OPEN = re.compile(r'<doc\b[^>]*?\btitle="([^"]*)"[^>]*>\s*$')
# WikiExtractor leaves some markup it did not parse (escaped, so &lt;ref name=".."&gt;&lt;/ref&gt; in the
# file): drop references with their content, then any other tag.
REF_TAG = re.compile(r"<ref\b[^<>]*/>|<ref\b[^<>]*>.*?</ref\s*>", re.S)
ANY_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
SENTENCE_END = tuple('.!?:;"\')]”’»')


@dataclass
class ReadStats:
    """What the readers saw; summed over all files."""

    files: int = 0
    documents: int = 0
    empty_documents: int = 0
    lines: int = 0  # physical lines read, markup and blank lines included
    blank_lines: int = 0  # empty or whitespace-only lines of text, skipped
    invalid_utf8_replaced: int = 0  # invalid byte sequences replaced by U+FFFD (--on-invalid-utf8 replace)
    bytes: int = 0  # decompressed bytes read
    formats: dict[str, int] = field(default_factory=dict)  # files read per detected format


@dataclass
class Document:
    source: str  # "file:line" of the document's first line, for messages
    paragraphs: list[str]
    title: str = ""  # WikiExtractor's title attribute (unescaped); "" for formats without titles


def resolve_corpus(paths: Iterable[str | Path]) -> list[Path]:
    """The files named, with a directory standing for every file under it (sorted, hidden files skipped), or
    for its BabyLM training files alone when it holds some (babylm_files)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*")
                           if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise FileNotFoundError(f"corpus directory {path} contains no files")
            files.extend(babylm_files(path, found))
        elif path.is_file() or is_stream(path):  # a FIFO or <(...) is read once, into memory (_open_binary)
            files.append(path)
        else:
            raise FileNotFoundError(f"corpus file {path} not found")
    if not files:
        raise ValueError("no corpus files given")
    return files


BABYLM_SUFFIX = ".train"
BABYLM_HELD_OUT = (".dev", ".test")


def babylm_files(root: Path, found: list[Path]) -> list[Path]:
    """BabyLM's layout: a folder of `.train` text files, one utterance or line of prose per line
    (train_10M/bnc_spoken.train, childes.train, ...), beside dev/*.dev and test/*.test. A directory that holds
    `.train` files (plain or .gz) stands for them alone, so that passing BabyLM's whole download never trains on
    its dev or test files; training files in several folders (train_10M and train_100M) are ambiguous."""
    train = [p for p in found if p.name.removesuffix(".gz").endswith(BABYLM_SUFFIX)]
    if not train:
        held = [p for p in found if p.name.removesuffix(".gz").endswith(BABYLM_HELD_OUT)]
        if held:  # BabyLM's dev or test folder, or the download without its training files
            raise ValueError(f"corpus directory {root} holds BabyLM's held-out files ({held[0].name}, ...) and no "
                             f"training files (*{BABYLM_SUFFIX}): pass the folder of the training files (train_10M, "
                             "train_100M), or the files themselves")
        return found
    folders = sorted({str(p.parent.relative_to(root)) for p in train})
    if len(folders) > 1:
        raise ValueError(f"corpus directory {root} holds BabyLM training files (*{BABYLM_SUFFIX}) in several "
                         f"folders ({', '.join(folders)}): pass the one to train on")
    return train


def _raw(path: Path) -> IO[bytes]:
    if is_stream(path):  # a FIFO or <(...): read once, kept in memory (maskplay.data.source.raw_bytes)
        return io.BytesIO(raw_bytes(path))
    return open(path, "rb")


def _open_binary(path: Path) -> IO[bytes]:
    with _raw(path) as f:
        magic = f.read(2)
    return gzip.GzipFile(fileobj=_raw(path), mode="rb") if magic == GZIP_MAGIC else _raw(path)


def _is_gzip(path: Path) -> bool:
    with _raw(path) as f:
        return f.read(2) == GZIP_MAGIC


def _base_suffix(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return Path(name).suffix.lower()


class _Lines:
    """Decoded lines of one file with line numbers; invalid UTF-8 raises or is replaced and counted."""

    def __init__(self, path: Path, on_invalid_utf8: str, stats: ReadStats) -> None:
        if on_invalid_utf8 not in INVALID_UTF8_POLICIES:
            raise ValueError(f"on_invalid_utf8 must be one of {INVALID_UTF8_POLICIES}, got {on_invalid_utf8!r}")
        self.path, self.policy, self.stats = path, on_invalid_utf8, stats
        self.gz = _is_gzip(path)
        self.lineno = 0

    def _replace(self, raw: bytes) -> str:
        replaced = 0

        def count(err: UnicodeDecodeError) -> tuple[str, int]:
            nonlocal replaced
            replaced += 1
            return "\ufffd", err.end

        codecs.register_error("maskplay-count-replace", count)
        text = raw.decode("utf-8", errors="maskplay-count-replace")
        self.stats.invalid_utf8_replaced += replaced
        return text

    def __iter__(self) -> Iterator[str]:
        offset = 0
        try:
            with _open_binary(self.path) as f:
                for raw in f:
                    self.lineno += 1
                    self.stats.lines += 1
                    self.stats.bytes += len(raw)
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as err:
                        if self.policy == "error":
                            where = "the offset is in the decompressed data; " if self.gz else ""
                            raise ValueError(bad_utf8_message(
                                str(self.path), self.lineno, offset + err.start, raw[err.start:err.end],
                                f"{where}pass --on-invalid-utf8 replace to replace invalid bytes")) from None
                        text = self._replace(raw)
                    if "\x00" in text:  # a binary file: refused with either policy (maskplay.data.source)
                        raise ValueError(nul_message(str(self.path), self.lineno, offset + raw.index(b"\x00")))
                    if self.lineno == 1 and text.startswith("\ufeff"):
                        text = text[1:]  # a UTF-8 byte order mark is not text
                    offset += len(raw)
                    yield text.rstrip("\r\n")
        except (gzip.BadGzipFile, EOFError, zlib.error) as err:
            raise ValueError(f"{self.path}: corrupt or truncated gzip data after line {self.lineno}: {err}") from None

    def where(self) -> str:
        return f"{self.path}:{self.lineno}"


def _first_lines(path: Path, max_bytes: int = 1 << 16) -> list[str]:
    with _open_binary(path) as f:
        try:
            head = f.read(max_bytes)
        except (gzip.BadGzipFile, EOFError, zlib.error) as err:
            raise ValueError(f"{path}: corrupt or truncated gzip data: {err}") from None
    lines = head.decode("utf-8", errors="replace").lstrip("\ufeff").split("\n")
    return lines[:-1] if len(lines) > 1 else lines  # the last one may be cut


def _looks_wrapped(lines: list[str]) -> bool:
    """Hard-wrapped prose (Gutenberg): lines often end mid-sentence and the next line goes on in lower case.
    A one-sentence-per-line file rarely does that, and an all-lower-case file is never called wrapped, since
    there a lower-case start says nothing."""
    text = "\n".join(lines)
    if not any(c.isupper() for c in text) or not any(c.islower() for c in text):
        return False
    pairs = continued = 0
    for a, b in zip(lines, lines[1:], strict=False):
        a, b = a.strip(), b.strip()
        if a and b:
            pairs += 1
            continued += not a.endswith(SENTENCE_END) and b[0].islower()
    return pairs >= 20 and continued >= 0.3 * pairs


def detect_format(path: str | Path) -> str:
    """The format of one file: .jsonl/.json (also .gz-compressed) is JSONL, a first non-blank line `<doc ...>`
    is WikiExtractor, a first line that is a JSON object with "text" is JSONL, hard-wrapped prose is
    paragraphs, anything else plain text (one paragraph or sentence per line)."""
    path = Path(path)
    if _base_suffix(path) in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    lines = _first_lines(path)
    first = next((line.strip() for line in lines if line.strip()), "")
    if first.startswith("<doc "):
        return "wikiextractor"
    if first.startswith("{"):
        try:
            if isinstance(obj := json.loads(first), dict) and "text" in obj:
                return "jsonl"
        except ValueError:
            pass
    return "paragraphs" if _looks_wrapped(lines) else "text"


def _read_text(lines: _Lines, stats: ReadStats) -> Iterator[Document]:
    """Every non-blank line is one document (a sentence or a paragraph): a one-sentence-per-line corpus
    then still has documents small enough to hold out."""
    for line in lines:
        if line.strip():
            stats.documents += 1
            yield Document(lines.where(), [line.strip()])
        else:
            stats.blank_lines += 1


def _read_paragraphs(lines: _Lines, stats: ReadStats) -> Iterator[Document]:
    """Blank-line-separated blocks are documents; the lines of a block are joined with spaces (hard wrap)."""
    block: list[str] = []
    start = ""
    for line in lines:
        if line.strip():
            if not block:
                start = lines.where()
            block.append(line.strip())
            continue
        stats.blank_lines += 1
        if block:
            stats.documents += 1
            yield Document(start, [" ".join(block)])
            block = []
    if block:
        stats.documents += 1
        yield Document(start, [" ".join(block)])


def _split_text_field(text: str, stats: ReadStats) -> list[str]:
    if not text.strip():
        return []  # an empty document, counted as such rather than as blank lines
    paragraphs = []
    for part in text.split("\n"):
        if part.strip():
            paragraphs.append(part.strip())
        else:
            stats.blank_lines += 1
    return paragraphs


def _read_jsonl(lines: _Lines, stats: ReadStats) -> Iterator[Document]:
    for line in lines:
        if not line.strip():
            stats.blank_lines += 1
            continue
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{lines.where()}: not valid JSON: {err}") from None
        if not isinstance(obj, dict) or "text" not in obj:
            raise ValueError(f"{lines.where()}: a JSON object with a \"text\" field expected, got "
                             f"{line[:80]!r}")
        text = obj["text"]
        if not isinstance(text, str):
            raise ValueError(f"{lines.where()}: \"text\" must be a string, got {type(text).__name__}")
        if "\\ud" in line.lower():  # a lone surrogate escape decodes to a str that cannot be encoded
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{lines.where()}: \"text\" contains a lone UTF-16 surrogate escape") from None
        stats.documents += 1
        paragraphs = _split_text_field(text.replace("\r\n", "\n").replace("\r", "\n"), stats)
        stats.empty_documents += not paragraphs
        yield Document(lines.where(), paragraphs)


def _clean_wiki(line: str) -> str:
    if "&" in line:
        line = html.unescape(line)
        if "<" in line:
            line = ANY_TAG.sub(" ", REF_TAG.sub("", line))
            line = " ".join(line.split())
    return line.strip()


def _read_wikiextractor(lines: _Lines, stats: ReadStats) -> Iterator[Document]:
    """`<doc id=.. url=.. title=..>`, the title again on the next line, the body (one paragraph per line),
    `</doc>`. The body is HTML-escaped by WikiExtractor, so it is unescaped here and leftover tags dropped."""
    title: str | None = None
    start = ""
    body: list[str] = []
    first_body_line = False
    for line in lines:
        stripped = line.strip()
        if title is None:
            if not stripped:
                stats.blank_lines += 1
                continue
            match = DOC_OPEN.match(stripped)
            if not match:
                raise ValueError(f"{lines.where()}: expected a WikiExtractor <doc ... title=\"...\"> line, got "
                                 f"{stripped[:80]!r}")
            title, start, body, first_body_line = match.group(1), lines.where(), [], True
            continue
        if stripped == "</doc>":
            stats.documents += 1
            stats.empty_documents += not body
            yield Document(start, body, html.unescape(title).strip())
            title = None
            continue
        if stripped.startswith("<doc ") and DOC_OPEN.match(stripped):
            raise ValueError(f"{lines.where()}: <doc> inside the document opened at {start} (missing </doc>)")
        if first_body_line:
            first_body_line = False
            if stripped == title.strip() or html.unescape(stripped) == html.unescape(title).strip():
                continue  # the title, repeated as the first line
        if not stripped:
            stats.blank_lines += 1
            continue
        cleaned = _clean_wiki(stripped)
        if cleaned:
            body.append(cleaned)
        else:
            stats.blank_lines += 1  # nothing left but markup
    if title is not None:
        raise ValueError(f"{lines.where()}: end of file inside the document opened at {start} (missing </doc>)")


READERS = {"text": _read_text, "paragraphs": _read_paragraphs, "jsonl": _read_jsonl,
           "wikiextractor": _read_wikiextractor}


def iter_documents(paths: Iterable[str | Path], fmt: str = "auto", on_invalid_utf8: str = "error",
                   stats: ReadStats | None = None) -> Iterator[Document]:
    """Documents of every file in order (a directory = its files, sorted); `stats` is updated as they go."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    stats = stats if stats is not None else ReadStats()
    for path in resolve_corpus(paths):
        file_format = detect_format(path) if fmt == "auto" else fmt
        stats.files += 1
        stats.formats[file_format] = stats.formats.get(file_format, 0) + 1
        yield from READERS[file_format](_Lines(path, on_invalid_utf8, stats), stats)


def iter_paragraphs(paths: Iterable[str | Path], fmt: str = "auto", on_invalid_utf8: str = "error",
                    stats: ReadStats | None = None, limit: int | None = None) -> Iterator[str]:
    """The non-blank paragraphs of every document, at most `limit` of them (for training a tokenizer)."""
    n = 0
    for doc in iter_documents(paths, fmt, on_invalid_utf8, stats):
        for paragraph in doc.paragraphs:
            if limit is not None and n >= limit:
                return
            n += 1
            yield paragraph
