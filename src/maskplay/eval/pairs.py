"""Minimal pairs (BLiMP format): a JSONL file per paradigm, each line with sentence_good and sentence_bad.
A pair is right when the model gives the good sentence the strictly higher score (ties count as wrong).
BLiMP compares total log-probabilities; --normalize mean compares per-piece means instead."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str


def pair_files(paths: list[str | Path]) -> list[Path]:
    """Files as given; a directory stands for the *.jsonl files in it (sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise FileNotFoundError(f"{p}: no *.jsonl files in this directory")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p} not found")
    stems = [f.stem for f in files]
    dupes = sorted({s for s in stems if stems.count(s) > 1})
    if dupes:
        raise ValueError(f"several files named {dupes}: results are reported per file name")
    return files


def load_pairs(path: str | Path, limit: int | None = None) -> list[MinimalPair]:
    path, pairs = Path(path), []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
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
