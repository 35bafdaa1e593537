"""Word error rate: word-level Levenshtein distance (substitutions, deletions, insertions all cost 1)."""

from __future__ import annotations

from collections.abc import Sequence


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Minimum number of word substitutions, deletions and insertions turning `ref` into `hyp`."""
    # N-best hypotheses mostly agree with the reference at both ends; cutting the common prefix and suffix
    # leaves the same distance and a much smaller table.
    start = 0
    while start < len(ref) and start < len(hyp) and ref[start] == hyp[start]:
        start += 1
    end_r, end_h = len(ref), len(hyp)
    while end_r > start and end_h > start and ref[end_r - 1] == hyp[end_h - 1]:
        end_r -= 1
        end_h -= 1
    r, h = ref[start:end_r], hyp[start:end_h]
    if not r or not h:
        return len(r) + len(h)
    previous = list(range(len(h) + 1))  # distance from r[:0] to h[:j]
    for i, rw in enumerate(r, start=1):
        current = [i] + [0] * len(h)
        for j, hw in enumerate(h, start=1):
            current[j] = min(previous[j] + 1,  # delete rw
                             current[j - 1] + 1,  # insert hw
                             previous[j - 1] + (rw != hw))  # match or substitute
        previous = current
    return previous[-1]


def wer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Corpus WER in percent: total edits / total reference words (whitespace-split strings)."""
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    words = sum(len(r.split()) for r in refs)
    if words == 0:
        raise ValueError("the references have no words")
    return 100.0 * sum(edit_distance(r.split(), h.split()) for r, h in zip(refs, hyps, strict=True)) / words
