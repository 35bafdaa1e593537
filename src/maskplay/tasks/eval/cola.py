"""Unsupervised acceptability on CoLA: a sentence is judged acceptable when its length-normalised score (mean
log-probability per piece) reaches a threshold. The threshold is tuned on a sample of the training set
(highest Matthews correlation) and applied to the in-domain and out-of-domain dev sets."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import candidate_thresholds, matthews
from .files import read_text

FOLDER = ("cola", "raw")
TRAIN = "in_domain_train.tsv"
DEVS = ("in_domain_dev.tsv", "out_of_domain_dev.tsv")


@dataclass(frozen=True)
class Judgement:
    sentence: str
    acceptable: bool


def load_cola(path: str | Path) -> list[Judgement]:
    """Tab-separated: source, label (1 = acceptable), original mark, sentence; no header."""
    path, rows = Path(path), []
    text = io.StringIO(read_text(path), newline="")
    for number, row in enumerate(csv.reader(text, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
        if not row:  # a blank line
            continue
        if len(row) != 4:
            raise ValueError(f"{path}:{number}: expected 4 tab-separated columns "
                             f"(source, label, mark, sentence), found {len(row)}")
        if row[1] not in ("0", "1"):
            raise ValueError(f"{path}:{number}: label {row[1]!r} is not 0 or 1")
        if not row[3].strip():
            raise ValueError(f"{path}:{number}: empty sentence")
        rows.append(Judgement(row[3], row[1] == "1"))
    if not rows:
        raise ValueError(f"{path}: no sentences")
    return rows


def sample(rows: list[Judgement], n: int | None, seed: int = 0) -> list[Judgement]:
    """A fixed random sample (the training file is ordered by source, so its head is not representative)."""
    if n is None or n >= len(rows):
        return rows
    return random.Random(seed).sample(rows, n)


def tune_threshold(scores: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(threshold, MCC) maximising MCC of `score >= threshold`; ties go to the lower threshold."""
    best = (-np.inf, -2.0)
    for t in candidate_thresholds(scores):
        value = matthews(scores >= t, gold)
        if value > best[1] + 1e-12:
            best = (float(t), value)
    return best


def evaluate_cola(train: list[Judgement], devs: dict[str, list[Judgement]],
                  score: Callable[[list[str]], list[float]]) -> dict[str, Any]:
    texts = sorted({j.sentence for rows in (train, *devs.values()) for j in rows})
    values = dict(zip(texts, score(texts), strict=True))

    def arrays(rows: list[Judgement]) -> tuple[np.ndarray, np.ndarray]:
        return np.array([values[j.sentence] for j in rows]), np.array([j.acceptable for j in rows])

    threshold, train_mcc = tune_threshold(*arrays(train))
    out: dict[str, Any] = {"threshold": threshold, "train": {"sentences": len(train), "mcc": 100 * train_mcc}}
    for name, rows in devs.items():
        s, g = arrays(rows)
        predicted = s >= threshold
        out[name] = {"sentences": len(rows), "mcc": 100 * matthews(predicted, g),
                     "accuracy": 100 * float((predicted == g).mean()), "acceptable_rate": 100 * float(g.mean())}
    return out
