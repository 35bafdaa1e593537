"""N-best rescoring of LibriSpeech ASR lists (the T-TA paper's reranking task, on 30-best lists of a stronger
system, see shared/data/MANIFEST.md).

total(hyp) = first-pass score + w * LM log-probability (+ b * number of words). The weights are tuned on one
split by grid search (lowest WER) and applied to the other, in both directions. Hypotheses are uppercase;
the LM sees them lowercased. An empty hypothesis has nothing to score under the no-[SOS]/[EOS] rule, so it gets
the lowest LM score of its own list."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from .wer import edit_distance

SPLITS = ("dev_clean", "dev_other")
FOLDER = "librispeech-nbest-espnet-hubert30"
ESPNET_LM_WEIGHT = 0.6  # score = 0.6 * decoder + 0.4 * ctc + 0.6 * lm (checked on these lists)
DEFAULT_WEIGHTS = tuple(round(0.05 * k, 2) for k in range(41))  # 0 .. 2


class FirstPass(str, Enum):
    SCORE = "score"  # ESPnet's final score, its own Transformer LM (shallow fusion) included
    AM = "am"  # that score minus its LM term: our LM replaces theirs instead of adding to it


@dataclass(frozen=True)
class Utterance:
    utt_id: str
    ref: str
    texts: list[str]
    score: np.ndarray  # ESPnet final score per hypothesis
    espnet_lm: np.ndarray


def load_nbest(path: str | Path, limit: int | None = None) -> list[Utterance]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    utts = []
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(_lines(f, path), start=1):
            try:
                d = json.loads(line)
                hyps = sorted(d["hyps"], key=lambda h: h["rank"])
                utt = Utterance(d["utt_id"], d["ref"], [h["text"] for h in hyps],
                                np.array([h["score"] for h in hyps], dtype=np.float64),
                                np.array([h["lm"] for h in hyps], dtype=np.float64))
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not an N-best record ({type(err).__name__}: {err})") from None
            if not utt.texts:
                raise ValueError(f"{path}:{number}: utterance {utt.utt_id} has no hypotheses")
            if not (np.isfinite(utt.score).all() and np.isfinite(utt.espnet_lm).all()):
                raise ValueError(f"{path}:{number}: utterance {utt.utt_id} has a score or lm value that is not a "
                                 "finite number")
            utts.append(utt)
            if limit is not None and len(utts) >= limit:
                break
    return utts


def _lines(f: Any, path: Path) -> Iterator[str]:
    """The file's lines; a .gz that is not gzip, a truncated one or bytes that are not UTF-8 are errors naming it."""
    number = 0
    try:
        for line in f:
            number += 1
            yield line
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ValueError(f"{path}: not a readable gzip file ({type(err).__name__}: {err})") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}:{number + 1}: invalid UTF-8 ({err.reason})") from None


@dataclass
class Prepared:
    """One split as arrays: per utterance, the first-pass score, LM score, length and errors of every hyp."""

    first: list[np.ndarray]
    lm: list[np.ndarray]
    length: list[np.ndarray]
    errors: list[np.ndarray]
    ref_words: int

    def wer(self, weight: float, bonus: float) -> float:
        errors = sum(int(e[np.argmax(f + weight * m + bonus * n)])
                     for f, m, n, e in zip(self.first, self.lm, self.length, self.errors, strict=True))
        return 100.0 * errors / self.ref_words

    def one_best_wer(self) -> float:
        return 100.0 * sum(int(e[0]) for e in self.errors) / self.ref_words

    def oracle_wer(self) -> float:
        return 100.0 * sum(int(e.min()) for e in self.errors) / self.ref_words


