"""What every scoring method shares: the methods' names and which family has which (each family declares its
score_rules.ScoreRule's; the scorer batches by rule, never by name), the segments a text is cut into, the Runner (the
core's score_rules.PassRunner: a forward pass and the LM head in one precision, its bf16 / int8 copies made once) and
the batching helpers."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...config import ModelConfig
from ...data.tokenizer import Tokenizer, check_covers
from ...families import MaskplayModel, families, family_class
from ...nn.outputs import ModelOutput
from ...nn.score_rules import PLL, PLL_WORD, SUM, ScoreRule
from ...runtime.precision import Precision, quantize_int8
from .text import Encoded


class Method(str, Enum):
    """The built-in families' methods (the command line's and the API's names); a family may declare a rule of
    another name (method_names lists them all), which the scorer runs the same way."""

    AUTO = "auto"  # one-pass for T-TA, pll for BERT, causal for GPT
    ONE_PASS = "one-pass"
    PLL = "pll"
    PLL_WORD = "pll-word"
    CAUSAL = "causal"
    # XLNet: log p(piece i | [SOS], [EOS], pieces before it), the order [SOS], [EOS], then left to right (see
    # boundaries_first_order): what its pretraining shows a query, where plain causal hides [EOS]
    CAUSAL_BOUNDARIES = "causal-boundaries"
    DISCRIMINATOR = "discriminator"  # ELECTRA: log P(original) per piece, one pass
    FUSED = "fused"  # GPT-BERT: its causal and its (MNTP) PLL log-probability of each piece, summed


class Overflow(str, Enum):
    """What to do with a sentence longer than the model's positions."""

    ERROR = "error"  # a ValueError naming the sentence index and its length
    WINDOW = "window"  # overlapping windows, each piece scored (or, for embeddings, pooled) from one of them
    TRUNCATE = "truncate"  # embeddings only: keep the first pieces that fit
    MEMORY = "memory"  # scoring, XLNet causal only: consecutive segments with Transformer-XL memory (score.long)


def method_names() -> list[str]:
    """Every method a registered family declares, the built-in ones first, 'auto' first of all."""
    names = [m.value for m in Method]
    return names + sorted({n for cls in families() for n in cls.score_methods} - set(names))


def as_method(name: str) -> Method | str:
    """A built-in method's Method, another family's own method's name as it is."""
    return Method(name) if name in Method._value2member_map_ else name


def method_name(method: Method | str) -> str:
    """A method's name, built-in (a Method) or a family's own (a string)."""
    return str(getattr(method, "value", method))


def resolve_method(family: str, method: Method | str) -> Method | str:
    """The family's own score for 'auto' (the first of its score_methods), else the method if the family has it.
    UniLM is a BERT under a mask: a sentence has no separator, so its mask is bidirectional and its PLL is BERT's."""
    name = method_name(method)
    own = family_class(family).score_methods
    if name == Method.AUTO.value:
        return as_method(own[0])
    if name not in own:
        having = [cls.family for cls in families() if name in cls.score_methods]
        if not having:
            raise ValueError(f"{name!r} is not a valid Method; choose one of {method_names()}")
        raise ValueError(f"method {name!r} does not apply to a {family!r} model; it needs one of "
                         f"{having} (use method 'auto' for this model's natural score: {own[0]!r})")
    return as_method(name)


@dataclass(frozen=True)
class Segment:
    """One model input: [SOS] pieces[first:first+n] [EOS], scoring the pieces listed in `scored`
    (sentence-level piece indices; piece j sits at position j - first + 1)."""

    sentence: int
    ids: list[int]
    first: int
    scored: list[int]
    word_ids: list[int]

    def position(self, piece: int) -> int:
        return piece - self.first + 1


