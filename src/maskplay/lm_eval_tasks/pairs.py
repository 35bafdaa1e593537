"""The data of the maskplay_pairs task: datasets' `json` builder on local files (it reads .jsonl.gz as is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAMPLE = Path(__file__).resolve().parent / "sample_pairs.jsonl"


def load(pairs: str | list[str] | None = None, **metadata: Any) -> Any:
    """A DatasetDict with one split, train, of the pairs in `pairs` (a file or a list of files; default: the
    sample); a missing file is a FileNotFoundError naming it."""
    import datasets

    files = [SAMPLE] if pairs is None else [Path(p) for p in ([pairs] if isinstance(pairs, str) else pairs)]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"maskplay_pairs: {path} not found (metadata 'pairs': a BLiMP-style JSONL file)")
    return datasets.load_dataset("json", data_files={"train": [str(p) for p in files]})
