"""Sentence log-likelihoods from any family, compared on the same footing.

What is scored (the same rule for every family, so that their numbers compare): every word piece of the
sentence, never [SOS] or [EOS] - the rule mlm-scoring (Salazar et al., 2020) uses for BERT's PLL.
Log-probabilities are natural logs (nats).

- T-TA (method one-pass): one forward pass per batch of sentences under the diagonal mask; output i never
  sees token i, so log p(token i | all other tokens) for every piece comes out of a single pass.
- BERT (method pll): pseudo-log-likelihood as mlm-scoring computes it - one copy of the sentence per scored
  piece with that piece replaced by [MASK]; the copies of many sentences are sorted by length and batched
  together, and the LM head runs only at each copy's masked position.
- pll-word (Kauf & Ivanova 2023, "PLL-word-l2r"): as pll, but scoring a piece of a multi-piece word also masks
  the pieces of the same word to its right, so a word's later pieces cannot give its earlier ones away.
- GPT (method causal): log p(token i | the tokens before it), [SOS] first. XLNet's causal is the same quantity
  from its query stream under the left-to-right factorization order: the exact sentence log-likelihood, one pass.
- XLNet (method causal-boundaries): the same, one pass, under the order [SOS], [EOS], then left to right: each
  piece from [SOS], [EOS] and the pieces before it (the pieces' likelihood given the sentence's boundaries).
- XLNet (method pll): one pass per scored piece, that piece hidden from every stream by the mask (not replaced by
  [MASK]) and read by the query stream at its position; one pass per piece because XLNet's content streams read
  each other (docs/guides/scoring.md).
- ELECTRA (method discriminator): log P(original) of every piece from the discriminator, in one pass per batch
  of sentences: the probability that the token was not replaced, so the sentence score is the sum of
  log P(original). pll and pll-word on an ELECTRA model run on its generator (the generator's PLL).

pll and pll-word also run on T-TA (copies through the same code path); plain pll there equals one-pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ...data.tokenizer import Tokenizer, load_tokenizer
from ...families import MaskplayModel
from ...nn.score_rules import PLL, PLL_WORD, SUM, ScoreRule
from ...runtime.files import model_file
from ...runtime.model_dir import resolve_model_dir
from ...runtime.precision import Precision
from .memory import check_memory, check_memory_options, memory_log_probs
from .passes import (
    Method,
    Overflow,
    Runner,
    Segment,
    _cached,
    _progress,
    check_compatible,
    check_mask_token,
    chunks,
    make_segments,
    pad_rows,
    pass_length,
    position_log_probs,
    resolve_method,
    resolve_precision,
)
from .pll import pll_log_probs
from .text import encode_texts, require_nonempty


@dataclass(frozen=True)
class WordScore:
    """A word (the tokenizer's pre-tokenizer word) and the sum of its pieces' log-probabilities."""

    text: str
    start: int
    end: int
    pieces: tuple[int, ...]
    log_prob: float

    @property
    def surprisal(self) -> float:
        return -self.log_prob


@dataclass(frozen=True)
class SentenceScore:
    text: str
    tokens: list[str]
    token_ids: list[int]
    token_log_probs: list[float]  # one per piece, nats; [SOS]/[EOS] are not scored
    word_ids: list[int]
    offsets: list[tuple[int, int]]
    method: str
    windows: int = 1  # > 1 when the sentence was longer than the model and scored in windows
    log_prob: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_prob", math.fsum(self.token_log_probs))

    @property
    def num_tokens(self) -> int:
        return len(self.token_log_probs)

    @property
    def mean_log_prob(self) -> float:
        return self.log_prob / self.num_tokens

    def words(self) -> list[WordScore]:
        """The words with their summed log-probabilities, computed once (the server and explain both ask)."""
        found = self.__dict__.get("_words")
        if found is None:
            found = self.__dict__["_words"] = tuple(self._group_words())
        return list(found)

    def _group_words(self) -> list[WordScore]:
        out: list[WordScore] = []
        groups: dict[int, list[int]] = {}
        for k, w in enumerate(self.word_ids):
            groups.setdefault(w, []).append(k)
        for pieces in sorted(groups.values()):
            start, end = self.offsets[pieces[0]][0], self.offsets[pieces[-1]][1]
            out.append(WordScore(self.text[start:end], start, end, tuple(pieces),
                                 math.fsum(self.token_log_probs[k] for k in pieces)))
        return out

    @property
    def replaced_probs(self) -> list[float] | None:
        """ELECTRA's discriminator: P(replaced) of every piece (1 - P(original)); None for other methods."""
        if self.method != Method.DISCRIMINATOR.value:
            return None
        return [-math.expm1(v) for v in self.token_log_probs]

    def to_dict(self) -> dict[str, Any]:
        out = {"text": self.text, "log_prob": self.log_prob, "num_tokens": self.num_tokens,
               "mean_log_prob": self.mean_log_prob, "method": self.method, "windows": self.windows,
               "tokens": self.tokens, "token_log_probs": self.token_log_probs}
        if self.replaced_probs is not None:
            out["token_replaced_probs"] = self.replaced_probs
        return out


def load_model_dir(directory: str | Path) -> tuple[MaskplayModel, Tokenizer]:
    """A model directory as the trainer exports it: config.json + model.safetensors + tokenizer.json; or a
    bundled model's name (e.g. "tta-mini-wiki") or a hub id, see model_dir.resolve_model_dir."""
    directory = resolve_model_dir(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory {directory} not found")
    if not any(model_file(directory, name).is_file() for name in ("tokenizer.json", "vocab.txt")):
        raise FileNotFoundError(f"{directory / 'tokenizer.json'} not found: a model directory needs config.json, "
                                "model.safetensors and tokenizer.json (a HuggingFace one: tokenizer.json or vocab.txt)")
    model = MaskplayModel.from_pretrained(directory).eval()
    tokenizer = load_tokenizer(directory)  # tokenizer.json, else (a HuggingFace BERT's) vocab.txt
    check_compatible(model, tokenizer, directory)
    return model, tokenizer


class Scorer:
    """Score sentences with a maskplay model. The model is put in eval mode (and moved to `device` if given).

    >>> scorer = Scorer.from_pretrained("runs/tta/export")
    >>> [s.log_prob for s in scorer.score(["the cat sat on the mat ."])]
    """

    def __init__(self, model: MaskplayModel, tokenizer: Tokenizer, batch_size: int = 32,
                 device: str | torch.device | None = None, method: Method | str = Method.AUTO,
                 overflow: Overflow | str = Overflow.ERROR, precision: Precision | str = Precision.fp32,
                 progress: bool = False, segment_tokens: int | None = None,
                 memory_tokens: int | None = None, max_length: int | None = None, temperature: float = 1.0) -> None:
        """overflow='memory' (XLNet's method causal, or a GPT with relative positions; maskplay.tasks.score.memory): a text
        of more than `segment_tokens` tokens with [SOS]/[EOS] (default: the model's max_position) is scored in
        consecutive segments of that many tokens, each reading the memory of the last `memory_tokens` tokens before
        it (default: xlnet.mem_len when the model sets one, else 3 segments). `max_length`: tokens per pass with
        [SOS]/[EOS] (default and most: the model's max_position); a longer text goes to `overflow` (windows of
        max_length - 2 pieces)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not (temperature > 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature must be a positive number, got {temperature}")
        check_compatible(model, tokenizer)
        if model.no_lm_head:  # a headless HuggingFace encoder (families/hf/directory.py)
            raise ValueError(f"{model.no_lm_head}: it has no LM head to score with (it embeds and fine-tunes: maskplay "
                             "embed, eval sts, finetune); give a masked or causal LM")
        self.overflow = Overflow(overflow)
        if self.overflow is Overflow.TRUNCATE:
            raise ValueError("overflow='truncate' would score part of a sentence as if it were all of it; "
                             "use 'error' or 'window' for scoring")
        check_memory_options(self.overflow, segment_tokens, memory_tokens)
        self.method = resolve_method(model.config.family, method)
        self.rule = type(model).score_rule(str(getattr(self.method, "value", self.method)))  # score_rules.ScoreRule
        check_mask_token(model, tokenizer, self.rule)
        self.max_length = pass_length(model.config, max_length)
        self.segment_tokens = self.memory_tokens = None
        if self.overflow is Overflow.MEMORY:
            cfg = model.config
            self.segment_tokens, self.memory_tokens = check_memory(model, self.method, cfg.max_position,
                                                                   segment_tokens, memory_tokens)
        if device is not None:
            model = model.to(device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.precision = resolve_precision(model, precision)
        self.progress = progress
        self.temperature = temperature

    @classmethod
    def from_pretrained(cls, directory: str | Path, **kwargs: Any) -> Scorer:
        model, tokenizer = load_model_dir(directory)
        return cls(model, tokenizer, **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def score(self, sentences: Sequence[str]) -> list[SentenceScore]:
        """One SentenceScore per sentence, in order. An empty sentence (or one with no tokens after
        tokenization) is a ValueError naming its index; so is one longer than the model with overflow='error'."""
        if isinstance(sentences, str):
            raise ValueError("score() takes a list of sentences, got a single str")
        sentences = list(sentences)
        if not sentences:
            return []
        encoded = encode_texts(self.tokenizer, sentences)
        require_nonempty(encoded)
        cfg = self.model.config
        long: list[int] = []  # under overflow='memory': the texts scored in segments with memory (score.long)
        if self.overflow is Overflow.MEMORY:
            long = [k for k, enc in enumerate(encoded) if len(enc) + 2 > self.segment_tokens]
        fits = sorted(set(range(len(encoded))) - set(long))
        segments = [replace(seg, sentence=fits[seg.sentence]) for seg in
                    make_segments([encoded[k] for k in fits], cfg.sos_token_id, cfg.eos_token_id, self.max_length,
                                  self.overflow, causal=self.rule.left_to_right)]
        results = [[math.nan] * len(enc) for enc in encoded]
        windows = [0] * len(encoded)
        with torch.inference_mode():
            if long:
                found, counts = memory_log_probs(self._runner(self.model), [(k, encoded[k]) for k in long],
                                                 self.segment_tokens, self.memory_tokens, self.batch_size,
                                                 progress=self.progress)
                for (sentence, piece), value in found:
                    results[sentence][piece] = value
                for k, count in counts.items():
                    windows[k] = count
            for (sentence, piece), value in self.segment_log_probs(segments):
                results[sentence][piece] = value
        for seg in segments:
            windows[seg.sentence] += 1
        out = []
        for k, (enc, values, n_windows) in enumerate(zip(encoded, results, windows, strict=True)):
            if not all(math.isfinite(v) for v in values):  # nan is also the mark of a piece left unscored
                raise ValueError(f"sentence {k} got a non-finite log-probability: the model gives nan or inf "
                                 "(damaged or diverged weights?)")
            out.append(SentenceScore(enc.text, enc.tokens, enc.ids, values, enc.word_ids, enc.offsets,
                                     self.rule.name, n_windows))
        return out

    def segment_log_probs(self, segments: list[Segment], kind: type[Runner] = Runner,
                          made: list[Runner] | None = None) -> list[tuple[tuple[int, int], float]]:
        """((segment.sentence, piece), log p) for every scored piece of `segments` (passes.Segment: the pieces a
        segment lists in `scored`, the others visible as context), by this scorer's method, batched as score()
        batches: what score() and maskplay.tasks.lm_eval_backend (a continuation given its context) share. The passes run
        on `kind` (Runner or a subclass that records more); `made`, when given, receives the runners in the order
        they ran (fused: the PLL's, then the causal one's, whose order is the order returned)."""

        def runner(model: MaskplayModel) -> Runner:
            made_now = self._runner(model, kind)
            if made is not None:
                made.append(made_now)
            return made_now

        with torch.inference_mode():
            return self._by_rule(self.rule, segments, runner)

    def _by_rule(self, rule: ScoreRule, segments: list[Segment],
                 runner: Callable[[MaskplayModel], Runner]) -> list[tuple[tuple[int, int], float]]:
        """The passes a rule batches (score_rules.ScoreRule.batching): one pass per batch of segments, one copy per
        piece (PLL, on the family's masked LM), or the sum of other rules, run in the order listed (the last one's
        order is the order returned)."""
        if rule.batching in (PLL, PLL_WORD):
            return self._pll(segments, runner(self._masked_lm()), rule)
        if rule.batching == SUM:
            found = [dict(self._by_rule(self.model.score_rule(name), segments, runner)) for name in rule.parts[:-1]]
            last = self._by_rule(self.model.score_rule(rule.parts[-1]), segments, runner)
            return [(key, sum((f[key] for f in found), value)) for key, value in last]
        return self._one_pass(runner(self.model), segments, rule)

    def _runner(self, model: MaskplayModel, kind: type[Runner] = Runner) -> Runner:
        return kind(model, self.precision, self.temperature)

    def _pll(self, segments: list[Segment], runner: Runner, rule: ScoreRule) -> list[tuple[tuple[int, int], float]]:
        return pll_log_probs(runner, segments, word_l2r=rule.batching == PLL_WORD, batch_size=self.batch_size,
                             progress=self.progress, offset=rule.offset)

    def _masked_lm(self) -> MaskplayModel:
        """The model PLL runs on: the model itself, or an ELECTRA model's generator."""
        return self.model.masked_lm(lambda kind, make: _cached(self.model, kind, make))

    def _one_pass(self, runner: Runner, segments: list[Segment],
                  rule: ScoreRule) -> list[tuple[tuple[int, int], float]]:
        """A one-pass rule (T-TA, GPT, ELECTRA's discriminator): every scored piece of a batch of segments in one
        forward pass."""
        order = sorted(range(len(segments)), key=lambda k: -len(segments[k].ids))
        found = []
        batches = list(chunks(order, self.batch_size))
        for batch in _progress(batches, self.progress, "scoring"):
            segs = [segments[k] for k in batch]
            ids, attn = pad_rows([s.ids for s in segs], self.model.config.pad_token_id, self.device)
            rows, cols, keys = [], [], []
            for row, seg in enumerate(segs):
                rows.extend([row] * len(seg.scored))
                cols.extend(seg.position(j) for j in seg.scored)
                keys.extend((seg.sentence, j) for j in seg.scored)
            values = position_log_probs(runner, ids, attn, torch.tensor(rows, device=self.device),
                                        torch.tensor(cols, device=self.device), rule).tolist()
            found.extend(zip(keys, values, strict=True))
        return found