def window_owners(n: int, width: int, causal: bool) -> tuple[list[int], list[int]]:
    """Windows of `width` pieces over n > width pieces, advancing by half a window: their starts, and for every
    piece the start of the one window it is taken from - for a causal model the earliest window holding it (the
    most left context), otherwise the one where it sits furthest from both window edges (the earlier on a tie)."""
    stride = max(1, width // 2)
    starts = list(range(0, n - width, stride)) + [n - width]
    owner = []
    for j in range(n):
        holding = [s for s in starts if s <= j < s + width]
        if causal:
            owner.append(holding[0])
        else:
            owner.append(max(holding, key=lambda s: (min(j - s, s + width - 1 - j), -s)))
    return starts, owner


def pass_length(config: ModelConfig, max_length: int | None) -> int:
    """Tokens per pass, [SOS]/[EOS] included: `max_length`, or the model's max_position; one-line error outside
    3..max_position. A long-attention model (config.long, docs/guides/long-text.md) accepts up to max_position in one
    pass."""
    if max_length is None:
        return config.max_position
    if not 3 <= max_length <= config.max_position:
        raise ValueError(f"max_length must be 3..{config.max_position} (the model's positions), got {max_length}")
    return max_length


def make_segments(encoded: list[Encoded], sos: int, eos: int, max_position: int, overflow: Overflow,
                  causal: bool) -> list[Segment]:
    """A sentence that fits is one segment. A longer one, under Overflow.WINDOW, becomes windows of
    max_position - 2 pieces advancing by half a window, each framed by [SOS]/[EOS] (an approximation: a window
    that starts mid-sentence still begins with [SOS]). Each piece is scored in exactly one window: for a causal
    model the earliest window holding it (the most left context), otherwise the one where it sits furthest from
    both window edges (window_owners)."""
    width = max_position - 2
    if width < 1:
        raise ValueError(f"a model with {max_position} positions has no room for a piece between [SOS] and [EOS]")
    segments = []
    for index, enc in enumerate(encoded):
        n = len(enc)
        if n <= width:
            segments.append(Segment(index, [sos, *enc.ids, eos], 0, list(range(n)), enc.word_ids))
            continue
        if overflow is not Overflow.WINDOW:
            raise ValueError(f"sentence {index} has {n + 2} tokens with [SOS]/[EOS], more than the model's "
                             f"{max_position} positions; shorten it or score with overflow='window'")
        starts, owner = window_owners(n, width, causal)
        for s in starts:
            scored = [j for j in range(n) if owner[j] == s]
            if scored:
                segments.append(Segment(index, [sos, *enc.ids[s:s + width], eos], s, scored,
                                        enc.word_ids[s:s + width]))
    return segments


def check_compatible(model: MaskplayModel, tokenizer: Tokenizer, source: str | Path | None = None) -> None:
    """The tokenizer is the model's: the same vocabulary size (a HuggingFace table may be padded beyond the
    tokenizer, but the tokenizer must cover half of it at least: data.tokenizer.check_covers) and special ids.
    `source`: the model's directory, named in the error."""
    cfg, sp = model.config, tokenizer.special
    check_covers(tokenizer, cfg.vocab_size, str(source) if source is not None else "the model")
    pairs = {"vocab_size": (cfg.vocab_size, tokenizer.vocab_size), "pad": (cfg.pad_token_id, sp.pad),
             "sos": (cfg.sos_token_id, sp.sos), "eos": (cfg.eos_token_id, sp.eos),
             "mask": (cfg.mask_token_id, sp.mask)}
    if model.vocabulary_padded and tokenizer.vocab_size < cfg.vocab_size:  # a HuggingFace table padded beyond it
        del pairs["vocab_size"]
    bad = [f"{k}: model {a} vs tokenizer {b}" for k, (a, b) in pairs.items() if a != b]
    if bad:
        raise ValueError(f"model and tokenizer {tokenizer.source or '(in memory)'} do not match: {'; '.join(bad)}")


def check_mask_token(model: MaskplayModel, tokenizer: Tokenizer, rule: ScoreRule) -> None:
    """A rule that hides pieces (PLL, PLL-word, or a sum with one) needs the tokenizer's own mask token: a
    HuggingFace tokenizer without one has its end token in that role (Tokenizer.special.fallback), and a masked
    LM shown </s> or [SEP] in place of each piece would give scores that look right and are not."""

    def hides(r: ScoreRule) -> bool:
        return r.batching in (PLL, PLL_WORD) or (r.batching == SUM and any(hides(type(model).score_rule(p))
                                                                            for p in r.parts))

    if "mask" in tokenizer.special.fallback and hides(rule):
        raise ValueError(f"tokenizer {tokenizer.source or '(in memory)'} has no mask token ([MASK] or <mask>, nor a "
                         f"mask_token in tokenizer_config.json), which scoring with {rule.name} hides each piece "
                         "behind; give the model's tokenizer with its mask token")


class Runner:
    """The model's forward pass and LM head in one precision (maskplay.runtime.precision; the core's score_rules.PassRunner):
    fp32; bf16 end to end (a copy of the model with its parameters cast to bf16 once, here - the model keeps its
    fp32 weights);
    or bf16 autocast; or int8 (the encoder's linear layers in int8, precision.quantize_int8; the LM head's
    vocabulary projection in int8 too, int8_head: on a CPU without fast bf16 a bf16 or fp32 head would cost more
    than the whole int8 encoder saves, and where bf16 is fast (AMD EPYC, AVX-512 BF16) the int8 head still scores
    T-TA's one pass 1.23x faster than a bf16 one, as close to fp32). The bf16 and int8 copies are made on first use
    and reused while the model's weights stay the same."""

    def __init__(self, model: MaskplayModel, precision: Precision | str, temperature: float = 1.0) -> None:
        """temperature: the logits are divided by it before the softmax of log_probs (1: as trained)."""
        self.precision = Precision(precision)
        self.temperature = temperature
        self.model = _cached(model, "int8", quantize_int8) if self.precision is Precision.int8 else model
        self.head = self.model.head
        self.bf16_head = self.precision is Precision.bf16
        self.int8_head = None
        if self.bf16_head:
            self.bf16_model, self.head = _cached(model, "bf16", _bf16_copies)
        elif self.precision is Precision.int8:
            self.int8_head = _cached(model, "int8-head", _int8_head)

    def _autocast(self) -> Any:
        if self.precision is Precision.bf16_autocast:
            return torch.autocast(next(self.model.parameters()).device.type, dtype=torch.bfloat16)
        return nullcontext()

    def forward(self, *args: Any, **kwargs: Any) -> ModelOutput:
        if self.precision is Precision.bf16:
            if self.bf16_model.training != self.model.training:
                self.bf16_model.train(self.model.training)
            return self.bf16_model(*args, **kwargs)
        with self._autocast():
            return self.model(*args, **kwargs)

    def original_log_probs(self, hidden: Tensor) -> Tensor:
        """ELECTRA: log P(original) = log sigmoid(-replaced logit) from the discriminator head at hidden, fp32."""
        if self.bf16_head:
            logits = self.head(hidden.to(torch.bfloat16))
        else:
            with self._autocast():
                logits = self.head(hidden)
        return torch.nn.functional.logsigmoid(-logits.float())

    def log_probs(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """log p(targets[n]) from the LM head at hidden[n], fp32 (heads.LMHead.log_probs)."""
        if self.bf16_head:
            return self.head.log_probs(hidden.to(torch.bfloat16), self.bf16_model.embeddings.word.weight, targets,
                                       self.temperature)
        if self.int8_head is not None:
            return self.int8_head.log_probs(hidden, targets, self.temperature)
        with self._autocast():
            return self.head.log_probs(hidden, self.model.embeddings.word.weight, targets, self.temperature)


_COPIES: weakref.WeakKeyDictionary[MaskplayModel, dict[str, tuple[tuple[int, ...], Any]]] = \
    weakref.WeakKeyDictionary()


def _cached(model: MaskplayModel, kind: str, make: Callable[[MaskplayModel], Any]) -> Any:
    """make(model), made once and reused by later calls for as long as no parameter has changed (each in-place
    update, an optimizer step's included, bumps a tensor's version counter; replacing a parameter changes its
    data pointer). A model made under inference mode (an ELECTRA generator copied out while scoring) has inference
    tensors, which keep no version counter and cannot be updated in place outside inference mode: their data
    pointer alone is their key."""
    key = tuple(v for p in model.parameters() for v in (p.data_ptr(), -1 if p.is_inference() else p._version))
    copies = _COPIES.setdefault(model, {})
    if kind not in copies or copies[kind][0] != key:
        copies.pop(kind, None)  # free the stale copy before making the new one
        copies[kind] = (key, make(model))
    return copies[kind][1]


def resolve_precision(model: MaskplayModel, precision: Precision | str) -> Precision:
    """A Precision, with "auto" resolved for this model on this machine (maskplay.runtime.precision_probe: bf16 where
    the probe measures it faster than fp32, else fp32; never int8)."""
    if str(getattr(precision, "value", precision)) != "auto":
        return Precision(precision)
    from ...runtime.precision_probe import resolve

    return resolve("auto", next(model.parameters()).device, model.config, inference=True).precision


def _int8_head(model: MaskplayModel) -> Any:
    """The int8 vocabulary head over the model's own head transform, its projection the int8 copy's (the same
    quantisation of the same weights, made once)."""
    from .int8_head import Int8VocabularyHead

    int8_copy_head = getattr(_cached(model, "int8", quantize_int8), "head", None)
    projection = None if int8_copy_head is None else int8_copy_head._modules.get("int8_projection")
    return Int8VocabularyHead(model.head, model.embeddings.word.weight, projection)


def _bf16_copies(model: MaskplayModel) -> tuple[MaskplayModel, Any]:
    """A copy of the model with its parameters in bf16 (its buffers, such as rotary frequencies, as they are) and a
    bf16 copy of its LM head. A module, not functional_call over a dict of bf16 tensors: that swaps every
    parameter in and out on each call, about 1 ms a call for a mini model, as much as its whole forward pass on one
    sentence (the serving path's cost, docs/guides/serving.md)."""
    twin = copy.deepcopy(model)
    for p in twin.parameters():
        p.requires_grad_(False)
        p.data = p.data.to(torch.bfloat16)
    return twin, copy.deepcopy(model.head).to(torch.bfloat16)


def position_log_probs(runner: Runner, ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor,
                       rule: ScoreRule, targets: Tensor | None = None) -> Tensor:
    """log p(targets) (default: ids[rows, cols]) under the model by a one-pass `rule`, the head applied only at the
    outputs that predict those positions (the rule's offset: T-TA's position itself, GPT's one to the left, so cols
    must be >= 1 there). The forward pass computes no logits of its own (they are lazy). Log-softmax always runs
    in fp32."""
    if rows.numel() == 0:
        return torch.zeros(0, device=ids.device)
    targets = ids[rows, cols] if targets is None else targets
    return runner.model.score_positions(runner, ids, attention_mask, rows, cols, targets, rule)


def pad_rows(rows: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, :len(r)] = torch.tensor(r, dtype=torch.long)
    ids = ids.to(device)
    lengths = torch.tensor([len(r) for r in rows], device=device)
    return ids, torch.arange(width, device=device)[None, :] < lengths[:, None]


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _progress(items: list[Any], enabled: bool, desc: str) -> Any:
    """Batches with a progress bar on a terminal, plain periodic lines otherwise (maskplay.runtime.progress)."""
    from ...runtime.progress import track

    return track(items, desc=desc, unit="batch", enabled=enabled, leave=False)
