"""Unsupervised semantic textual similarity: cosine of pooled sentence embeddings against the gold scores,
Spearman and Pearson x 100 (the T-TA paper reports STS-B Pearson; SentEval-style work reports Spearman)."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .common import pearson, spearman

STSB = ("stsbenchmark", "sts-dev.csv")
SICK = ("sick", "SICK_train_trial.txt")


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    gold: float


def _rows(path: Path) -> list[list[str]]:
    # QUOTE_NONE: STS-B sentences contain unbalanced double quotes, which the default dialect would merge
    # across lines.
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def _gold(text: str, where: str) -> float:
    """A gold score: a finite number (float() also reads "nan" and "inf", which would make every correlation nan)."""
    try:
        gold = float(text)
    except ValueError:
        raise ValueError(f"{where} {text!r} is not a number") from None
    if not math.isfinite(gold):
        raise ValueError(f"{where} {text!r} is not a finite number")
    return gold


def load_stsb(path: str | Path, limit: int | None = None) -> list[Pair]:
    """STS-B csv: genre, file, year, id, score (0-5), sentence1, sentence2 [, source columns (some rows)]."""
    path, pairs = Path(path), []
    for number, row in enumerate(_rows(path), start=1):
        if len(row) < 7:
            raise ValueError(f"{path}:{number}: expected at least 7 tab-separated columns, found {len(row)}")
        gold = _gold(row[4], f"{path}:{number}: score column")
        pairs.append(Pair(row[5], row[6], gold))
        if limit is not None and len(pairs) >= limit:
            break
    return pairs


def load_sick(path: str | Path, limit: int | None = None) -> list[Pair]:
    """SICK with its header row; relatedness_score (1-5) is the gold similarity."""
    path = Path(path)
    rows = _rows(path)
    if not rows:
        raise ValueError(f"{path}: empty file")
    header = rows[0]
    needed = ("sentence_A", "sentence_B", "relatedness_score")
    missing = [c for c in needed if c not in header]
    if missing:
        raise ValueError(f"{path}:1: header lacks column(s) {missing}; found {header}")
    ia, ib, ig = (header.index(c) for c in needed)
    pairs = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{number}: {len(row)} columns, the header has {len(header)}")
        gold = _gold(row[ig], f"{path}:{number}: relatedness_score")
        pairs.append(Pair(row[ia], row[ib], gold))
        if limit is not None and len(pairs) >= limit:
            break
    return pairs


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return (a * b).sum(axis=1) / norms


def evaluate_sts(pairs: list[Pair], embed: Callable[[list[str]], np.ndarray]) -> dict[str, float]:
    """Embed each distinct sentence once; Spearman and Pearson (x 100) of cosine vs gold."""
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 pairs for a correlation, got {len(pairs)}")
    unique = sorted({p.a for p in pairs} | {p.b for p in pairs})
    index = {s: k for k, s in enumerate(unique)}
    vectors = embed(unique)
    sims = cosine(vectors[[index[p.a] for p in pairs]], vectors[[index[p.b] for p in pairs]])
    gold = np.array([p.gold for p in pairs], dtype=np.float64)
    if not np.isfinite(gold).all():
        k = int(np.flatnonzero(~np.isfinite(gold))[0])
        raise ValueError(f"pair {k}: gold score {gold[k]} is not a finite number")
    if not np.isfinite(sims).all():
        k = int(np.flatnonzero(~np.isfinite(sims))[0])
        raise ValueError(f"pair {k} ({pairs[k].a!r} / {pairs[k].b!r}): the cosine is {sims[k]}; the model gives "
                         "non-finite embeddings (damaged weights?)")
    # A correlation with a constant series is 0/0: say which side is constant instead of reporting nan.
    if np.ptp(gold) == 0:
        raise ValueError(f"the correlation is undefined: all {len(pairs)} gold scores are equal ({gold[0]:g})")
    if np.ptp(sims) == 0:
        raise ValueError(f"the correlation is undefined: all {len(pairs)} cosine similarities are equal "
                         f"({sims[0]:g}), so the model's embeddings do not tell the pairs apart")
    return {"spearman": 100 * spearman(sims, gold), "pearson": 100 * pearson(sims, gold), "pairs": len(pairs)}
