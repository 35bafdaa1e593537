"""Real-word spelling error detection (Zesch 2012 data: a real word used in place of another, "the goals of
England" for "gaols").

Each item gives a sentence with one wrong word; the corrected sentence is built by putting the correct word in
its place, and both are evaluated, so that flags in correct text count as false alarms. The model ranks the
words of a sentence by surprisal (a word's surprisal = the sum over its pieces; words are the tokenizer's
words, and words without a letter or digit are never flagged) and flags the most surprising one when its
surprisal reaches a threshold. Reported per file:
- top1: how often the wrong word is the most surprising word of its sentence;
- pair accuracy: how often the corrected sentence scores higher than the wrong one;
- precision / recall / F1 of detection, always flagging (threshold -inf) and with a threshold tuned on one
  file (highest F1) and applied to the others."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..score.scorer import SentenceScore
from .common import candidate_thresholds
from .files import read_text

FILES = ("en_natural_train", "en_artificial_noun", "en_artificial_token")
FOLDER = "rwse-zesch2012"


@dataclass(frozen=True)
class Item:
    wrong_sentence: str
    correct_sentence: str
    offset: int  # character offset of the wrong (and of the correct) word
    wrong: str
    correct: str


def load_rwse(path: str | Path, limit: int | None = None) -> list[Item]:
    """Blank-line separated blocks of 6 lines: id, revision id, wrong word, correct word, character offset of
    the wrong word, sentence. A few offsets are off (by one, in the natural set): then the occurrence of the
    wrong word (as a whole word) nearest to the given offset is used."""
    path = Path(path)
    blocks: list[tuple[int, list[str]]] = []  # (line number of the block's first line, its lines)
    current: list[str] = []
    for number, raw in enumerate(read_text(path).split("\n"), start=1):
        line = raw.removesuffix("\r")
        if line.strip():
            if not current:
                blocks.append((number, current))
            current.append(line)
        else:
            current = []
    items = []
    for first_line, lines in blocks:
        if len(lines) != 6:
            raise ValueError(f"{path}:{first_line}: a block has {len(lines)} lines, expected 6 "
                             "(id, revision, wrong word, correct word, offset, sentence)")
        _, _, wrong, correct, offset_text, sentence = lines
        try:
            offset = int(offset_text)
        except ValueError:
            raise ValueError(f"{path}:{first_line + 4}: offset {offset_text!r} is not an integer") from None
        if sentence[offset:offset + len(wrong)] != wrong:
            found = [m.start() for m in re.finditer(rf"(?<!\w){re.escape(wrong)}(?!\w)", sentence)]
            if not found:
                raise ValueError(f"{path}:{first_line + 5}: the wrong word {wrong!r} does not occur in the sentence")
            offset = min(found, key=lambda s: abs(s - offset))
        corrected = sentence[:offset] + correct + sentence[offset + len(wrong):]
        items.append(Item(sentence, corrected, offset, wrong, correct))
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{path}: no items")
    return items


@dataclass(frozen=True)
class Judged:
    """The most surprising flaggable word of one sentence: its surprisal and whether it is the target word."""

    surprisal: float
    is_target: bool
    has_error: bool


def judge(score: SentenceScore, start: int, end: int, has_error: bool) -> Judged:
    words = [w for w in score.words() if any(c.isalnum() for c in w.text)]
    if not words:
        return Judged(-np.inf, False, has_error)
    top = max(words, key=lambda w: w.surprisal)
    overlaps = top.start < end and start < top.end
    return Judged(top.surprisal, overlaps and has_error, has_error)


def detection(judged: list[Judged], threshold: float) -> dict[str, float]:
    flagged = [j for j in judged if j.surprisal >= threshold]
    tp = sum(j.is_target for j in flagged)
    errors = sum(j.has_error for j in judged)
    precision = tp / len(flagged) if flagged else 0.0
    recall = tp / errors if errors else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1, "flags": len(flagged)}


def best_threshold(judged: list[Judged]) -> float:
    best_t, best_f1 = -np.inf, -1.0
    for t in candidate_thresholds(np.array([j.surprisal for j in judged])):
        f1 = detection(judged, t)["f1"]
        if f1 > best_f1 + 1e-12:
            best_t, best_f1 = float(t), f1
    return best_t


def evaluate_spelling(files: dict[str, list[Item]], score: Callable[[list[str]], list[SentenceScore]],
                      tune_on: str) -> dict[str, Any]:
    if tune_on not in files:
        raise ValueError(f"tune_on={tune_on!r} is not among the files {sorted(files)}")
    texts = sorted({s for items in files.values() for it in items for s in (it.wrong_sentence, it.correct_sentence)})
    scores = dict(zip(texts, score(texts), strict=True))
    judged: dict[str, list[Judged]] = {}
    out: dict[str, Any] = {"tuned_on": tune_on, "files": {}}
    for name, items in files.items():
        rows = []
        for it in items:
            rows.append(judge(scores[it.wrong_sentence], it.offset, it.offset + len(it.wrong), True))
            rows.append(judge(scores[it.correct_sentence], it.offset, it.offset + len(it.correct), False))
        judged[name] = rows
        wrong_rows = rows[0::2]
        out["files"][name] = {
            "items": len(items),
            "top1": 100 * sum(j.is_target for j in wrong_rows) / len(items),
            "pair_accuracy": 100 * sum(scores[it.correct_sentence].log_prob > scores[it.wrong_sentence].log_prob
                                       for it in items) / len(items),
            "always_flag": detection(rows, -np.inf),
        }
    threshold = best_threshold(judged[tune_on])
    out["threshold"] = threshold
    for name, rows in judged.items():
        out["files"][name]["tuned"] = {**detection(rows, threshold), "in_sample": name == tune_on}
    return out
