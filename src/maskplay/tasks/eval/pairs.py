"""Minimal pairs (BLiMP format): a JSONL file per paradigm, each line with sentence_good and sentence_bad.
A pair is right when the model gives the good sentence the strictly higher score (ties count as wrong).
BLiMP compares total log-probabilities; --normalize mean compares per-piece means instead."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import base_name, expand, lines


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str


def pair_files(paths: list[str | Path]) -> list[Path]:
    """Files as given; a directory stands for the *.jsonl and *.jsonl.gz files in it (sorted)."""
    files = expand("pairs", paths)
    stems = [base_name(f) for f in files]
    dupes = sorted({s for s in stems if stems.count(s) > 1})
    if dupes:
        raise ValueError(f"several files named {dupes}: results are reported per file name")
    return files


def load_pairs(path: str | Path, limit: int | None = None) -> list[MinimalPair]:
    """BLiMP JSONL (plain or gzip): one object a line with string fields sentence_good and sentence_bad (other
    fields are ignored); blank lines are allowed, anything else that is not such an object is an error."""
    path, pairs = Path(path), []
    for number, line in enumerate(lines(path), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: invalid JSON: {err.msg}") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object")
        missing = [k for k in ("sentence_good", "sentence_bad") if not isinstance(d.get(k), str)]
        if missing:
            raise ValueError(f"{path}:{number}: missing or non-string field(s) {missing}")
        for key in ("sentence_good", "sentence_bad"):
            if not d[key].strip():
                raise ValueError(f"{path}:{number}: {key} is empty")
        pairs.append(MinimalPair(d["sentence_good"], d["sentence_bad"]))
        if limit is not None and len(pairs) >= limit:
            break
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def evaluate_pairs(files: dict[str, list[MinimalPair]], score: Callable[[list[str]], list[float]]) -> dict[str, Any]:
    """Accuracy per file, overall (all pairs pooled) and the macro mean over files (BLiMP's headline number)."""
    texts = sorted({s for pairs in files.values() for p in pairs for s in (p.good, p.bad)})
    values = dict(zip(texts, score(texts), strict=True))
    per_file, right_total, n_total = {}, 0, 0
    for name, pairs in files.items():
        right = sum(values[p.good] > values[p.bad] for p in pairs)
        per_file[name] = {"accuracy": 100.0 * right / len(pairs), "pairs": len(pairs)}
        right_total += right
        n_total += len(pairs)
    return {"files": per_file, "accuracy": 100.0 * right_total / n_total, "pairs": n_total,
            "macro_accuracy": sum(v["accuracy"] for v in per_file.values()) / len(per_file)}
