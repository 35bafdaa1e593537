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
  each other (docs/SCORING.md).
- ELECTRA (method discriminator): log P(original) of every piece from the discriminator, in one pass per batch
  of sentences: the probability that the token was not replaced, so the sentence score is the sum of
  log P(original). pll and pll-word on an ELECTRA model run on its generator (the generator's PLL).

pll and pll-word also run on T-TA (copies through the same code path); plain pll there equals one-pass.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call

from ..config import ModelConfig
from ..families import MaskplayModel, families, family_class
from ..model_dir import resolve_model_dir
from ..precision import Precision, quantize_int8
from ..tokenizer import Tokenizer, load_tokenizer
from .text import Encoded, encode_texts, require_nonempty


class Method(str, Enum):
    AUTO = "auto"  # one-pass for T-TA, pll for BERT, causal for GPT
    ONE_PASS = "one-pass"
    PLL = "pll"
    PLL_WORD = "pll-word"
    CAUSAL = "causal"
    # XLNet: log p(piece i | [SOS], [EOS], pieces before it), the order [SOS], [EOS], then left to right (see
    # boundaries_first_order): what its pretraining shows a query, where plain causal hides [EOS]
    CAUSAL_BOUNDARIES = "causal-boundaries"
    DISCRIMINATOR = "discriminator"  # ELECTRA: log P(original) per piece, one pass


class Overflow(str, Enum):
    """What to do with a sentence longer than the model's positions."""

    ERROR = "error"  # a ValueError naming the sentence index and its length
    WINDOW = "window"  # overlapping windows, each piece scored (or, for embeddings, pooled) from one of them
    TRUNCATE = "truncate"  # embeddings only: keep the first pieces that fit
    MEMORY = "memory"  # scoring, XLNet causal only: consecutive segments with Transformer-XL memory (score.long)


def resolve_method(family: str, method: Method | str) -> Method:
    """The family's own score for 'auto' (the first of its score_methods), else the method if the family has it.
    UniLM is a BERT under a mask: a sentence has no separator, so its mask is bidirectional and its PLL is BERT's."""
    method = Method(method)
    own = family_class(family).score_methods
    if method is Method.AUTO:
        return Method(own[0])
    if method.value not in own:
        having = [cls.family for cls in families() if method.value in cls.score_methods]
        raise ValueError(f"method {method.value!r} does not apply to a {family!r} model; it needs one of "
                         f"{having} (use method 'auto' for this model's natural score: {own[0]!r})")
    return method


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
    3..max_position. A long-attention model (config.long, docs/LONG_TEXT.md) accepts up to max_position in one pass."""
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


def check_compatible(model: MaskplayModel, tokenizer: Tokenizer) -> None:
    cfg, sp = model.config, tokenizer.special
    pairs = {"vocab_size": (cfg.vocab_size, tokenizer.vocab_size), "pad": (cfg.pad_token_id, sp.pad),
             "sos": (cfg.sos_token_id, sp.sos), "eos": (cfg.eos_token_id, sp.eos),
             "mask": (cfg.mask_token_id, sp.mask)}
    bad = [f"{k}: model {a} vs tokenizer {b}" for k, (a, b) in pairs.items() if a != b]
    if bad:
        raise ValueError(f"model and tokenizer {tokenizer.source or '(in memory)'} do not match: {'; '.join(bad)}")


def load_model_dir(directory: str | Path) -> tuple[MaskplayModel, Tokenizer]:
    """A model directory as the trainer exports it: config.json + model.safetensors + tokenizer.json; or a
    bundled model's name (e.g. "tta-mini-wiki") or a hub id, see model_dir.resolve_model_dir."""
    directory = resolve_model_dir(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory {directory} not found")
    if not (directory / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{directory / 'tokenizer.json'} not found: a model directory needs config.json, "
                                "model.safetensors and tokenizer.json")
    model = MaskplayModel.from_pretrained(directory).eval()
    tokenizer = load_tokenizer(directory / "tokenizer.json")
    check_compatible(model, tokenizer)
    return model, tokenizer


class Runner:
    """The model's forward pass and LM head in one precision (maskplay.precision): fp32; bf16 end to end (the
    parameters cast to bf16 once, here, and used through functional_call - the model keeps its fp32 weights);
    or bf16 autocast; or int8 (the encoder's linear layers in int8, precision.quantize_int8; the LM head in
    bf16 where this CPU runs bf16 natively, else in fp32: an emulated bf16 head would cost more than the whole
    int8 encoder saves). The bf16 and int8 copies are made on first use and reused while the model's weights stay
    the same."""

    def __init__(self, model: MaskplayModel, precision: Precision | str) -> None:
        self.precision = Precision(precision)
        self.model = _cached(model, "int8", quantize_int8) if self.precision is Precision.int8 else model
        self.head = self.model.head
        self.bf16_head = self.precision is Precision.bf16 or (self.precision is Precision.int8 and _fast_bf16(model))
        if self.bf16_head:
            self.params, self.head = _cached(model, "bf16", _bf16_copies)

    def _autocast(self) -> Any:
        if self.precision is Precision.bf16_autocast:
            return torch.autocast(next(self.model.parameters()).device.type, dtype=torch.bfloat16)
        return nullcontext()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.precision is Precision.bf16:
            return functional_call(self.model, self.params, args=args, kwargs=kwargs, tie_weights=True, strict=False)
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
            return self.head.log_probs(hidden.to(torch.bfloat16), self.params["embeddings.word.weight"], targets)
        with self._autocast():
            return self.head.log_probs(hidden, self.model.embeddings.word.weight, targets)


_COPIES: weakref.WeakKeyDictionary[MaskplayModel, dict[str, tuple[tuple[int, ...], Any]]] = \
    weakref.WeakKeyDictionary()


def _cached(model: MaskplayModel, kind: str, make: Callable[[MaskplayModel], Any]) -> Any:
    """make(model), made once and reused by later calls for as long as no parameter has changed (each in-place
    update, an optimizer step's included, bumps a tensor's version counter; replacing a parameter changes its
    data pointer)."""
    key = tuple(v for p in model.parameters() for v in (p.data_ptr(), p._version))
    copies = _COPIES.setdefault(model, {})
    if kind not in copies or copies[kind][0] != key:
        copies.pop(kind, None)  # free the stale copy before making the new one
        copies[kind] = (key, make(model))
    return copies[kind][1]


def resolve_precision(model: MaskplayModel, precision: Precision | str) -> Precision:
    """A Precision, with "auto" resolved for this model on this machine (maskplay.precision_probe: bf16 where
    the probe measures it faster than fp32, else fp32; never int8)."""
    if str(getattr(precision, "value", precision)) != "auto":
        return Precision(precision)
    from ..precision_probe import resolve

    return resolve("auto", next(model.parameters()).device, model.config, inference=True).precision


def _fast_bf16(model: MaskplayModel) -> bool:
    """Whether this machine runs the model's bf16 matmuls faster than fp32 (the cached precision probe; CUDA:
    when the GPU supports bf16)."""
    from ..precision_probe import resolve

    device = next(model.parameters()).device
    return resolve("auto", device, model.config, inference=True).precision is Precision.bf16


def _bf16_copies(model: MaskplayModel) -> tuple[dict[str, Tensor], Any]:
    """bf16 copies of the model's parameters and of its LM head."""
    params = {name: p.detach().to(torch.bfloat16) for name, p in model.named_parameters()}
    return params, copy.deepcopy(model.head).to(torch.bfloat16)


def position_log_probs(runner: Runner, ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor,
                       targets: Tensor | None = None, boundaries_first: bool = False) -> Tensor:
    """log p(targets) (default: ids[rows, cols]) under the model, the LM head applied only at those positions:
    for T-TA and BERT the head reads the output at the position itself, for GPT the output one position to the
    left (so cols must be >= 1 there). PLL passes the true tokens as targets, its ids holding [MASK] there.
    The forward pass computes no logits of its own (they are lazy). Log-softmax always runs in fp32."""
    if rows.numel() == 0:
        return torch.zeros(0, device=ids.device)
    targets = ids[rows, cols] if targets is None else targets
    return runner.model.score_positions(runner, ids, attention_mask, rows, cols, targets, boundaries_first)


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


class Scorer:
    """Score sentences with a maskplay model. The model is put in eval mode (and moved to `device` if given).

    >>> scorer = Scorer.from_pretrained("runs/tta/export")
    >>> [s.log_prob for s in scorer.score(["the cat sat on the mat ."])]
    """

    def __init__(self, model: MaskplayModel, tokenizer: Tokenizer, batch_size: int = 32,
                 device: str | torch.device | None = None, method: Method | str = Method.AUTO,
                 overflow: Overflow | str = Overflow.ERROR, precision: Precision | str = Precision.fp32,
                 progress: bool = False, segment_tokens: int | None = None,
                 memory_tokens: int | None = None, max_length: int | None = None) -> None:
        """overflow='memory' (XLNet, method causal; maskplay.score.long): a text of more than `segment_tokens`
        tokens with [SOS]/[EOS] (default: the model's max_position) is scored in consecutive segments of that many
        tokens, each reading the memory of the last `memory_tokens` tokens before it (default: xlnet.mem_len when
        the model sets one, else 3 segments). `max_length`: tokens per pass with [SOS]/[EOS] (default and most: the
        model's max_position); a longer text goes to `overflow` (windows of max_length - 2 pieces)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        check_compatible(model, tokenizer)
        self.overflow = Overflow(overflow)
        if self.overflow is Overflow.TRUNCATE:
            raise ValueError("overflow='truncate' would score part of a sentence as if it were all of it; "
                             "use 'error' or 'window' for scoring")
        from .long import check_memory, check_memory_options

        check_memory_options(self.overflow, segment_tokens, memory_tokens)
        self.method = resolve_method(model.config.family, method)
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
                                  self.overflow, causal=self.method in (Method.CAUSAL, Method.CAUSAL_BOUNDARIES))]
        results = [[math.nan] * len(enc) for enc in encoded]
        windows = [0] * len(encoded)
        with torch.inference_mode():
            if long:
                from .long import memory_log_probs

                found, counts = memory_log_probs(Runner(self.model, self.precision), [(k, encoded[k]) for k in long],
                                                 self.segment_tokens, self.memory_tokens, self.batch_size,
                                                 progress=self.progress)
                for (sentence, piece), value in found:
                    results[sentence][piece] = value
                for k, count in counts.items():
                    windows[k] = count
            if self.method in (Method.PLL, Method.PLL_WORD):
                from .pll import pll_log_probs

                found = pll_log_probs(Runner(self._masked_lm(), self.precision), segments,
                                      word_l2r=self.method is Method.PLL_WORD, batch_size=self.batch_size,
                                      progress=self.progress)
            else:
                found = self._one_pass(Runner(self.model, self.precision), segments)
            for (sentence, piece), value in found:
                results[sentence][piece] = value
        for seg in segments:
            windows[seg.sentence] += 1
        out = []
        for k, (enc, values, n_windows) in enumerate(zip(encoded, results, windows, strict=True)):
            if not all(math.isfinite(v) for v in values):  # nan is also the mark of a piece left unscored
                raise ValueError(f"sentence {k} got a non-finite log-probability: the model gives nan or inf "
                                 "(damaged or diverged weights?)")
            out.append(SentenceScore(enc.text, enc.tokens, enc.ids, values, enc.word_ids, enc.offsets,
                                     self.method.value, n_windows))
        return out

    def _masked_lm(self) -> MaskplayModel:
        """The model PLL runs on: the model itself, or an ELECTRA model's generator."""
        return self.model.masked_lm(lambda kind, make: _cached(self.model, kind, make))

    def _one_pass(self, runner: Runner, segments: list[Segment]) -> list[tuple[tuple[int, int], float]]:
        """T-TA, GPT and ELECTRA's discriminator: every scored piece of a batch of segments in one forward pass."""
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
                                        torch.tensor(cols, device=self.device),
                                        boundaries_first=self.method is Method.CAUSAL_BOUNDARIES).tolist()
            found.extend(zip(keys, values, strict=True))
        return found


def _progress(items: list[Any], enabled: bool, desc: str) -> Any:
    """Batches with a progress bar on a terminal, plain periodic lines otherwise (maskplay.progress)."""
    from ..progress import track

    return track(items, desc=desc, unit="batch", enabled=enabled, leave=False)