def prepare(utts: list[Utterance], lm_scores: dict[str, float], first_pass: FirstPass) -> Prepared:
    first, lm, length, errors = [], [], [], []
    for u in utts:
        ref = u.ref.split()
        scores = np.array([lm_scores.get(t.lower(), np.nan) for t in u.texts])
        if np.isnan(scores).all():
            scores[:] = 0.0
        scores[np.isnan(scores)] = np.nanmin(scores)  # empty hypotheses: the worst LM score of the list
        f = u.score if first_pass is FirstPass.SCORE else u.score - ESPNET_LM_WEIGHT * u.espnet_lm
        first.append(f)
        lm.append(scores)
        length.append(np.array([len(t.split()) for t in u.texts], dtype=np.float64))
        errors.append(np.array([edit_distance(ref, t.split()) for t in u.texts]))
    return Prepared(first, lm, length, errors, sum(len(u.ref.split()) for u in utts))


def tune(split: Prepared, weights: Sequence[float], bonuses: Sequence[float]) -> tuple[float, float, float]:
    """(weight, bonus, WER) with the lowest WER; ties go to the smallest weight, then the smallest bonus."""
    best = None
    for w in sorted(weights):
        for b in sorted(bonuses):
            value = split.wer(w, b)
            if best is None or value < best[2] - 1e-12:
                best = (w, b, value)
    assert best is not None
    return best


def check_grids(weights: Sequence[float], bonuses: Sequence[float]) -> None:
    """LM weights must be finite and >= 0 (a negative weight rewards what the LM finds unlikely; nan would be
    reported as the tuned weight); length bonuses finite (either sign is meaningful)."""
    if not weights or not bonuses:
        raise ValueError("the weight and bonus grids must not be empty")
    bad = [w for w in weights if not (math.isfinite(w) and w >= 0)]
    if bad:
        raise ValueError(f"--weights: every LM weight must be a finite number >= 0, got {bad[0]}")
    bad = [b for b in bonuses if not math.isfinite(b)]
    if bad:
        raise ValueError(f"--bonuses: every length bonus must be a finite number, got {bad[0]}")


def evaluate_nbest(splits: dict[str, list[Utterance]], lm: Callable[[list[str]], list[float]],
                   first_pass: FirstPass = FirstPass.SCORE, weights: Sequence[float] = DEFAULT_WEIGHTS,
                   bonuses: Sequence[float] = (0.0,)) -> dict[str, Any]:
    """Score every distinct non-empty lowercased hypothesis once with `lm` (sentence log-probabilities), then
    for each split report 1-best, oracle, and reranked WER with (w, b) tuned on the other split."""
    if len(splits) != 2:
        raise ValueError(f"cross-tuning needs exactly two splits, got {sorted(splits)}")
    check_grids(weights, bonuses)
    texts = sorted({t.lower() for utts in splits.values() for u in utts for t in u.texts if t.strip()})
    lm_scores = dict(zip(texts, lm(texts), strict=True))
    broken = [t for t, v in lm_scores.items() if not math.isfinite(v)]
    if broken:
        raise ValueError(f"the LM gave a non-finite score ({lm_scores[broken[0]]}) to {broken[0]!r} and "
                         f"{len(broken) - 1} other hypotheses; is the model damaged?")
    prepared = {name: prepare(utts, lm_scores, first_pass) for name, utts in splits.items()}
    tuned = {name: tune(p, weights, bonuses) for name, p in prepared.items()}
    out: dict[str, Any] = {}
    for name, p in prepared.items():
        other = next(n for n in prepared if n != name)
        w, b, _ = tuned[other]
        out[name] = {
            "utterances": len(p.errors), "ref_words": p.ref_words, "hypotheses_scored": sum(len(e) for e in p.errors),
            "one_best_wer": p.one_best_wer(), "oracle_wer": p.oracle_wer(),
            "first_pass_only_wer": p.wer(0.0, 0.0),
            "reranked_wer": p.wer(w, b), "weight": w, "bonus": b, "tuned_on": other,
            "self_tuned_wer": tuned[name][2], "self_tuned_weight": tuned[name][0], "self_tuned_bonus": tuned[name][1],
        }
    return out
