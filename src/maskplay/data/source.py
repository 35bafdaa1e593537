"""The one reader of text inputs that every command uses (`--file`, `--train`, `--dev`, corpora, eval data):
plain files, `-` (stdin), FIFOs and process substitutions (`<(...)`, /dev/fd/N), gzip (told from the bytes);
strict UTF-8 (a BOM dropped); lines split on "\\n" only (a "\\r" before it dropped), never on U+2028, form feeds
or other separators that str.splitlines breaks at.

Invalid UTF-8 and NUL bytes are handled the same way everywhere: a ValueError naming the file, the line and the
byte offset (`bad_utf8_message`, `nul_message`). Corpus readers (`prepare`, `tokenizer train`) may instead
replace invalid bytes and count them (`--on-invalid-utf8 replace`); a NUL byte is refused there too."""

from __future__ import annotations

import csv
import gzip
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STDIN = "-"
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"


def display(path: str | Path | None) -> str:
    return "<stdin>" if path is None or str(path) == STDIN else str(path)


def is_stream(path: str | Path) -> bool:
    """A FIFO, a process substitution or a character device: read once, front to back."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


_STREAMS: dict[str, bytes] = {}  # a stream can be read once: its bytes, kept for a second read (format sniffing)


def raw_bytes(path: str | Path) -> bytes:
    """The bytes of a file, or of a FIFO / process substitution (read once, then served from memory: opening a
    FIFO again after its writer has gone would wait forever)."""
    key = str(path)
    if key in _STREAMS:
        return _STREAMS[key]
    with open(path, "rb") as f:
        data = f.read()
    if is_stream(path):
        _STREAMS[key] = data
    return data


def check_input(path: str | Path, what: str = "") -> Path:
    """`path` as an input: a file or a stream; a directory or a missing path is a one-line error naming it."""
    p = Path(path)
    lead = f"{what} " if what else ""
    if p.is_dir():
        raise ValueError(f"{lead}{p} is a directory; a text file was expected there")
    if not (p.is_file() or is_stream(p)):
        raise FileNotFoundError(f"{lead}{p} not found")
    return p


def read_bytes(path: str | Path | None, what: str = "") -> tuple[str, bytes]:
    """(name for messages, the decompressed bytes) of a file, a stream or stdin (None or '-')."""
    if path is None or str(path) == STDIN:
        source, data = "<stdin>", sys.stdin.buffer.read()
    else:
        p = check_input(path, what)
        source = str(p)
        data = raw_bytes(p)
        if p.suffix == ".gz" and data[:2] != GZIP_MAGIC:
            raise ValueError(f"{source}: not a readable gzip file (named .gz, but it does not start as gzip does)")
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (gzip.BadGzipFile, EOFError, zlib.error) as err:
            raise ValueError(f"{source}: not a readable gzip file ({type(err).__name__}: {err})") from None
    return source, data


def bad_utf8_message(source: str, line: int, offset: int, bad: bytes, hint: str = "input must be UTF-8 text") -> str:
    return f"{source}:{line}: invalid UTF-8 at byte offset {offset} ({bad!r}); {hint}"


def nul_message(source: str, line: int, offset: int) -> str:
    return f"{source}:{line}: NUL byte at byte offset {offset}; this looks like a binary file, not text"


def decode(data: bytes, source: str) -> str:
    """Strict UTF-8 without NUL bytes (a leading BOM dropped); an error names the file, line and byte offset."""
    shift = 3 if data.startswith(BOM) else 0
    body = data[shift:]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        line = body[:err.start].count(b"\n") + 1
        raise ValueError(bad_utf8_message(source, line, err.start + shift, body[err.start:err.start + 4])) from None
    nul = body.find(b"\x00")
    if nul >= 0:
        raise ValueError(nul_message(source, body[:nul].count(b"\n") + 1, nul + shift))
    return text


def split_lines(text: str) -> list[str]:
    """Lines on "\\n" only, each without a trailing "\\r"; a final newline does not start an empty line."""
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    return [row.removesuffix("\r") for row in rows]


def read_text(path: str | Path | None, what: str = "") -> tuple[str, str]:
    """(name for messages, the whole text) of a file, stream or stdin."""
    source, data = read_bytes(path, what)
    return source, decode(data, source)


def read_lines(path: str | Path | None, what: str = "") -> tuple[str, list[str]]:
    """(name for messages, its lines) of a file, stream or stdin; line k is element k - 1."""
    source, text = read_text(path, what)
    return source, split_lines(text)


@contextmanager
def csv_field_limit(longest: int) -> Iterator[None]:
    """Lift the csv module's field limit (131,072 characters) to `longest` for the rows read inside: a field cannot
    be longer than its line, so the limit is the longest line read and no field is refused for its size (how
    much of a long text is used is the model's and --max-pieces' business, not the CSV reader's)."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, min(longest + 1, sys.maxsize)))
    try:
        yield
    finally:
        csv.field_size_limit(old)
