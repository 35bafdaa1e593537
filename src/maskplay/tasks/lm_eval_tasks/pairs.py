"""The data of the maskplay_pairs task: the pairs files read and checked by maskplay's own BLiMP reader
(maskplay.tasks.eval.pairs.load_pairs: plain or gzip, one line naming the file and line for anything that is not a pair),
then handed to lm-eval as a datasets.DatasetDict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAMPLE = Path(__file__).resolve().parent / "sample_pairs.jsonl"


def pair_files(pairs: Any) -> list[Path]:
    """The files metadata 'pairs' names (a file name or a list of them; None: the sample)."""
    if pairs is None:
        return [SAMPLE]
    if isinstance(pairs, str) and pairs:
        return [Path(pairs)]
    if isinstance(pairs, list) and pairs and all(isinstance(p, str) and p for p in pairs):
        return [Path(p) for p in pairs]
    raise ValueError(f"maskplay_pairs: metadata 'pairs' must be a file name or a list of file names, got "
                     f"{pairs!r}"[:300])


def load(pairs: str | list[str] | None = None, **metadata: Any) -> Any:
    """A DatasetDict with one split, train, of the pairs in `pairs` (a file or a list of files; default: the
    sample); a missing file is a FileNotFoundError naming it, a bad line a ValueError naming file and line."""
    import datasets

    from maskplay.tasks.eval.pairs import load_pairs

    rows = []
    for path in pair_files(pairs):
        if not path.is_file():
            raise FileNotFoundError(f"maskplay_pairs: {path} not found (metadata 'pairs': a BLiMP-style JSONL file)")
        rows += [{"sentence_good": p.good, "sentence_bad": p.bad} for p in load_pairs(path)]
    return datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})
