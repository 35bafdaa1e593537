"""Source words, as the BabyLM Challenge counts them: whitespace-separated words of the text (`len(text.split())`),
not word pieces. `maskplay prepare` writes, next to each split's tokens.bin, a words.bin of one uint8 per piece:
how many source words begin at that piece. The words of any slice of a sequence (a truncated row, a packed row,
a window of an overlong sentence) are then the sum over its pieces, exactly; a split's words sum to the words of
its text (less those of pieces dropped by truncation at prepare time).

A word is given to the first piece that ends after the word's first character: the first piece that covers it,
or, for a word the tokenizer turned into no piece at all (rare: a lone control character), the next piece, or the
sentence's last piece when none follows."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

WORDS_NAME = "words.bin"
WORDS_DTYPE = np.uint8
_WORD = re.compile(r"\S+")


def count_words(text: str) -> int:
    """BabyLM's count: whitespace-separated words."""
    return len(text.split())


def piece_words(text: str, offsets: Sequence[tuple[int, int]]) -> np.ndarray:
    """(n_pieces,) uint8: the source words of `text` that begin at each piece, from the pieces' character
    offsets into `text` (HuggingFace tokenizers' Encoding.offsets); they sum to count_words(text)."""
    n = len(offsets)
    if n == 0:
        return np.zeros(0, dtype=WORDS_DTYPE)
    starts = np.fromiter((m.start() for m in _WORD.finditer(text)), dtype=np.int64)
    ends = np.fromiter((end for _, end in offsets), dtype=np.int64, count=n)
    upto = np.maximum.accumulate(np.searchsorted(starts, ends, side="left"))  # words begun before each piece ends
    upto[-1] = len(starts)
    counts = np.diff(upto, prepend=0)
    # a piece that begins more than 255 words would need a run of 255 pieceless words: clipped, never seen
    return np.minimum(counts, np.iinfo(WORDS_DTYPE).max).astype(WORDS_DTYPE)
