"""A scorer API shaped like minicons' (`minicons.scorer.MaskedLMScorer` / `IncrementalLMScorer`), on top of
`Scorer`, for every family maskplay scores: T-TA (one pass), BERT (PLL), GPT (causal), ELECTRA (discriminator).

    from maskplay.tasks.score.api import MaskedLMScorer
    mlm = MaskedLMScorer("runs/bert/final", "cpu")               # a model directory, or (model, tokenizer=...)
    mlm.sequence_score(["the cat sat ."], reduction=lambda x: x.sum(0).item())   # or "sum" / "mean"
    mlm.token_score(["the cat sat ."])                            # [[("the", -1.2), ("cat", -3.4), ...]]
    mlm.word_score(["the cat sat ."], PLL_metric="within_word_l2r")

Scores are natural-log probabilities of the word pieces, never of [CLS]/[SEP] ([SOS]/[EOS]): the rule of
`Scorer` (docs/guides/scoring.md, "From minicons and mlm-scoring", lists where minicons' defaults differ)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ...data.tokenizer import Tokenizer
from ...families import MaskplayModel, family_class
from ...families import families as all_families
from .scorer import Method, Scorer, SentenceScore, load_model_dir, resolve_method

REDUCTIONS: dict[str, Callable[[torch.Tensor], float]] = {
    "sum": lambda x: x.sum(0).item(),
    "mean": lambda x: x.mean(0).item(),
}
PLL_METRICS = {"original": Method.PLL, "within_word_l2r": Method.PLL_WORD}


class LMScorer:
    """minicons-style scoring with any maskplay model; `method` as in `Scorer` ("auto": one-pass for T-TA, pll for
    BERT, causal for GPT, discriminator for ELECTRA). `model` is a model directory (or a bundled model's name) or a
    MaskplayModel given with its `tokenizer`. `PLL_metric` ("original" | "within_word_l2r") is the default of
    every call for a model scored by PLL; a call's own PLL_metric overrides it. Other keyword arguments go to
    `Scorer` (batch_size, precision, overflow, progress)."""

    reads: tuple[str, ...] = ()  # the score methods a family needs one of to be scored here (empty: any family)

    @classmethod
    def reads_family(cls, name: str) -> bool:
        return not cls.reads or bool(set(cls.reads) & set(family_class(name).score_methods))

    @classmethod
    def families(cls) -> list[str]:
        """The registered families this class scores."""
        return [f.family for f in all_families() if not cls.reads or set(cls.reads) & set(f.score_methods)]

    def __init__(self, model: str | Path | MaskplayModel, device: str | torch.device | None = "cpu",
                 tokenizer: Tokenizer | None = None, PLL_metric: str | None = None,  # noqa: N803 (minicons' name)
                 method: Method | str = Method.AUTO, **kwargs: Any) -> None:
        if isinstance(model, (str, Path)):
            if tokenizer is not None:
                raise ValueError("a model directory brings its own tokenizer; pass tokenizer= only with a model object")
            model, tokenizer = load_model_dir(model)
        elif tokenizer is None:
            raise ValueError("a model object needs its tokenizer: tokenizer=load_tokenizer(...)")
        family = model.config.family
        if not self.reads_family(family):
            other = "IncrementalLMScorer" if "causal" in model.score_methods else "MaskedLMScorer"
            raise ValueError(f"{type(self).__name__} scores {' / '.join(self.families())} models, not {family!r}; "
                             f"use {other} or LMScorer")
        method = self._default_method(family, Method(method), PLL_metric)
        self.scorer = Scorer(model, tokenizer, device=device, method=method, **kwargs)
        self.model, self.tokenizer = self.scorer.model, tokenizer
        self._kwargs = kwargs

    def _default_method(self, family: str, method: Method, pll_metric: str | None) -> Method:
        if pll_metric is None:
            return method
        want = _pll_method(pll_metric)
        if method is Method.AUTO:
            natural = resolve_method(family, method)
            return natural if natural is Method.ONE_PASS and want is Method.PLL else want
        if method is want or (method is Method.ONE_PASS and want is Method.PLL):
            return method
        raise ValueError(f"PLL_metric={pll_metric!r} and method={method.value!r} disagree; give one of them")

    @property
    def method(self) -> Method:
        return self.scorer.method

    def _scores(self, batch: str | Sequence[str], pll_metric: str | None) -> list[SentenceScore]:
        sentences = [batch] if isinstance(batch, str) else list(batch)
        scorer = self.scorer
        if pll_metric is not None:
            if scorer.method not in (Method.PLL, Method.PLL_WORD, Method.ONE_PASS):
                raise ValueError(f"PLL_metric applies to models scored by PLL, not to method {scorer.method.value!r}")
            want = _pll_method(pll_metric)
            if want is Method.PLL and scorer.method is Method.ONE_PASS:
                want = Method.ONE_PASS  # T-TA's one pass gives its PLL
            if want is not scorer.method:
                scorer = Scorer(scorer.model, self.tokenizer, method=want, **self._kwargs)
        return scorer.score(sentences)

    def sequence_score(self, batch: str | Sequence[str], reduction: str | Callable[[torch.Tensor], Any] = "mean",
                       prob: bool = False, base_two: bool = False, PLL_metric: str | None = None) -> list[Any]:  # noqa: N803
        """reduction(x) per sentence, x the 1-D float64 tensor of its pieces' log-probabilities (`base_two`: in
        bits; `prob`: probabilities). "mean" (minicons' default, `lambda x: x.mean(0).item()`) and "sum" (the
        sentence log-probability, mlm-scoring's PLL) are shortcuts."""
        if isinstance(reduction, str):
            if reduction not in REDUCTIONS:
                raise ValueError(f"reduction {reduction!r} is not one of {list(REDUCTIONS)}; or pass a callable")
            reduction = REDUCTIONS[reduction]
        return [reduction(_transform(torch.tensor(s.token_log_probs, dtype=torch.float64), prob, base_two))
                for s in self._scores(batch, PLL_metric)]

    def token_score(self, batch: str | Sequence[str], surprisal: bool = False, prob: bool = False,
                    base_two: bool = False, PLL_metric: str | None = None) -> list[list[tuple[str, float]]]:  # noqa: N803
        """[(piece, score), ...] per sentence, one per word piece ([CLS]/[SEP] never appear)."""
        return [list(zip(s.tokens, _values(s.token_log_probs, surprisal, prob, base_two), strict=True))
                for s in self._scores(batch, PLL_metric)]

    def word_score(self, batch: str | Sequence[str], surprisal: bool = False, prob: bool = False,
                   base_two: bool = False, PLL_metric: str | None = None) -> list[list[tuple[str, float]]]:  # noqa: N803
        """[(word, score), ...] per sentence: a word's score is the sum of its pieces' log-probabilities (then
        turned into bits, a surprisal or a probability). Words are the tokenizer's pre-tokenizer words (split at
        whitespace and punctuation), as they appear in the sentence. With PLL_metric="within_word_l2r" (Kauf &
        Ivanova 2023) a piece is scored with the rest of its word to the right masked too."""
        out = []
        for s in self._scores(batch, PLL_metric):
            words = s.words()
            out.append(list(zip([w.text for w in words], _values([w.log_prob for w in words], surprisal, prob,
                                                                 base_two), strict=True)))
        return out


class MaskedLMScorer(LMScorer):
    """minicons' MaskedLMScorer: PLL for BERT ("original", or PLL_metric="within_word_l2r"), T-TA's one pass
    (which equals its PLL), an ELECTRA model's generator PLL."""

    reads = ("one-pass", "pll")

    def _default_method(self, family: str, method: Method, pll_metric: str | None) -> Method:
        # the family's masked-LM reading where it is not its own score (ELECTRA: the generator's PLL, not the
        # discriminator; XLNet: its PLL, not its causal score)
        masked_lm_method = family_class(family).masked_lm_method
        if masked_lm_method is not None and method is Method.AUTO:
            return _pll_method(pll_metric) if pll_metric is not None else Method(masked_lm_method)
        return super()._default_method(family, method, pll_metric)


class IncrementalLMScorer(LMScorer):
    """minicons' IncrementalLMScorer: GPT, log p(piece | [SOS] and the pieces before it), every piece scored; XLNet
    the same from its query stream under the left-to-right order."""

    reads = ("causal",)


def _pll_method(name: str) -> Method:
    if name not in PLL_METRICS:
        raise ValueError(f"PLL_metric {name!r} is not one of {list(PLL_METRICS)}")
    return PLL_METRICS[name]


def _transform(x: torch.Tensor, prob: bool, base_two: bool) -> torch.Tensor:
    if prob and base_two:
        raise ValueError("prob and base_two cannot both be set (a probability has no base)")
    if base_two:
        return x / math.log(2)
    return x.exp() if prob else x


def _values(log_probs: list[float], surprisal: bool, prob: bool, base_two: bool) -> list[float]:
    if surprisal and prob:
        raise ValueError("surprisal and prob cannot both be set")
    values = _transform(torch.tensor(log_probs, dtype=torch.float64), prob, base_two)
    return (-values if surprisal else values).tolist()
