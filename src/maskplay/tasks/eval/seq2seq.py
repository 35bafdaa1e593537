"""Seq2seq evaluation: generate a target for every source of a JSONL file ({"source": ..., "target": ...} per
line, as `maskplay data titles` writes them) and compare with the reference: ROUGE-1/2/L F1 (Google's
`rouge-score` package, its default tokenisation: lower-cased alphanumeric tokens, no stemming) and exact match
of those token sequences. Also the trivial baseline: the source's first k words."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@dataclass(frozen=True)
class Pair:
    source: str
    target: str


def read_pairs(path: str | Path, limit: int | None = None) -> list[Pair]:
    """The pairs of a JSONL file; a malformed line is an error naming file:line."""
    from ...data.source import read_lines

    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be a positive integer, got {limit}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (a JSONL file of {{\"source\", \"target\"}} objects)")
    pairs = []
    # one reader for every text input: strict UTF-8, no NUL, lines on \n only, FIFOs, gzip
    for number, line in enumerate(read_lines(path, "--data")[1], start=1):
        if not line.strip():
            raise ValueError(f"{path}:{number}: blank line (one JSON object per line)")
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not valid JSON: {err.msg}") from None
        if not isinstance(row, dict) or not isinstance(row.get("source"), str) or \
                not isinstance(row.get("target"), str):
            raise ValueError(f"{path}:{number}: expected an object with string \"source\" and \"target\"")
        pairs.append(Pair(row["source"], row["target"]))
        if limit is not None and len(pairs) >= limit:
            break
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def scores(predictions: list[str], references: list[str]) -> dict[str, float]:
    """Mean ROUGE F1 x 100 and exact match % over the pairs."""
    from rouge_score import rouge_scorer, tokenize

    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=False)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    exact = 0
    for pred, ref in zip(predictions, references, strict=True):
        result = scorer.score(ref, pred)
        for name in ROUGE_TYPES:
            totals[name] += result[name].fmeasure
        exact += tokenize.tokenize(pred, None) == tokenize.tokenize(ref, None)
    n = len(references)
    out = {name: 100 * totals[name] / n for name in ROUGE_TYPES}
    out["exact_match"] = 100 * exact / n
    return out


def first_words(source: str, k: int) -> str:
    """The first k words of `source` (the trivial baseline `first-words:K`); k must be positive."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"first-words:K needs a positive integer K, got {k!r}")
    return " ".join(source.split()[:k])


def generate_targets(model: Any, tokenizer: Any, sources: list[str], max_source: int, **options: Any) -> list[str]:
    """Each source as `[SOS] source pieces (the first max_source) [SEP]`, the way `maskplay data titles` frames
    it for every family, then the model's continuation up to its end token, decoded."""
    if max_source < 1:
        raise ValueError(f"--max-source must be a positive integer, got {max_source}")
    cfg = model.config
    prompts = [[cfg.sos_token_id, *enc.ids[:max_source], cfg.separator_id]
               for enc in tokenizer.backend.encode_batch(sources, add_special_tokens=False)]
    out = model.generate(prompts, stop_ids=[cfg.eos_token_id, cfg.separator_id], **options)
    return [tokenizer.decode(g.token_ids) for g in out.generations]


def summary_line(name: str, result: dict[str, float]) -> str:
    def fmt(v: float) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"

    return (f"{name:<34} {fmt(result['rouge1']):>8} {fmt(result['rouge2']):>8} {fmt(result['rougeL']):>8} "
            f"{fmt(result['exact_match']):>8}")
