"""Unsupervised semantic textual similarity: cosine of pooled sentence embeddings against the gold scores,
Spearman and Pearson x 100 (the T-TA paper reports STS-B Pearson; SentEval-style work reports Spearman).
Next to every model's result, the bag-of-words and TF-IDF cosine baselines (maskplay.tasks.eval.baselines)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .baselines import Idf, pair_sentences
from .common import pearson, spearman
from .files import portable, read_text, semeval_pair

STSB = ("stsbenchmark", "sts-dev.csv")
SICK = ("sick", "SICK_train_trial.txt")


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    gold: float


def _rows(path: Path, delimiter: str = "\t") -> list[list[str]]:
    # QUOTE_NONE for tabs: STS-B sentences contain unbalanced double quotes, which the default dialect would merge
    # across lines. A comma-separated file needs quoting (its sentences contain commas).
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    return list(csv.reader(io.StringIO(read_text(path), newline=""), delimiter=delimiter, quoting=quoting))


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


def load_sts_header(path: str | Path, limit: int | None = None) -> list[Pair]:
    """STS-B as GLUE (and most re-exports) ship it: a header row naming sentence1, sentence2 and score (or
    label), tab- or comma-separated; other columns are ignored."""
    path = Path(path)
    first = next((line for line in read_text(path).splitlines() if line.strip()), "")
    delimiter = "\t" if "\t" in first else ","
    rows = [r for r in _rows(path, delimiter)]
    if not rows:
        raise ValueError(f"{path}: empty file")
    header = [c.strip() for c in rows[0]]
    score = next((c for c in ("score", "label") if c in header), None)
    missing = [c for c in ("sentence1", "sentence2") if c not in header] + ([] if score else ["score"])
    if missing:
        raise ValueError(f"{path}:1: header lacks column(s) {missing}; found {header}")
    ia, ib, ig = header.index("sentence1"), header.index("sentence2"), header.index(score)
    if "split" in header:  # sentence-transformers' stsbenchmark.tsv.gz holds train, dev and test in one file
        k = header.index("split")
        splits = sorted({r[k] for r in rows[1:] if len(r) == len(header)})
        if len(splits) > 1:
            raise ValueError(f"{path}:1: a 'split' column with {', '.join(splits)}: the splits would be pooled; "
                             "give a file with one split")
    pairs = []
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise ValueError(f"{path}:{number}: {len(row)} columns, the header has {len(header)}")
        gold = _gold(row[ig], f"{path}:{number}: {score}")
        pairs.append(Pair(row[ia], row[ib], gold))
        if limit is not None and len(pairs) >= limit:
            break
    return pairs


def load_semeval(path: str | Path, limit: int | None = None) -> tuple[list[Pair], int]:
    """SemEval STS 2012-2016: STS.input.NAME.txt (sentence1 TAB sentence2 [TAB sources], one pair a line) and
    STS.gs.NAME.txt beside it (one gold score a line, same order). A pair whose gold line is empty has no
    gold score and is skipped, as the official scorer does; (pairs, number skipped)."""
    source, gold_path = semeval_pair(Path(path))
    inputs, golds = read_text(source).split("\n"), read_text(gold_path).split("\n")
    for text in (inputs, golds):  # the final line end is not a line
        if text and text[-1] == "":
            text.pop()
    if len(inputs) != len(golds):
        raise ValueError(f"{gold_path}:{min(len(inputs), len(golds)) + 1}: {len(golds)} gold lines for "
                         f"{len(inputs)} input lines in {source.name}")
    pairs, skipped = [], 0
    for number, (line, gold_line) in enumerate(zip(inputs, golds, strict=True), start=1):
        line, gold_line = line.removesuffix("\r"), gold_line.strip()
        if not gold_line:
            skipped += 1
            continue
        gold = _gold(gold_line, f"{gold_path}:{number}: gold score")
        cells = line.split("\t")
        if len(cells) < 2 or not cells[0].strip() or not cells[1].strip():
            raise ValueError(f"{source}:{number}: expected two tab-separated sentences, found {len(cells)} column(s)")
        pairs.append(Pair(cells[0], cells[1], gold))
        if limit is not None and len(pairs) >= limit:
            break
    return pairs, skipped


def load_sts_file(path: str | Path, fmt: str, limit: int | None = None) -> tuple[list[Pair], int]:
    """(pairs, pairs skipped for an empty gold score) of one file in format `fmt` (see files.FORMATS)."""
    if fmt == "semeval":
        return load_semeval(path, limit)
    loader = {"stsb": load_stsb, "stsb-header": load_sts_header, "sick": load_sick}[fmt]
    return loader(path, limit), 0


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


# ---- the model-free baselines (maskplay.tasks.eval.baselines) next to every model's result ----------------------------

STSB_TRAIN = "sts-train.csv"  # beside sts-dev.csv in the STS-B layout: the IDF source of the STS-B baselines


def sick_split(path: str | Path, split: str = "TRAIN") -> list[Pair] | None:
    """The pairs of one SemEval_set split (TRAIN, TRIAL) of a SICK file; None when it has no such column."""
    path = Path(path)
    rows = _rows(path)
    if not rows or "SemEval_set" not in rows[0]:
        return None
    header = rows[0]
    k, ia, ib = header.index("SemEval_set"), header.index("sentence_A"), header.index("sentence_B")
    return [Pair(r[ia], r[ib], 0.0) for r in rows[1:] if len(r) == len(header) and r[k].strip() == split]


def baseline_idf(pairs: list[Pair], fmt: str, path: str | Path | None = None,
                 idf_from: str | Path | None = None) -> Idf:
    """The IDF of the TF-IDF baseline of one evaluated set, from the best source at hand:
    `idf_from` (an STS file of any format: its sentences) when given; for an STS-B file (fmt "stsb") the
    STS-B train sentences beside it (sts-train.csv); for a SICK file with a SemEval_set column, its TRAIN rows;
    else the evaluated sentences themselves (no gold score is read, but the IDF has seen the test sentences:
    the source says so)."""
    from .files import detect

    if idf_from is not None:
        source = Path(idf_from)
        given, _ = load_sts_file(source, detect("sts", source))
        return Idf.fit(pair_sentences(given), f"{portable(source)} (--idf-from)")
    if path is not None:
        path = Path(path)
        train = path.with_name(STSB_TRAIN)
        if fmt == "stsb" and train.is_file() and train.resolve() != path.resolve():
            return Idf.fit(pair_sentences(load_stsb(train)), f"STS-B train sentences ({portable(train)})")
        if fmt == "sick":
            rows = sick_split(path)
            if rows:
                return Idf.fit(pair_sentences(rows), f"SICK TRAIN rows of {portable(path)} (its TRIAL rows not)")
    return Idf.fit(pair_sentences(pairs), "the evaluated sentences themselves (no other IDF source)")

