"""Pseudo-log-likelihood the way awslabs/mlm-scoring computes it, batched across sentences.

Every scored piece gets its own copy of its sentence with that piece masked ("pll"), or with that piece and
the pieces of the same word to its right masked ("pll-word", Kauf & Ivanova 2023, PLL-word-l2r). The copies
of all sentences are sorted by length and cut into batches, so a batch mixes sentences and holds little
padding; the last block and the LM head run once per copy, at the output that predicts its masked piece
(pass_modes.LastLayerRows), never over the whole sequence."""

from __future__ import annotations

from typing import Any

import torch

from .passes import Runner, Segment, _progress, chunks, pad_rows


def masked_span(segment: Segment, piece: int, word_l2r: bool) -> tuple[int, int]:
    """Positions [start, end) to replace by [MASK] when scoring `piece` of `segment`."""
    start = segment.position(piece)
    end = start + 1
    if word_l2r:
        local = piece - segment.first
        word = segment.word_ids[local]
        while local + 1 < len(segment.word_ids) and segment.word_ids[local + 1] == word:
            local += 1
            end += 1
    return start, end


def pll_copies(segments: list[Segment], word_l2r: bool) -> list[tuple[int, int, int, int]]:
    """(segment index, piece, mask start, mask end) for every scored piece, longest segments first."""
    copies = [(k, j, *masked_span(seg, j, word_l2r)) for k, seg in enumerate(segments) for j in seg.scored]
    copies.sort(key=lambda c: -len(segments[c[0]].ids))  # stable: a sentence's copies stay together
    return copies


def pll_log_probs(runner: Runner, segments: list[Segment], word_l2r: bool, batch_size: int,
                  progress: bool = False, offset: int | None = None) -> list[tuple[tuple[int, int], Any]]:
    """log p of every scored piece, one copy each, hidden the family's way (its pll_hidden); `offset`: the PLL
    rule's (the output at piece + offset predicts it; default the family's "pll" rule's)."""
    cfg = runner.model.config
    device = next(runner.model.parameters()).device
    found = []
    batches = list(chunks(pll_copies(segments, word_l2r), batch_size))
    for batch in _progress(batches, progress, "pll"):
        ids, attn = pad_rows([segments[c[0]].ids for c in batch], cfg.pad_token_id, device)
        rows = torch.arange(len(batch), device=device)
        pos = torch.tensor([c[2] for c in batch], device=device)
        end = torch.tensor([c[3] for c in batch], device=device)
        hidden = runner.model.pll_hidden(runner, ids, attn, pos, end, offset)  # the family's way of hiding a piece
        values = runner.log_probs(hidden, ids[rows, pos]).tolist()
        found.extend(((segments[c[0]].sentence, c[1]), v) for c, v in zip(batch, values, strict=True))
    return found

