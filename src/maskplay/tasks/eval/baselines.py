"""Model-free STS baselines, printed next to every model's STS result so that nobody takes a number below them
for progress:

- bag of words: the cosine of the two sentences' word-count vectors;
- TF-IDF: the cosine of the count vectors weighted by inverse document frequency.

Words are the lower-cased `\\w+` tokens of a sentence. The IDF is fitted on a list of sentences, each one a
document (every sentence of every pair, repeats counted), with scikit-learn's default formula
(TfidfVectorizer(smooth_idf=True)): idf(w) = ln((1 + n) / (1 + df(w))) + 1. A word the fitting sentences never
saw gets df = 0, so the largest weight (scikit-learn's TfidfVectorizer would drop it instead: on STS-B dev that
gives 71.2 rather than 74.7, see docs/results/README.md). A sentence without words has the zero vector, whose cosine
with anything is 0."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

WORD = re.compile(r"\w+")


class _Pair(Protocol):
    a: str
    b: str
    gold: float


def words(text: str) -> list[str]:
    """The lower-cased `\\w+` tokens of text."""
    return WORD.findall(text.lower())


@dataclass(frozen=True)
class Idf:
    """Inverse document frequencies fitted on `documents` sentences; `source` says which (for the output)."""
    documents: int
    df: Mapping[str, int] = field(repr=False)
    source: str = ""

    @classmethod
    def fit(cls, sentences: Iterable[str], source: str = "") -> Idf:
        df: Counter[str] = Counter()
        n = 0
        for sentence in sentences:
            n += 1
            df.update(set(words(sentence)))
        if n == 0:
            raise ValueError(f"no sentences to fit the IDF on{f' ({source})' if source else ''}")
        return cls(n, dict(df), source)

    def weight(self, word: str) -> float:
        return math.log((1 + self.documents) / (1 + self.df.get(word, 0))) + 1.0


def bag(text: str, idf: Idf | None = None) -> dict[str, float]:
    """The sentence as a sparse vector: word counts, times the IDF weight when `idf` is given."""
    counts = Counter(words(text))
    if idf is None:
        return {w: float(c) for w, c in counts.items()}
    return {w: c * idf.weight(w) for w, c in counts.items()}


def sparse_cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    dot = sum(v * b.get(w, 0.0) for w, v in a.items())
    norms = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norms if norms > 0 else 0.0


def similarities(pairs: Sequence[_Pair], idf: Idf | None = None) -> np.ndarray:
    """The baseline's cosine for each pair: bag of words (idf None) or TF-IDF."""
    return np.array([sparse_cosine(bag(p.a, idf), bag(p.b, idf)) for p in pairs], dtype=np.float64)


def _correlations(sims: np.ndarray, gold: np.ndarray) -> dict[str, float | None]:
    from .common import pearson, spearman

    # a constant series (to rounding: identical bags give cosines 1 +- 1e-16) has no correlation; a baseline never
    # stops an evaluation, so that is None, not an error
    if len(sims) < 2 or np.ptp(sims) < 1e-12 or np.ptp(gold) == 0:
        return {"spearman": None, "pearson": None}
    return {"spearman": 100 * spearman(sims, gold), "pearson": 100 * pearson(sims, gold)}


def evaluate_baselines(pairs: Sequence[_Pair], idf: Idf) -> dict[str, dict[str, Any]]:
    """Spearman and Pearson x 100 of the bag-of-words and the TF-IDF cosines against the gold scores (None where
    a correlation is undefined), with where the IDF came from."""
    gold = np.array([p.gold for p in pairs], dtype=np.float64)
    return {"bow": _correlations(similarities(pairs), gold),
            "tfidf": {**_correlations(similarities(pairs, idf), gold), "idf_from": idf.source,
                      "idf_documents": idf.documents}}


def pair_sentences(pairs: Iterable[_Pair]) -> list[str]:
    """Every sentence of every pair, in order (the documents an IDF is fitted on)."""
    return [s for p in pairs for s in (p.a, p.b)]
