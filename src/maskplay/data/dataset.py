"""A prepared split on disk: every sequence's token ids back to back in `tokens.bin` (memory-mapped, so
a corpus of any size costs no RAM), `offsets.npy` with the start of each sequence (n + 1 entries),
`meta.json` describing both, and `words.bin`, per piece the source words that begin there (data/words.py; absent
from splits prepared before it existed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .words import WORDS_DTYPE, WORDS_NAME

TOKENS_NAME = "tokens.bin"
OFFSETS_NAME = "offsets.npy"
META_NAME = "meta.json"


class TokenDataset:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / META_NAME
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} not found: is {self.directory} a split written by "
                                    "`maskplay prepare`?")
        from ..runtime.files import read_json_object

        self.meta = read_json_object(meta_path)  # damaged JSON: one line naming the file
        if self.meta.get("dtype") not in ("uint16", "int32", "uint32", "int64"):
            raise ValueError(f"{meta_path} is damaged: \"dtype\" {self.meta.get('dtype')!r} is not a token dtype")
        offsets = self.directory / OFFSETS_NAME
        try:
            self.offsets = np.load(offsets, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:  # garbage, truncated, pickled: not read as data
            raise ValueError(f"{offsets} is damaged: not a readable array of sequence offsets "
                             f"({str(err).splitlines()[0][:120]}); prepare the corpus again") from None
        if (self.offsets.ndim != 1 or not len(self.offsets) or self.offsets.dtype.kind not in "iu"
                or int(self.offsets[0]) != 0 or int(self.offsets[-1]) < 0):
            raise ValueError(f"{offsets} is damaged: not the offsets `maskplay prepare` writes (one integer per "
                             "sequence and one more, from 0); prepare the corpus again")
        dtype = np.dtype(self.meta["dtype"])
        n_tokens = int(self.offsets[-1])
        tokens = self.directory / TOKENS_NAME
        size = tokens.stat().st_size if tokens.is_file() else None
        if size != n_tokens * dtype.itemsize:
            found = "missing" if size is None else f"{size} bytes"
            raise ValueError(f"{tokens} is damaged: {found} for the {n_tokens} tokens of {offsets.name} "
                             f"({dtype.itemsize} bytes each); prepare the corpus again")
        self.tokens = (np.memmap(tokens, dtype=dtype, mode="r", shape=(n_tokens,))
                       if n_tokens else np.zeros(0, dtype=dtype))
        words = self.directory / WORDS_NAME
        self.words: np.ndarray | None = None
        if words.is_file():
            if words.stat().st_size != n_tokens * np.dtype(WORDS_DTYPE).itemsize:
                raise ValueError(f"{words} is damaged: {words.stat().st_size} bytes for {n_tokens} tokens")
            self.words = (np.memmap(words, dtype=WORDS_DTYPE, mode="r", shape=(n_tokens,)) if n_tokens
                          else np.zeros(0, dtype=WORDS_DTYPE))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        if not -len(self) <= index < len(self):
            raise IndexError(f"sequence {index} out of range for {len(self)} sequences in {self.directory}")
        index %= len(self)
        return np.asarray(self.tokens[self.offsets[index]:self.offsets[index + 1]], dtype=np.int64)

    def word_marks(self, index: int) -> np.ndarray:
        """Sequence `index`'s source words per piece (data/words.py); its slice [:n] holds the words of its first
        n pieces."""
        if self.words is None:
            raise ValueError(f"{self.directory} has no {WORDS_NAME} (prepared before word counts existed): "
                             "prepare the corpus again with `maskplay prepare`")
        index %= len(self)
        return np.asarray(self.words[self.offsets[index]:self.offsets[index + 1]], dtype=np.int64)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def num_words(self) -> int | None:
        """The split's source words, or None without words.bin."""
        return None if self.words is None else int(np.asarray(self.words).sum(dtype=np.int64))


def write_split(directory: str | Path, sequences: list[list[int]] | list[np.ndarray], vocab_size: int,
                extra_meta: dict | None = None, words: list[list[int]] | None = None) -> None:
    """Write sequences in the TokenDataset layout (small splits; `maskplay prepare` streams large ones); `words`,
    per sequence the source words beginning at each piece, writes words.bin."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if vocab_size <= 65536 else np.uint32
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.concatenate([np.asarray(s, dtype=dtype) for s in sequences]) if sequences else np.zeros(0, dtype)
    flat.tofile(directory / TOKENS_NAME)
    np.save(directory / OFFSETS_NAME, offsets)
    meta = {"dtype": np.dtype(dtype).name, "num_sequences": len(sequences), "num_tokens": int(offsets[-1]),
            "vocab_size": vocab_size, **(extra_meta or {})}
    if words is not None:
        if [len(w) for w in words] != lengths.tolist():
            raise ValueError("write_split: words must give one count per piece of each sequence")
        marks = np.concatenate([np.asarray(w, dtype=WORDS_DTYPE) for w in words]) if words else np.zeros(0)
        marks.astype(WORDS_DTYPE).tofile(directory / WORDS_NAME)
        meta["num_words"] = int(marks.sum(dtype=np.int64))
    (directory / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")


def pad_batch(sequences: list[np.ndarray] | list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-pad to the longest sequence: (input_ids, attention_mask), both (B, L), the mask bool."""
    if not sequences:
        raise ValueError("empty batch: no sequences to pad")
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(np.asarray(seq, dtype=np.int64))
        mask[row, : len(seq)] = True
    return ids, mask
