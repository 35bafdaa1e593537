"""N-best rescoring of LibriSpeech ASR lists (the T-TA paper's reranking task, on 30-best lists of a stronger
system, see shared/data/MANIFEST.md).

total(hyp) = first-pass score + w * LM log-probability (+ b * number of words). The weights are tuned on one
split by grid search (lowest WER) and applied to the other, in both directions. Hypotheses are uppercase;
the LM sees them lowercased. An empty hypothesis has nothing to score under the no-[SOS]/[EOS] rule, so it gets
the lowest LM score of its own list."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from .files import detect, lines, read_text
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
    score: np.ndarray  # first-pass score per hypothesis (ESPnet's final score in the shared lists)
    espnet_lm: np.ndarray  # the first pass's own LM score per hypothesis; nan where the list has none
    where: str = ""  # file:line, for errors


def load_nbest(path: str | Path, limit: int | None = None, fmt: str | None = None) -> list[Utterance]:
    """N-best lists in the shared layout (`fmt` "jsonl", one utterance a line: utt_id, ref, hyps with text and
    score, and optionally rank and lm) or in mlm-scoring's (`fmt` "mlm-scoring", one JSON object
    {utt_id: {"ref", "hyp_1": {"text", "score"}, ...}}); plain or gzip; the format is told from the content
    when not given."""
    path = Path(path)
    if fmt is None:
        fmt = detect("nbest", path)
    utts = _load_mlm_scoring(path) if fmt == "mlm-scoring" else _load_jsonl(path, limit)
    for utt in utts:
        if not utt.texts:
            raise ValueError(f"{utt.where}: utterance {utt.utt_id} has no hypotheses")
        if not (np.isfinite(utt.score).all() and (np.isfinite(utt.espnet_lm) | np.isnan(utt.espnet_lm)).all()
                and not np.isnan(utt.score).any()):
            raise ValueError(f"{utt.where}: utterance {utt.utt_id} has a score or lm value that is not a finite "
                             "number")
    return utts[:limit] if limit is not None else utts


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _load_jsonl(path: Path, limit: int | None) -> list[Utterance]:
    utts = []
    for number, line in enumerate(lines(path), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            hyps = d["hyps"]
            if any("rank" in h for h in hyps):
                hyps = sorted(hyps, key=lambda h: h["rank"])
            utt = Utterance(str(d["utt_id"]), _text(d["ref"]), [_text(h["text"]) for h in hyps],
                            np.array([_number(h["score"]) for h in hyps], dtype=np.float64),
                            np.array([_number(h["lm"]) if "lm" in h else np.nan for h in hyps], dtype=np.float64),
                            f"{path}:{number}")
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{path}:{number}: not an N-best record ({type(err).__name__}: {err})") from None
        utts.append(utt)
        if limit is not None and len(utts) >= limit:
            break
    return utts


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _load_mlm_scoring(path: Path) -> list[Utterance]:
    """mlm-scoring (Shin et al.'s ESPnet lists): utterances in sorted id order, hyp_1 .. hyp_N in that order."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}:1: expected one JSON object {{utterance id: {{ref, hyp_1, ...}}}} (mlm-scoring)")
    utts = []
    for utt_id, entry in sorted(data.items()):
        where = f"{path}:{text[:max(text.find(json.dumps(utt_id)), 0)].count(chr(10)) + 1}"
        try:
            if not isinstance(entry, dict):
                raise TypeError("not an object")
            if "ref" not in entry:
                raise KeyError("ref (an LM score file of mlm-scoring has none: give the file with the references)")
            ranks = sorted(int(k.removeprefix("hyp_")) for k in entry if k.startswith("hyp_"))
            if ranks != list(range(1, len(ranks) + 1)):
                raise KeyError(f"hyp_1 .. hyp_{len(ranks)} (found {len(ranks)} hyp_ keys with gaps)")
            hyps = [entry[f"hyp_{k}"] for k in ranks]
            utts.append(Utterance(utt_id, _text(entry["ref"]).strip(), [_text(h["text"]).strip() for h in hyps],
                                  np.array([_number(h["score"]) for h in hyps], dtype=np.float64),
                                  np.full(len(hyps), np.nan), where))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: utterance {utt_id} is not an mlm-scoring N-best entry "
                             f"({type(err).__name__}: {err})") from None
    return utts


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
        if first_pass is FirstPass.AM and np.isnan(u.espnet_lm).any():
            raise ValueError(f"{u.where or u.utt_id}: --first-pass am needs the first pass's own LM score (\"lm\") "
                             "of every hypothesis, and this list has none")
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


def pooled(parts: Sequence[Prepared]) -> Prepared:
    """Several splits as one (for tuning on all the other splits)."""
    return Prepared([a for p in parts for a in p.first], [a for p in parts for a in p.lm],
                    [a for p in parts for a in p.length], [a for p in parts for a in p.errors],
                    sum(p.ref_words for p in parts))


def evaluate_nbest(splits: dict[str, list[Utterance]], lm: Callable[[list[str]], list[float]],
                   first_pass: FirstPass = FirstPass.SCORE, weights: Sequence[float] = DEFAULT_WEIGHTS,
                   bonuses: Sequence[float] = (0.0,)) -> dict[str, Any]:
    """Score every distinct non-empty lowercased hypothesis once with `lm` (sentence log-probabilities), then
    for each split report 1-best, oracle, and reranked WER with (w, b) tuned on the other splits pooled (with
    two splits, each on the other; a single split is tuned on itself, marked in_sample)."""
    if not splits:
        raise ValueError("no N-best lists to evaluate")
    check_grids(weights, bonuses)
    texts = sorted({t.lower() for utts in splits.values() for u in utts for t in u.texts if t.strip()})
    lm_scores = dict(zip(texts, lm(texts), strict=True))
    broken = [t for t, v in lm_scores.items() if not math.isfinite(v)]
    if broken:
        raise ValueError(f"the LM gave a non-finite score ({lm_scores[broken[0]]}) to {broken[0]!r} and "
                         f"{len(broken) - 1} other hypotheses; is the model damaged?")
    prepared = {name: prepare(utts, lm_scores, first_pass) for name, utts in splits.items()}
    for name, p in prepared.items():
        if p.ref_words == 0:
            raise ValueError(f"{name}: the references have no words, so WER is undefined")
    tuned = {name: tune(p, weights, bonuses) for name, p in prepared.items()}
    out: dict[str, Any] = {}
    for name, p in prepared.items():
        others = [n for n in prepared if n != name]
        if not others:
            w, b, tuned_on = tuned[name][0], tuned[name][1], name
        elif len(others) == 1:
            (tuned_on,) = others
            w, b = tuned[tuned_on][:2]
        else:
            w, b, _ = tune(pooled([prepared[n] for n in others]), weights, bonuses)
            tuned_on = "+".join(others)
        out[name] = {
            "utterances": len(p.errors), "ref_words": p.ref_words, "hypotheses_scored": sum(len(e) for e in p.errors),
            "one_best_wer": p.one_best_wer(), "oracle_wer": p.oracle_wer(),
            "first_pass_only_wer": p.wer(0.0, 0.0),
            "reranked_wer": p.wer(w, b), "weight": w, "bonus": b, "tuned_on": tuned_on, "in_sample": not others,
            "self_tuned_wer": tuned[name][2], "self_tuned_weight": tuned[name][0], "self_tuned_bonus": tuned[name][1],
        }
    return out
