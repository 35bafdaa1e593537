"""The model's work behind the endpoints, through maskplay's library entry points: Scorer (per-piece
log-probabilities), Embedder (pooled vectors), decoding.generate (completions) and, for echo + logprobs, one
causal pass whose log-softmax gives every prompt token's log-probability and its top alternatives. Everything here
runs on the batcher's one model thread, a list of inputs at a time; the tokenizer's checks run before, per request
(check_text, frame_ids), so that a batch only holds inputs that fit."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...runtime.model_dir import resolve_model_dir
from ...runtime.precision import Precision, quantize_int8
from ..decoding import Generated, can_generate, default_stop_ids, generate
from ..score import Embedder, Pooling, Scorer, SentenceScore, load_model_dir, read_piece_counts
from ..score.embed import PIECE_COUNTS
from ..score.passes import Runner, pad_rows
from .errors import APIError
from .limits import Limits, windows_of


@dataclass(frozen=True)
class EmbedOptions:
    pooling: str = "mean"
    layer: int = -1
    normalize: bool = False
    diagonal_mask: bool = True
    static: bool = False
    overflow: str = "error"


@dataclass(frozen=True)
class GenOptions:
    """What must be equal for prompts to be decoded in one call (temperature 0 = greedy)."""

    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    echo_logprobs: int | None  # echo with logprobs: score the prompt (top alternatives: this many)
    logprobs: int | None  # generated tokens' logprobs (top alternatives: this many)


@dataclass
class Prompt:
    """One completion input: its ids with the family's frame, how many leading frame tokens the server added (not
    echoed), and the callback that streams its tokens (None: not streamed)."""

    ids: list[int]
    hidden: int
    on_token: Callable[[int], None] | None = None


@dataclass
class Completion:
    echo_logprobs: list[float | None] | None  # per prompt token (the hidden frame excluded)
    echo_top: list[dict[str, float] | None] | None
    generated: Generated | None
    gen_logprobs: list[float] | None
    gen_top: list[dict[str, float]] | None


class ModelService:
    def __init__(self, model_dir: str, device: torch.device, precision: Precision, max_tokens: int | None = None,
                 name: str | None = None, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        model, self.tokenizer = load_model_dir(model_dir)
        self.model = model.to(device).eval()
        self.name = name or Path(str(model_dir).rstrip("/")).name
        self.family = self.model.config.family
        self.max_position = self.model.config.max_position
        if max_tokens is not None and not 3 <= max_tokens:
            raise ValueError(f"--max-tokens must be at least 3 ([SOS], a piece, [EOS]), got {max_tokens}")
        self.max_tokens = min(max_tokens or self.max_position, self.max_position)
        self.scorer = Scorer(self.model, self.tokenizer, batch_size=64, precision=precision)
        counts = resolve_model_dir(model_dir) / PIECE_COUNTS
        piece_counts = read_piece_counts(counts, self.model.config.vocab_size) if counts.is_file() else None
        self.embedder = Embedder(self.model, self.tokenizer, precision=precision, piece_counts=piece_counts)
        self.precision = self.scorer.precision
        self.can_generate = can_generate(self.model)
        self.causal = bool(self.model.causal)
        self.generator_model = self._generation_copy(self.precision)
        self.prefix, self.suffix = (list(x) for x in self.model.generation_frame(self.tokenizer))
        self.stop_ids = default_stop_ids(self.model, self.tokenizer) if self.can_generate else ()

    def _generation_copy(self, precision: Precision) -> Any:
        if not can_generate(self.model) or precision in (Precision.fp32, Precision.bf16_autocast):
            return self.model
        if precision is Precision.bf16:
            return copy.deepcopy(self.model).to(torch.bfloat16).eval()
        return quantize_int8(self.model)

    # ---- checks, per request, before the queue --------------------------------------------------------------

    def count(self, texts: list[str]) -> list[int]:
        """Word pieces per text (no specials)."""
        return [len(e.ids) for e in self.tokenizer.backend.encode_batch(texts, add_special_tokens=False)]

    def check_texts(self, texts: list[str], param: str, overflow: str = "error") -> list[int]:
        """Word pieces per text (count); an empty text or one over the token limit (with [SOS]/[EOS]) is a 400
        naming its index and the limit."""
        counts = self.count(texts)
        for k, n in enumerate(counts):
            where = f"{param}[{k}]" if len(texts) > 1 else param
            if n == 0:
                raise APIError(400, f"{where} is empty (no word pieces): there is nothing to score or embed", param)
            if n + 2 > self.max_tokens and overflow == "error":
                raise APIError(400, f"{where} has {n + 2} tokens with [SOS]/[EOS], over the limit of "
                                    f"{self.max_tokens} ({self._limit_name()})", param, "context_length_exceeded")
        self._check_request_size(counts, param, overflow)
        return counts

    def _check_request_size(self, counts: list[int], param: str, overflow: str) -> None:
        total = sum(counts)
        if total > self.limits.pieces:
            raise APIError(400, f"{param}: {total} word pieces in one request, over the server's limit of "
                                f"{self.limits.pieces} per request (--max-request-pieces); send fewer or shorter "
                                "inputs per request", param, "request_too_large")
        if overflow == "window":
            windows = sum(windows_of(n, self.max_tokens) for n in counts)
            if windows > self.limits.windows:
                raise APIError(400, f"{param}: {windows} windows of {self.max_tokens} tokens in one request, over "
                                    f"the server's limit of {self.limits.windows} per request "
                                    "(--max-request-windows); send shorter inputs", param, "request_too_large")

    def check_generation(self, prompts: int, n: int, max_tokens: int) -> None:
        """max_tokens within the model's context (OpenAI's context_length_exceeded, param max_tokens), and
        prompts x n x max(max_tokens, 1) within --max-request-tokens: 5,000 prompts x n 16 would otherwise hold
        gigabytes of logits and the model for minutes."""
        shortest = len(self.prefix) + len(self.suffix) + 1  # a prompt of one piece in the family's frame
        if max_tokens + shortest > self.max_tokens:  # OpenAI's code for it, before the request's size is weighed
            raise APIError(400, f"max_tokens {max_tokens} is past the model's context: a prompt and its completion "
                                f"hold at most {self.max_tokens} tokens ({self._limit_name()}), so max_tokens can be "
                                f"at most {self.max_tokens - shortest}", "max_tokens", "context_length_exceeded")
        asked = prompts * n * max(max_tokens, 1)
        if asked > self.limits.generated:
            raise APIError(400, f"{prompts} prompts x n {n} x max_tokens {max_tokens} = {asked} tokens in one "
                                f"request, over the server's limit of {self.limits.generated} per request "
                                "(--max-request-tokens); send fewer prompts per request", "prompt",
                           "request_too_large")

    def _limit_name(self) -> str:
        return "the model's max_position" if self.max_tokens == self.max_position else "the server's --max-tokens"

    def frame_ids(self, prompt: str | list[int], max_new: int) -> Prompt:
        """A completion prompt as ids inside the family's frame (GPT: [SOS] ...; UniLM: [SOS] ... [SEP]); the
        frame's start is added when the prompt lacks it, and counted as hidden (not echoed)."""
        vocab = self.model.config.vocab_size
        if isinstance(prompt, str):
            body = self.tokenizer.backend.encode(prompt, add_special_tokens=False).ids
            if not body:
                raise APIError(400, "prompt is empty (no word pieces)", "prompt")
        else:
            bad = [i for i in prompt if not 0 <= i < vocab]
            if bad or not prompt:
                raise APIError(400, f"prompt token id {bad[0]} is out of range for a vocabulary of {vocab}" if bad
                               else "prompt is an empty list of token ids", "prompt")
            body = list(prompt)
        hidden = 0
        if body[:len(self.prefix)] != self.prefix:
            body, hidden = self.prefix + body, len(self.prefix)
        if self.suffix and body[-len(self.suffix):] != self.suffix:
            body = body + self.suffix
        if len(body) + max_new > self.max_tokens:
            raise APIError(400, f"the prompt has {len(body)} tokens and max_tokens is {max_new}: {len(body) + max_new}"
                                f", over the limit of {self.max_tokens} ({self._limit_name()})", "prompt",
                           "context_length_exceeded")
        return Prompt(body, hidden)

    # ---- the work, a batch at a time (the model's thread) ---------------------------------------------------

    def score(self, texts: list[str]) -> list[SentenceScore]:
        return self.scorer.score(texts)

    def embedding_width(self, static: bool) -> int:
        cfg = self.model.config
        return cfg.embedding_width if static else cfg.hidden_size

    def embed(self, texts: list[str], options: EmbedOptions) -> list[np.ndarray]:
        vectors = self.embedder.encode(texts, pooling=Pooling(options.pooling), layer=options.layer,
                                       diagonal_mask=options.diagonal_mask, normalize=options.normalize,
                                       batch_size=64, overflow=options.overflow, static=options.static,
                                       max_length=self.max_tokens)
        return list(vectors)

    def complete(self, prompts: list[Prompt], options: GenOptions) -> list[Completion]:
        echo = [None] * len(prompts)
        if options.echo_logprobs is not None:
            echo = self._echo([p.ids for p in prompts], options.echo_logprobs)
        generated: list[Generated | None] = [None] * len(prompts)
        if options.max_tokens > 0:
            streams = [p.on_token for p in prompts]

            def on_token(index: int, token: int) -> None:
                if streams[index] is not None:
                    streams[index](token)

            greedy = options.temperature == 0
            generated = list(generate(
                self.generator_model, [p.ids for p in prompts], tokenizer=self.tokenizer,
                max_new_tokens=options.max_tokens, strategy="greedy" if greedy else "sample",
                temperature=1.0 if greedy else options.temperature, top_p=options.top_p, seed=options.seed,
                stop_ids=self.stop_ids, batch_size=len(prompts), output_logits=options.logprobs is not None,
                on_token=on_token if any(streams) else None))
        out = []
        for p, (lps, tops), g in zip(prompts, [e if e is not None else (None, None) for e in echo], generated,
                                     strict=True):
            gen_lps, gen_top = self._generated_logprobs(g, options.logprobs)
            if g is not None and g.logits is not None:  # (steps, vocab) a row: not kept while the job runs on
                g = dataclasses.replace(g, logits=None)
            if lps is not None:
                lps, tops = lps[p.hidden:], tops[p.hidden:]
            out.append(Completion(lps, tops, g, gen_lps, gen_top))
        return out

    def _echo(self, rows: list[list[int]], top: int) -> list[tuple[list[float | None], list[dict | None]]]:
        """Each row's log p(token i | tokens before it) for i >= 1 (None for the first) and the top alternatives
        at each position, from one causal pass over the padded batch."""
        if not self.causal:
            raise APIError(400, f"echo with logprobs scores the prompt left to right; a {self.family!r} model is not "
                                "causal (use POST /v1/score for this model's own scores)", "echo")
        ids, attn = pad_rows(rows, self.model.config.pad_token_id, next(self.model.parameters()).device)
        with torch.inference_mode():
            hidden = Runner(self.model, self.precision).forward(ids, attention_mask=attn).last_hidden_state
            out = []
            for row, toks in enumerate(rows):
                log_probs = self.model.logits(hidden[row, :len(toks) - 1].float()).float().log_softmax(-1)
                target = torch.tensor(toks[1:], device=log_probs.device)
                values = [None, *log_probs.gather(1, target[:, None])[:, 0].tolist()]
                tops = [None, *self._top(log_probs, top)] if top else [None] * len(toks)
                out.append((values, tops))
        return out

    def _top(self, log_probs: torch.Tensor, k: int) -> list[dict[str, float]]:
        values, index = log_probs.topk(min(k, log_probs.shape[-1]), dim=-1)
        token = self.tokenizer.backend.id_to_token
        return [{token(i): v for i, v in zip(ix, vs, strict=True)}
                for ix, vs in zip(index.tolist(), values.tolist(), strict=True)]

    def _generated_logprobs(self, g: Generated | None, top: int | None) -> tuple[list[float] | None, list | None]:
        """The generated tokens' log p under the model's own (untempered) distribution, and the top alternatives;
        the stop token that ended the row included (as vLLM does: lm-eval's echo request reads its slot)."""
        if g is None or top is None or g.logits is None or not len(g.logits):
            return None, None
        chosen = [*g.token_ids, *([g.stop_id] if g.stop_id is not None else [])]
        log_probs = g.logits[:len(chosen)].float().log_softmax(-1)
        values = log_probs.gather(1, torch.tensor(chosen, device=log_probs.device)[:, None])[:, 0].tolist()
        if not all(math.isfinite(v) for v in values):
            raise ValueError("the model gave a non-finite log-probability (damaged weights?)")
        return values, self._top(log_probs, top) if top else [{} for _ in chosen]

    # ---- the tokenizer routes -----------------------------------------------------------------------------

    def tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        body = self.tokenizer.backend.encode(text, add_special_tokens=False).ids
        return [*self.prefix, *body, *self.suffix] if add_special_tokens else list(body)

    def detokenize(self, ids: list[int]) -> str:
        vocab = self.model.config.vocab_size
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise APIError(400, f"token id {bad[0]} is out of range for a vocabulary of {vocab}", "tokens")
        return self.tokenizer.backend.decode(ids, skip_special_tokens=False) if ids else ""

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.backend.id_to_token(token_id)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def tokenizer_info(self) -> dict[str, Any]:
        s, piece = self.tokenizer.special, self.tokenizer.backend.id_to_token
        return {"tokenizer_class": "WordPiece", "eos_token": piece(s.eos), "bos_token": piece(s.sos),
                "pad_token": piece(s.pad), "unk_token": piece(s.unk), "mask_token": piece(s.mask),
                "model_max_length": self.max_tokens, "vocab_size": self.tokenizer.vocab_size,
                "add_special_tokens_frame": {"prefix": self.prefix, "suffix": self.suffix}}

    def method(self) -> str:
        return self.scorer.rule.name

    def replaced(self) -> bool:
        return self.scorer.rule.head == "original"  # ELECTRA's discriminator: P(replaced), not log p
