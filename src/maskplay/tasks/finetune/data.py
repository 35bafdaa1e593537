"""Fine-tuning's input files: the rows of a TSV/CSV with a header, CoLA's or STS-B's headerless tsv, or plain text
(one text, or a tab-separated pair, per line) as Examples, each naming its file:line; their labels as tensors."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .model import HeadConfig


@dataclass
class Example:
    text: str
    pair: str | None
    label: str | None
    where: str  # file:line


def is_number(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def read_examples(path: str | Path, text_column: str | None = None, text_pair_column: str | None = None,
                  label_column: str | None = None, need_labels: bool = True, need_pairs: bool | None = None,
                  ) -> list[Example]:
    """Rows of a TSV/CSV file with a header naming its columns; or CoLA's headerless tsv (source, label,
    original mark, sentence); or STS-B's headerless tsv/csv (genre, file, year, id, score, sentence1, sentence2);
    or, without labels (need_labels=False), plain text with one text per line (a tab separating a pair).
    A malformed row is a ValueError naming file:line."""
    from ...data.source import csv_field_limit, read_lines

    source, lines = read_lines(path)  # a file, a FIFO / <(...), gzip; strict UTF-8, no NUL; lines on \n only
    with csv_field_limit(max(map(len, lines), default=0)):
        return _read_rows(source, lines, text_column, text_pair_column, label_column, need_labels, need_pairs)


def _read_rows(path: str, lines: list[str], text_column: str | None, text_pair_column: str | None,
               label_column: str | None, need_labels: bool, need_pairs: bool | None) -> list[Example]:

    numbered = [(k + 1, line) for k, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise ValueError(f"{path}: no rows")
    first = numbered[0][1]
    tab = "\t" in first
    cells = first.split("\t") if tab else _csv_fields(first, f"{path}:{numbered[0][0]}")
    names = [c.strip() for c in cells]
    explicit = any(c is not None for c in (text_column, text_pair_column, label_column))
    header_guess = _header_columns(names, text_column, text_pair_column, label_column)
    examples: list[Example] = []
    if header_guess is not None:
        ti, pi, li = header_guess
        if need_pairs and pi is None:
            raise ValueError(f"{path}:{numbered[0][0]}: a pair task needs a second text column "
                             f"(--text-pair-column); the header has {names}")
        if need_labels and li is None:
            raise ValueError(f"{path}:{numbered[0][0]}: no label column (--label-column); the header has {names}")
        rows = numbered[1:]
        for number, line in rows:
            where = f"{path}:{number}"
            fields = line.split("\t") if tab else _csv_fields(line, where)
            if len(fields) < len(names):
                raise ValueError(f"{where}: {len(fields)} fields, the header has {len(names)} ({names})")
            examples.append(_example(fields[ti], fields[pi] if pi is not None else None,
                                     fields[li] if li is not None else None, where))
    elif explicit:
        raise ValueError(f"{path}:{numbered[0][0]}: the first line is not a header naming the columns given "
                         f"({', '.join(c for c in (text_column, text_pair_column, label_column) if c)}); it has {names}")
    elif tab and len(cells) == 4 and cells[1].strip() in ("0", "1") and cells[2].strip() in ("", "*", "?", "??", "#"):
        for number, line in numbered:  # CoLA: source, label, original mark, sentence
            fields = line.split("\t")
            where = f"{path}:{number}"
            if len(fields) != 4 or fields[1] not in ("0", "1"):
                raise ValueError(f"{where}: not a CoLA row (source, 0/1 label, mark, sentence): {line[:60]!r}")
            examples.append(_example(fields[3], None, fields[1], where))
    elif tab and len(cells) >= 7 and is_number(cells[4]):
        for number, line in numbered:  # STS-B: genre, file, year, id, score, sentence1, sentence2[, sources]
            fields = line.split("\t")
            where = f"{path}:{number}"
            if len(fields) < 7 or not is_number(fields[4]):
                raise ValueError(f"{where}: not an STS-B row (genre, file, year, id, score, sentence1, sentence2): "
                                 f"{line[:60]!r}")
            examples.append(_example(fields[5], fields[6], fields[4], where))
    elif not need_labels:
        for number, line in numbered:
            text, tab_found, pair = line.partition("\t")
            if need_pairs and not tab_found:
                raise ValueError(f"{path}:{number}: this model reads text pairs (two texts separated by a tab); "
                                 "the line has one text")
            examples.append(_example(text, pair if need_pairs else None, None, f"{path}:{number}"))
    else:
        raise ValueError(f"{path}:{numbered[0][0]}: unrecognised format: give a header line naming the columns "
                         "(text/sentence, label; --text-column, --label-column), or a CoLA or STS-B file")
    if not examples:
        raise ValueError(f"{path}: a header line and no rows: nothing to read")
    if need_pairs and examples[0].pair is None:
        raise ValueError(f"{path}: a pair task needs two texts per row, this file has one")
    return examples


def _csv_fields(line: str, where: str) -> list[str]:
    """One CSV line's fields; a line the csv module cannot parse (a lone \\r, ...) is an error naming it."""
    import csv

    try:
        return next(csv.reader([line]), [])
    except csv.Error as err:
        raise ValueError(f"{where}: not a CSV row ({err})") from None


_TEXT_NAMES = ("text", "sentence", "sentence1", "text_a", "question", "premise")
_PAIR_NAMES = ("text_pair", "sentence2", "text_b", "hypothesis")
_LABEL_NAMES = ("label", "labels", "score", "similarity", "acceptability")


def _header_columns(names: list[str], text: str | None, pair: str | None,
                    label: str | None) -> tuple[int, int | None, int | None] | None:
    """Column indices when `names` is a header: the given names, else the usual ones."""
    lower = [n.lower() for n in names]

    def find(given: str | None, usual: tuple[str, ...]) -> int | None:
        if given is not None:
            if given not in names:
                return -1
            return names.index(given)
        return next((lower.index(u) for u in usual if u in lower), None)

    ti, pi, li = find(text, _TEXT_NAMES), find(pair, _PAIR_NAMES), find(label, _LABEL_NAMES)
    if ti is None or ti == -1 or pi == -1 or li == -1:
        return None
    return ti, pi, li


def _example(text: str, pair: str | None, label: str | None, where: str) -> Example:
    text = text.strip()
    if not text:
        raise ValueError(f"{where}: empty text")
    if pair is not None:
        pair = pair.strip()
        if not pair:
            raise ValueError(f"{where}: empty second text")
    return Example(text, pair, label.strip() if label is not None else None, where)


def label_values(examples: Sequence[Example], head: HeadConfig) -> Tensor:
    """The labels as class indices (classify) or floats (regress); an unknown or non-numeric one names file:line."""
    out = []
    for ex in examples:
        if ex.label is None or ex.label == "":
            raise ValueError(f"{ex.where}: no label")
        if head.objective == "regress":
            if not is_number(ex.label):
                raise ValueError(f"{ex.where}: label {ex.label!r} is not a number (regression)")
            out.append(float(ex.label))
        else:
            if ex.label not in head.labels:
                raise ValueError(f"{ex.where}: label {ex.label!r} is not one of the training labels {head.labels}")
            out.append(head.labels.index(ex.label))
    return torch.tensor(out, dtype=torch.float32 if head.objective == "regress" else torch.long)


def class_names(examples: Sequence[Example]) -> list[str]:
    names = sorted({ex.label for ex in examples if ex.label is not None})
    if all(is_number(n) for n in names):
        names.sort(key=float)
    return names
