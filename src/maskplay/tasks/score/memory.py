"""Texts longer than the model's window: Transformer-XL memory for XLNet's causal score and for a GPT with
relative positions (overflow="memory"; each family's memory_pass runs a segment: XLNet's query stream at position
p predicts token p, GPT's output at p token p + 1, so a GPT segment's first piece is predicted by the last output of
the segment before, as scripts/memory_study.py reads a text). Described below for XLNet.

A text of n pieces is the token stream [SOS] p_0 ... p_{n-1} [EOS], cut into consecutive segments of
`segment_tokens` tokens (the last one shorter). Segment k runs XLNet's left-to-right view (its query stream at
every position) with the memory of the segments before it: each layer's content input over the last
`memory_tokens` tokens, prepended to that layer's keys and values and seen by every query, at its true relative
distance (XLNet's positions are relative, so memory reaches back past the trained window). Every piece is scored
once, in the segment that holds it, from the pieces before it in that segment and the memory.

[SOS] and [EOS]: only the first segment starts with [SOS] and only the last ends with [EOS]; a later segment
begins mid-text and reads its context from the memory, not from a fresh [SOS] (unlike overflow="window", where
every window is framed as a sentence of its own). [EOS] is never scored and no causal position reads it, so a
last segment that would hold [EOS] alone is not run. With memory covering the whole text, the scores are those
of one pass over it (up to float rounding): the content stream is causal, so the memory holds exactly the
states one pass would have computed (tests/tasks/score/test_long_documents.py).

Batching: texts are sorted by their number of segments and cut into batches of `batch_size` texts; step k of a
batch runs segment k of every text that has one. Every segment but a text's last is full, so the texts still
running at step k all carry memory of the same length, min(memory_tokens, k * segment_tokens), and none of it is
padding (XLNet's memory keys are seen by every query, padding included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...families import family_class
from ...registry import family_names
from .passes import Method, Overflow, Runner, _progress, chunks, pad_rows
from .text import Encoded


@dataclass(frozen=True)
class MemorySegment:
    """One step of a text under memory: `ids` (at most segment_tokens ids), scoring the pieces `scored`
    (text-level piece indices), piece j at position j + lead - start, where start is the segment's offset in the
    token stream [SOS] pieces [EOS] and lead is 1 (0 for a stream without [SOS])."""

    ids: list[int]
    start: int
    scored: list[int]
    lead: int = 1

    def position(self, piece: int) -> int:
        return piece + self.lead - self.start


def memory_segments(ids: list[int], sos: int | None, eos: int, segment_tokens: int) -> list[MemorySegment]:
    """The consecutive segments of [SOS] ids [EOS], each piece scored in the segment that holds it. sos=None: a
    stream without [SOS] (its first piece is then predicted from nothing; scripts/context_length_study.py uses it
    to tell the effect of the [SOS] token from that of the context)."""
    if segment_tokens < 2:
        raise ValueError(f"segments of {segment_tokens} tokens leave no room for a piece after [SOS]; use 2 or more")
    lead = 0 if sos is None else 1
    stream = [*([] if sos is None else [sos]), *ids, eos]
    out = []
    for start in range(0, len(stream), segment_tokens):
        end = min(start + segment_tokens, len(stream))
        scored = [j for j in range(max(start - lead, 0), min(end - lead, len(ids)))]
        if not scored:  # only [EOS] is left: nothing to score, and nothing later reads it
            break
        out.append(MemorySegment(stream[start:end], start, scored, lead))
    return out


def check_memory(model: Any, method: Method, max_position: int, segment_tokens: int | None,
                 memory_tokens: int | None) -> tuple[int, int]:
    """(segment_tokens, memory_tokens) for overflow='memory', defaults filled in; one-line errors otherwise."""
    if model.trains_with_memory:
        type(model).check_memory(model.config)  # a config of such a family without memory says why, in one line
    mem_len = model.memory_length()  # None: a family without Transformer-XL memory
    if mem_len is None:
        takers = ", ".join(n for n in family_names() if family_class(n).trains_with_memory)
        raise ValueError(f"overflow='memory' carries Transformer-XL memory from segment to segment, which only "
                         f"families {takers} have; this model is {model.family!r}: use overflow='window' (sliding "
                         "windows)")
    if method is not Method.CAUSAL:
        raise ValueError(f"overflow='memory' scores with method 'causal' (each piece from the text before "
                         f"it); method {method.value!r} reads more than the text before a piece, which memory of earlier "
                         "segments cannot give: use overflow='window'")
    segment = max_position if segment_tokens is None else segment_tokens
    if not 2 <= segment <= max_position:
        raise ValueError(f"segment_tokens must be 2..{max_position} (the model's positions), got {segment}")
    if memory_tokens is None:
        memory = mem_len if mem_len else 3 * segment
    else:
        memory = memory_tokens
    if memory < 0:
        raise ValueError(f"memory_tokens must be >= 0, got {memory}")
    if mem_len and memory > mem_len:
        raise ValueError(f"memory_tokens {memory} is more than this model keeps (xlnet.mem_len = {mem_len}); "
                         f"use at most {mem_len}")
    return segment, memory


def check_memory_options(overflow: Overflow, segment_tokens: int | None, memory_tokens: int | None) -> None:
    if overflow is not Overflow.MEMORY and (segment_tokens is not None or memory_tokens is not None):
        raise ValueError("segment_tokens and memory_tokens apply to overflow='memory' only")


def memory_log_probs(runner: Runner, texts: list[tuple[int, Encoded]], segment_tokens: int, memory_tokens: int,
                     batch_size: int, progress: bool = False, sos: bool = True
                     ) -> tuple[list[tuple[tuple[int, int], Any]], dict[int, int]]:
    """log p of every piece of the given (sentence index, encoded text) pairs under memory; also the number of
    segments per sentence index. sos=False: the texts without [SOS] (see memory_segments)."""
    model = runner.model
    cfg = model.config
    device = next(model.parameters()).device
    plans = [memory_segments(enc.ids, cfg.sos_token_id if sos else None, cfg.eos_token_id, segment_tokens)
             for _, enc in texts]
    order = sorted(range(len(texts)), key=lambda k: -len(plans[k]))
    found: list[tuple[tuple[int, int], Any]] = []
    for batch in _progress(list(chunks(order, batch_size)), progress, "scoring with memory"):
        mems = [torch.zeros(len(batch), 0, cfg.hidden_size, device=device)] * cfg.num_layers
        carry = None  # the previous segment's last `shift` outputs: they predict this segment's first tokens
        for step in range(len(plans[batch[0]])):
            active = [k for k in batch if len(plans[k]) > step]  # a prefix of the batch: sorted by segments
            segs = [plans[k][step] for k in active]
            ids, attn = pad_rows([s.ids for s in segs], cfg.pad_token_id, device)
            hidden, new_mems, shift = model.memory_pass(runner, ids, attn, [m[:len(active)] for m in mems],
                                                        memory_tokens)
            if shift and not sos:
                raise ValueError("a stream without [SOS] leaves its first piece nothing to be predicted from under a "
                                 "next-token model")
            # output p predicts token p + shift: row p + shift of [carry; hidden] predicts token p
            before = hidden.new_zeros(len(active), shift, hidden.shape[-1]) if carry is None else carry[:len(active)]
            predictors = torch.cat([before, hidden], dim=1)
            rows, cols, keys = [], [], []
            for row, (k, seg) in enumerate(zip(active, segs, strict=True)):
                rows.extend([row] * len(seg.scored))
                cols.extend(seg.position(j) for j in seg.scored)
                keys.extend((texts[k][0], j) for j in seg.scored)
            rows_t, cols_t = torch.tensor(rows, device=device), torch.tensor(cols, device=device)
            values = runner.log_probs(predictors[rows_t, cols_t], ids[rows_t, cols_t]).tolist()
            found.extend(zip(keys, values, strict=True))
            carry = hidden[:, hidden.shape[1] - shift:]  # every row still running had a full segment
            # each layer's input over the memory and this segment, cut to the last memory_tokens
            mems = [m[:, m.shape[1] - min(memory_tokens, m.shape[1]):] for m in new_mems]
    return found, {texts[k][0]: len(plans[k]) for k in range(len(texts))}
