"""What a scoring pass needs, stated in the core so that families type against it and the tasks layer implements it:

- PassRunner: "run these rows at this precision" - the model's forward pass and its heads in one precision
  (score/passes.py's Runner: fp32, bf16, bf16 autocast or int8). A family's scoring hooks call it instead of the
  model itself, so that one hook serves every precision.
- ScoreRule: one scoring method of a family, declared in the family's file (its `score_rules`): how the scorer
  batches its passes (one pass per batch of sentences, one copy per piece for PLL, or a sum of other rules), which
  output predicts a piece (`offset`: the output at p + offset predicts the piece at p: T-TA's and BERT's 0, GPT's
  -1), what the pass is told (`pass_kwargs`) and which head reads it. A family adds a method by declaring a rule,
  without a branch in the scorer (tests/families/test_toy_family.py adds one from a test file)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor

from .outputs import ModelOutput

# how the scorer batches a rule's passes (ScoreRule.batching)
ONE_PASS = "one-pass"  # every scored piece of a batch of sentences from one forward pass
PLL = "pll"  # one copy per scored piece, that piece hidden (the family's pll_hidden)
PLL_WORD = "pll-word"  # as PLL, the word's pieces to its right hidden too (Kauf & Ivanova 2023)
SUM = "sum"  # the sum of the log-probabilities of the rules named in `parts`
BATCHINGS = (ONE_PASS, PLL, PLL_WORD, SUM)
HEADS = ("lm", "original")


class PassRunner(Protocol):
    """The model's forward pass and heads at one precision: what a family's scoring hooks are handed."""

    def forward(self, input_ids: Tensor, **kwargs: Any) -> ModelOutput:
        """The model's (or its precision copy's) forward(input_ids, **kwargs)."""
        ...

    def log_probs(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """log p(targets[n]) from the LM head at hidden[n], fp32."""
        ...

    def original_log_probs(self, hidden: Tensor) -> Tensor:
        """ELECTRA's discriminator: log P(original) at hidden[n], fp32."""
        ...


@dataclass(frozen=True)
class ScoreRule:
    """One scoring method of a family (a `maskplay score --method` name). `offset`: the output at position
    p + offset predicts the piece at p (for PLL: the position the last block runs at, relative to the hidden piece).
    `pass_kwargs(attention_mask)`: the forward arguments of the pass beyond ids and mask (GPT-BERT's causal mode,
    XLNet's view). `head`: "lm" (log p(piece)) or "original" (ELECTRA's log P(original)). `left_to_right`: a piece
    reads only the pieces before it (a window scores it in the earliest window holding it, with the most left
    context). `parts`: a SUM rule's rules, by name."""

    name: str
    batching: str = ONE_PASS
    offset: int = 0
    pass_kwargs: Callable[[Tensor], dict[str, Any]] | None = None
    head: str = "lm"
    left_to_right: bool = False
    parts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.batching not in BATCHINGS:
            raise ValueError(f"score rule {self.name!r}: batching must be one of {BATCHINGS}, got {self.batching!r}")
        if self.head not in HEADS:
            raise ValueError(f"score rule {self.name!r}: head must be one of {HEADS}, got {self.head!r}")
        if (self.batching == SUM) != bool(self.parts):
            raise ValueError(f"score rule {self.name!r}: parts go with batching {SUM!r}, and only with it")

    def read(self, run: PassRunner, ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor,
             targets: Tensor) -> Tensor:
        """log p(targets) of the pieces at (rows, cols), from one pass over `ids` (a ONE_PASS rule)."""
        extra = {} if self.pass_kwargs is None else self.pass_kwargs(attention_mask)
        hidden = run.forward(ids, attention_mask=attention_mask, **extra).last_hidden_state[rows, cols + self.offset]
        return run.original_log_probs(hidden) if self.head == "original" else run.log_probs(hidden, targets)


PLL_RULES = (ScoreRule("pll", PLL), ScoreRule("pll-word", PLL_WORD))  # BERT's, the contract's default
