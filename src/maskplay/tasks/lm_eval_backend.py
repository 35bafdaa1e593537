"""maskplay models in lm-evaluation-harness (PyPI `lm-eval` 0.4.x, the optional extra `maskplay[lm-eval]`).

    maskplay lm-eval --model maskplay --model_args pretrained=tta-mini-wiki --tasks maskplay_pairs
    lm_eval.simple_evaluate(model=MaskplayLM("gpt-mini-wiki"), tasks=["maskplay_pairs"],
                            task_manager=TaskManager(include_path=TASKS_DIR, include_defaults=False))

Importing this module registers the model type `maskplay` with lm-eval (register()); the `maskplay lm-eval` command
imports it, the core never does. What each request means (docs/guides/lm-eval.md):

- loglikelihood(context, continuation): the sum of log p of the continuation's word pieces by the family's own
  score (its score_methods[0], or method=... in model_args), the context visible: GPT and XLNet (causal) the usual
  left-to-right sum, each piece given [SOS], the context and the pieces before it; T-TA one pass and BERT / UniLM
  PLL (Salazar et al. 2020), each piece given every other piece of context and continuation; ELECTRA sum log
  P(original) from its discriminator. The text is tokenized whole; the continuation is the pieces that end after
  the context's last character. is_greedy: every continuation piece is the argmax of its distribution (ELECTRA:
  P(original) > 1/2).
- loglikelihood_rolling(text): the same with an empty context: exactly maskplay.tasks.score.Scorer's sentence log-prob.
  A text longer than the model is scored in windows (Overflow.WINDOW: each piece once, causal families in the
  window that gives it the most left context, the others in the one where it sits most centred).
- generate_until(context, gen_kwargs): maskplay.tasks.decoding.generate (families whose can_generate is true), the
  output cut at the first `until` string; max_gen_toks, do_sample, temperature, top_k, top_p honoured.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

try:
    import lm_eval.models  # noqa: F401  # its built-ins first: it fills only a registry that lacks their names
    from lm_eval.api.model import LM
    from lm_eval.api.registry import model_registry
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("maskplay's lm-eval backend needs lm-eval: pip install 'maskplay[lm-eval]'") from err

from ..data.tokenizer import Tokenizer
from ..families import MaskplayModel
from ..runtime.devices import resolve_device
from .decoding import can_generate, generate, require_generative
from .score.passes import Method, Overflow, Runner, Segment, make_segments
from .score.scorer import Scorer, load_model_dir
from .score.text import Encoded, encode_texts

MODEL_NAME = "maskplay"
TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"  # the shipped task folder (--include_path)
GEN_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p", "seed")
LOG_HALF = math.log(0.5)


class _GreedyRunner(Runner):
    """A Runner that also records, for every log-probability it returns, whether the target is the argmax of its
    distribution (ELECTRA's discriminator: whether P(original) > 1/2), in the order it returns them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.greedy: list[bool] = []

    def log_probs(self, hidden: Tensor, targets: Tensor) -> Tensor:
        values = super().log_probs(hidden, targets)
        best = self.model.logits(hidden.float()).argmax(-1)
        self.greedy.extend((best == targets).tolist())
        return values

    def original_log_probs(self, hidden: Tensor) -> Tensor:
        values = super().original_log_probs(hidden)
        self.greedy.extend((values > LOG_HALF).tolist())
        return values


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[Encoded, int]:
    """context + continuation tokenized as one text, and the index of the continuation's first piece: the first
    piece that ends after the context's last character (a piece across the boundary belongs to the continuation)."""
    for what, value in (("context", context), ("continuation", continuation)):
        if not isinstance(value, str):
            raise ValueError(f"the {what} must be a str, got {type(value).__name__}")
    enc = encode_texts(tokenizer, [context + continuation])[0]
    cut = len(context)
    first = next((k for k, (_, end) in enumerate(enc.offsets) if end > cut), len(enc))
    return enc, first


def pair_segments(encoded: Sequence[tuple[Encoded, int]], sos: int, eos: int, max_length: int,
                  causal: bool) -> list[Segment]:
    """The segments that score every continuation piece once: [SOS] context continuation [EOS] when it fits, else
    the windows of make_segments (Overflow.WINDOW), each keeping only continuation pieces; segment.sentence is
    the request's index."""
    segments = []
    for index, (enc, first) in enumerate(encoded):
        if first >= len(enc):
            continue  # nothing to score: log p = 0
        for seg in make_segments([enc], sos, eos, max_length, Overflow.WINDOW, causal=causal):
            scored = [j for j in seg.scored if j >= first]
            if scored:
                segments.append(replace(seg, sentence=index, scored=scored))
    return segments


def pick_device(device: str | None) -> torch.device:
    """lm-eval's --device (cuda:0 by default): CUDA where this machine has it, else the CPU, with a note."""
    try:
        return resolve_device(device, what="device", default="cpu")
    except ValueError:
        if device is None or not str(device).startswith("cuda"):
            raise
        print(f"maskplay lm-eval: device {device} is not available on this machine; running on the CPU",
              file=sys.stderr)
        return torch.device("cpu")


def batch_rows(batch_size: int | str | None, max_batch_size: int | None) -> int:
    """Rows per forward pass: an integer batch_size as given; 'auto' / 'auto:N' (lm-eval's automatic sizing,
    which maskplay does not search) max_batch_size or 32."""
    if batch_size is None or (isinstance(batch_size, str) and batch_size.startswith("auto")):
        return int(max_batch_size or 32)
    try:
        rows = int(batch_size)
    except (TypeError, ValueError):
        raise ValueError(f"batch_size must be an integer or 'auto', got {batch_size!r}") from None
    if rows < 1:
        raise ValueError(f"batch_size must be at least 1, got {rows}")
    return rows


def cut_at(text: str, until: Sequence[str]) -> str:
    """text up to the first occurrence of any of the `until` strings."""
    ends = [text.find(stop) for stop in until if stop]
    ends = [end for end in ends if end >= 0]
    return text[:min(ends)] if ends else text


class MaskplayLM(LM):
    """An lm-eval model over a maskplay model directory or bundled name (`pretrained`; in Python also a
    MaskplayModel with its `tokenizer`). model_args: method
    (a maskplay.tasks.score Method; default auto, the family's own score), precision (auto, fp32, bf16, bf16-autocast,
    int8), max_length (tokens per pass), progress (true/false). lm-eval passes batch_size (rows per forward
    pass; 'auto' = max_batch_size or 32), max_batch_size and device (cuda:0 by default: CPU where CUDA is absent)."""

    def __init__(self, pretrained: str | MaskplayModel, method: str = "auto", precision: str = "auto",
                 batch_size: int | str | None = 32, max_batch_size: int | None = None, device: str | None = None,
                 max_length: int | None = None, progress: bool = True, tokenizer: Tokenizer | None = None,
                 **unknown: Any) -> None:
        super().__init__()
        if unknown:
            raise ValueError(f"model_args {sorted(unknown)} are not maskplay's; it takes pretrained, method, "
                             "precision, max_length, progress")
        if isinstance(pretrained, MaskplayModel):
            if tokenizer is None:
                raise ValueError("a model object needs its tokenizer: MaskplayLM(model, tokenizer=...)")
            model = pretrained.eval()
        else:
            if tokenizer is not None:
                raise ValueError("a model directory brings its own tokenizer; pass tokenizer= only with a model object")
            model, tokenizer = load_model_dir(str(pretrained))
        self._device = pick_device(device)
        self.scorer = Scorer(model, tokenizer, batch_size=batch_rows(batch_size, max_batch_size), device=self._device,
                             method=str(getattr(method, "value", method)), overflow=Overflow.WINDOW,
                             precision=str(precision), progress=bool(progress), max_length=max_length)
        self.model, self.tokenizer = self.scorer.model, tokenizer
        self.causal = self.scorer.rule.left_to_right
        self._generator: Any = None

    @property
    def method(self) -> Method:
        return self.scorer.method

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer.source or "maskplay")

    # ---- scoring ------------------------------------------------------------------------------------------

    def score_pairs(self, pairs: Sequence[tuple[str, str]], greedy: bool = True) -> list[tuple[float, bool]]:
        """(log p(continuation | context), is_greedy) for every (context, continuation), in order; an empty
        continuation (no pieces) gives (0.0, True)."""
        encoded = [encode_pair(self.tokenizer, context, continuation) for context, continuation in pairs]
        cfg = self.model.config
        segments = pair_segments(encoded, cfg.sos_token_id, cfg.eos_token_id, self.scorer.max_length, self.causal)
        made: list[Runner] = []
        found = self.scorer.segment_log_probs(segments, _GreedyRunner if greedy else Runner, made)
        # the last runner's flags follow the order returned (fused: the causal reading's argmax)
        flags = made[-1].greedy if greedy and made else [True] * len(found)
        if len(flags) != len(found):
            raise RuntimeError(f"{len(flags)} greedy flags for {len(found)} scored pieces")
        values: list[list[float]] = [[] for _ in pairs]
        is_greedy = [True] * len(pairs)
        for ((index, _), value), flag in zip(found, flags, strict=True):
            values[index].append(value)
            is_greedy[index] = is_greedy[index] and bool(flag)
        out = []
        for index, row in enumerate(values):
            if not all(math.isfinite(v) for v in row):
                raise ValueError(f"request {index} got a non-finite log-probability (damaged or diverged weights?)")
            out.append((math.fsum(row), is_greedy[index]))
        return out

    def loglikelihood(self, requests: list[Any]) -> list[tuple[float, bool]]:
        return self.score_pairs([tuple(req.args) for req in requests])

    def loglikelihood_rolling(self, requests: list[Any]) -> list[float]:
        return [value for value, _ in self.score_pairs([("", req.args[0]) for req in requests], greedy=False)]

    # ---- generation ---------------------------------------------------------------------------------------

    def generate_texts(self, contexts: Sequence[str], gen_kwargs: dict[str, Any]) -> list[str]:
        """maskplay.tasks.decoding.generate on each context with lm-eval's gen_kwargs, each output cut at `until`."""
        options = self._generation_options(gen_kwargs)
        until = options.pop("until")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the count of cut contexts is reported below, once
            out = generate(self._generation_model(), list(contexts), tokenizer=self.tokenizer,
                           batch_size=self.scorer.batch_size, progress=self.scorer.progress and len(contexts) > 1,
                           **options)
        if out.truncated:
            print(f"maskplay lm-eval: {out.truncated} of {len(contexts)} contexts cut from the left to fit the "
                  f"model's {self.model.config.max_position} positions", file=sys.stderr)
        return [cut_at(g.text or "", until) for g in out]

    def generate_until(self, requests: list[Any]) -> list[str]:
        require_generative(self.model)
        groups: dict[str, list[int]] = {}
        for k, req in enumerate(requests):
            groups.setdefault(repr(sorted((req.args[1] or {}).items())), []).append(k)
        results: list[str] = [""] * len(requests)
        for members in groups.values():
            texts = self.generate_texts([requests[k].args[0] for k in members], requests[members[0]].args[1] or {})
            for k, text in zip(members, texts, strict=True):
                results[k] = text
        return results

    def _generation_options(self, gen_kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(gen_kwargs) - set(GEN_KWARGS))
        if unknown:
            raise ValueError(f"gen_kwargs {unknown} are not supported by maskplay's generate; it takes {list(GEN_KWARGS)}")
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        frame = sum(len(part) for part in self.model.generation_frame(self.tokenizer))
        room = self.model.config.max_position - frame - 1  # at least one prompt piece must fit
        asked = int(gen_kwargs.get("max_gen_toks", 256))
        if asked > room:
            print(f"maskplay lm-eval: max_gen_toks={asked} is more than the model's {self.model.config.max_position} "
                  f"positions leave room for; generating at most {room}", file=sys.stderr)
        do_sample, temperature = gen_kwargs.get("do_sample"), _temperature(gen_kwargs.get("temperature"))
        if do_sample is None:  # as lm-eval's HF backend: a positive temperature alone asks for sampling
            do_sample = temperature is not None and temperature > 0
        temperature = 1.0 if temperature is None else temperature
        sample = bool(do_sample) and temperature > 0  # temperature 0 is greedy
        options: dict[str, Any] = {"until": until, "max_new_tokens": min(asked, room),
                                   "strategy": "sample" if sample else "greedy"}
        if sample:
            options.update(temperature=temperature, top_k=int(gen_kwargs.get("top_k") or 0),
                           top_p=float(gen_kwargs.get("top_p") or 1.0), seed=gen_kwargs.get("seed"))
        return options

    def _generation_model(self) -> Any:
        """The model in the scorer's precision: itself (fp32, bf16 autocast), a bf16 copy or an int8 copy."""
        if self._generator is None:
            self._generator = self.model
            if self.scorer.precision.value == "bf16":
                import copy

                self._generator = copy.deepcopy(self.model).to(torch.bfloat16).eval()
            elif self.scorer.precision.value == "int8":
                from ..runtime.precision import quantize_int8

                self._generator = quantize_int8(self.model)
        return self._generator

    @property
    def can_generate(self) -> bool:
        return can_generate(self.model)


def _temperature(value: Any) -> float | None:
    """gen_kwargs' temperature: a number >= 0 (0: greedy) or None. nan compared as not > 0 and so decoded
    greedily without a word; it is refused here, as a negative or non-numeric one is."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (number >= 0 and math.isfinite(number)):
        raise ValueError(f"gen_kwargs temperature must be a finite number >= 0 (0: greedy), got {value!r}")
    return number


def register() -> None:
    """Make `--model maskplay` known to lm-eval (idempotent)."""
    current = model_registry.get(MODEL_NAME, None) if MODEL_NAME in model_registry else None
    if current is None:
        model_registry.register(MODEL_NAME, target=MaskplayLM)
    elif current is not MaskplayLM:
        raise ValueError(f"lm-eval model type {MODEL_NAME!r} is already registered by {current!r}")


__all__ = ["MaskplayLM", "TASKS_DIR", "register"]

register()
