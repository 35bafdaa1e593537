"""Sentences in: reading text files strictly, and tokenizing with the word and character spans that scoring
needs (which pieces form a word, where each piece sits in the original string)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...data.tokenizer import Tokenizer


@dataclass(frozen=True)
class Encoded:
    """One sentence's pieces, without [SOS]/[EOS]. word_ids[k] numbers the word piece k belongs to (the
    tokenizer's pre-tokenizer words: whitespace- and punctuation-separated); offsets[k] is the piece's
    (start, end) character span in `text`."""

    text: str
    ids: list[int]
    tokens: list[str]
    word_ids: list[int]
    offsets: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.ids)


def _require_str(texts: list[str]) -> None:
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"sentence {index} is a {type(text).__name__}, not a str")


def encode_texts(tokenizer: Tokenizer, texts: list[str]) -> list[Encoded]:
    """Tokenize without specials; the ids are exactly tokenizer.encode(text)[1:-1]."""
    _require_str(texts)
    out = []
    for text, enc in zip(texts, tokenizer.backend.encode_batch(texts, add_special_tokens=False), strict=True):
        # A piece without a word (only specials have none, and none are added here) gets a word of its own,
        # so it is never merged with its neighbours.
        word_ids = [-1 - k if w is None else w for k, w in enumerate(enc.word_ids)]
        out.append(Encoded(text, list(enc.ids), list(enc.tokens), word_ids, [tuple(o) for o in enc.offsets]))
    return out


def encode_ids(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    """The ids of encode_texts alone (what embeddings need), without building the spans: about half the time."""
    _require_str(texts)
    backend = tokenizer.backend
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # _fast: no offsets (tokenizers >= 0.20)
    ids = [enc.ids for enc in encode(texts, add_special_tokens=False)]
    for index, (text, one) in enumerate(zip(texts, ids, strict=True)):
        if not one:
            _nothing_to_score(index, text)
    return ids


def require_nonempty(encoded: list[Encoded]) -> None:
    for index, enc in enumerate(encoded):
        if not enc.ids:
            _nothing_to_score(index, enc.text)


def _nothing_to_score(index: int, text: str) -> None:
    what = "empty" if not text.strip() else f"{text!r}, which has no tokens after tokenization"
    raise ValueError(f"sentence {index} is {what}: there is nothing to score or embed")


def decode_text(data: bytes, source: str) -> str:
    """Strict UTF-8: invalid bytes and NUL bytes (a binary file) are errors naming the line and byte offset, never
    silently replaced, so that a score always belongs to the text that was asked about (maskplay.data.source)."""
    from ...data.source import decode

    return decode(data, source)


def is_empty(text: str) -> bool:
    return not text.strip()


def read_lines(path: str | Path | None, empty: str = "error") -> list[tuple[int, str]]:
    """(line number, text) for every line of a UTF-8 file (None or '-' = stdin). A blank (or whitespace-only)
    line is an error naming it with empty="error"; with empty="keep" it is returned as it is, so that the caller
    can give it an output row marked empty and keep output rows aligned with input lines."""
    if empty not in ("error", "keep"):
        raise ValueError(f"empty must be 'error' or 'keep', got {empty!r}")
    from ...data.source import read_lines as read_source_lines

    source, rows = read_source_lines(path, "--file")
    lines = []
    for number, line in enumerate(rows, start=1):
        if is_empty(line) and empty == "error":
            raise ValueError(f"{source}:{number}: empty line; write one sentence per line, no blank lines "
                             "(or keep them as empty rows: --empty keep)")
        lines.append((number, line))
    if not lines or all(is_empty(line) for _, line in lines):
        raise ValueError(f"{source}: no sentences (the input is empty)")
    return lines
