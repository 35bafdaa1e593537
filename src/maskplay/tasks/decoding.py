"""Text generation, a task: greedy, beam search and sampling, for every family that can generate (the family
contract's hooks, maskplay.nn.generation_hooks: `prefill` once, then one `step` per token over a key/value cache).

The uncached reference path (use_cache=False) recomputes the whole sequence, prompt and generated tokens, with
one prefill per step; the tests hold the cached path to it. compile=True decodes over a preallocated cache with
the one-token step compiled (maskplay.nn.static_decode)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..nn.generation_hooks import Generative, can_generate, generating_families, require_generative
from ..nn.heads import sample_rows
from ..nn.static_decode import static_step
from ..runtime.progress import Progress

__all__ = ["STRATEGIES", "GenerationConfig", "Generated", "GenerationOutput", "TokenCallback", "can_generate",
           "default_stop_ids", "filter_logits", "generate", "generating_families", "require_generative"]

STRATEGIES = ("greedy", "beam", "sample")
TokenCallback = Callable[[int, int], None]  # (input index, token id), as each token is chosen


# ---- options and results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationConfig:
    """The options of generate(). length_penalty: beam search ranks a finished hypothesis by sum log p /
    (generated tokens ** length_penalty) (> 0 favours longer outputs, 0 ranks by the sum alone).
    early_stopping: beam search stops an input once it has num_beams finished hypotheses; otherwise it goes on
    while a running beam could still beat the worst of them. temperature / top_k / top_p apply to sampling
    only (top_k 0 and top_p 1 switch them off). stop_ids: tokens that end a row (None: the model's [EOS]).
    compile: decode over a preallocated cache with the one-token step compiled (torch.compile on a CPU, a CUDA
    graph on a GPU; maskplay.nn.static_decode): the same tokens, faster once compiled (the first call of a shape
    compiles for seconds on a CPU)."""

    max_new_tokens: int = 32
    strategy: str = "greedy"
    num_beams: int = 4
    length_penalty: float = 1.0
    early_stopping: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_ids: tuple[int, ...] | None = None
    use_cache: bool = True
    compile: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.compile and (self.strategy == "beam" or not self.use_cache):
            raise ValueError("compile (a static cache and a compiled decode step) works with greedy decoding and "
                             "sampling over the cache, not with beam search or use_cache=False")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be at least 1, got {self.num_beams}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a positive number, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")
        if not math.isfinite(self.length_penalty):
            raise ValueError(f"length_penalty must be a finite number, got {self.length_penalty}")


@dataclass
class Generated:
    """One input's output. token_ids: the generated tokens, the stop token excluded (stop_id says which ended
    it). finish_reason: "stop" (a stop token), "length" (max_new_tokens) or "empty" (an empty input, nothing
    generated). truncated: prompt pieces dropped from the left to fit the model. log_prob: sum of log p of the
    generated tokens, stop token included, under the model's own (untempered) distribution; score: what the
    strategy ranked by (beam search: the length-normalised sum; otherwise log_prob). logits (output_logits):
    the raw logits each token was chosen from, (steps, V), or (steps, num_beams, V) for beam search."""

    token_ids: list[int] = field(default_factory=list)
    text: str | None = None
    finish_reason: str = "length"
    truncated: int = 0
    log_prob: float = 0.0
    score: float = 0.0
    stop_id: int | None = None
    logits: Tensor | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "token_ids": self.token_ids, "finish_reason": self.finish_reason,
                               "truncated": self.truncated, "log_prob": self.log_prob, "score": self.score}
        if self.text is None:
            del out["text"]
        return out


@dataclass
class GenerationOutput:
    """One Generated per input, in input order; `truncated` counts the inputs whose prompt was cut."""

    generations: list[Generated]
    truncated: int = 0

    def __len__(self) -> int:
        return len(self.generations)

    def __getitem__(self, index: int) -> Generated:
        return self.generations[index]

    def __iter__(self):  # noqa: ANN204
        return iter(self.generations)

    @property
    def texts(self) -> list[str | None]:
        return [g.text for g in self.generations]


# ---- logits processing ------------------------------------------------------------------------------------


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """fp32 logits / temperature with every token outside the top k and outside the nucleus set to -inf. The
    nucleus is the smallest set of most likely tokens whose probability reaches top_p (the token that crosses
    it is kept, and always at least one token), as HuggingFace's TopPLogitsWarper; top-k applies first."""
    logits = logits.float() / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # probability of the tokens ranked above
        drop = before >= top_p
        drop[..., 0] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


# ---- decoding ---------------------------------------------------------------------------------------------


class _Cached:
    """Prefill once, then one step per token."""

    def __init__(self, model: Generative, ids: Tensor, mask: Tensor, types: Tensor | None, steps: int) -> None:
        self.model = model
        self.cache, self.first = model.prefill(ids, mask, types)
        if hasattr(self.cache, "reserve"):
            self.cache.reserve(steps)

    def advance(self, tokens: Tensor, alive: Tensor) -> Tensor:
        return self.model.step(tokens[:, None], self.cache, alive[:, None])

    def reorder(self, index: Tensor) -> None:
        self.cache.reorder(index)


class _Static:
    """Prefill once, then the compiled (or graph-captured) step over a static cache (maskplay.nn.static_decode).
    With `greedy` (on a CPU) a step returns its greedy choice, (tokens, log-probabilities), not its logits."""

    def __init__(self, model: Generative, ids: Tensor, mask: Tensor, types: Tensor | None, steps: int,
                 greedy: bool = False) -> None:
        cache, self.first = model.prefill(ids, mask, types)
        self.step = static_step(model, ids.shape[0], cache.length + max(steps, 1), ids.device,
                                cache.values[0].dtype, greedy)
        self.step.load(cache)

    def advance(self, tokens: Tensor, alive: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return self.step(tokens, alive)


class _Recomputed:
    """The uncached reference: every step recomputes the whole sequence (prompt + generated) with prefill; the
    generated tokens get the family's `generated_token_type`."""

    def __init__(self, model: Generative, ids: Tensor, mask: Tensor, types: Tensor | None, steps: int) -> None:
        self.model, self.ids, self.mask = model, ids, mask.bool()
        self.segment = model.generated_token_type
        self.types = types if types is not None or self.segment is None else torch.zeros_like(ids)
        self.first = model.prefill(self.ids, self.mask, self.types)[1]

    def advance(self, tokens: Tensor, alive: Tensor) -> Tensor:
        self.ids = torch.cat([self.ids, tokens[:, None]], 1)
        self.mask = torch.cat([self.mask, alive[:, None]], 1)
        if self.types is not None:
            self.types = torch.cat([self.types, torch.full_like(tokens[:, None], self.segment or 0)], 1)
        return self.model.prefill(self.ids, self.mask, self.types)[1]

    def reorder(self, index: Tensor) -> None:
        self.ids, self.mask = self.ids[index], self.mask[index]
        if self.types is not None:
            self.types = self.types[index]


def _pad(rows: list[list[int]], pad_id: int, side: str, device: torch.device) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for k, r in enumerate(rows):
        cut = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[k, cut] = torch.tensor(r, dtype=torch.long)
        mask[k, cut] = True
    return ids.to(device), mask.to(device)


def _decode_batch(model: Generative, prompts: list[list[int]], types: list[list[int]] | None, cfg: GenerationConfig,
                  stop_ids: set[int], generator: torch.Generator | None, padding_side: str, output_logits: bool,
                  on_token: Callable[[int, int], None] | None) -> list[Generated]:
    device = _device(model)
    pad_id = model.config.pad_token_id
    ids, mask = _pad(prompts, pad_id, padding_side, device)
    type_ids = None if types is None else _pad(types, 0, padding_side, device)[0]
    if cfg.compile:  # greedy without the logits kept: the compiled step chooses the tokens itself
        decoder = _Static(model, ids, mask, type_ids, cfg.max_new_tokens,
                          greedy=cfg.strategy == "greedy" and not output_logits)
    else:
        decoder = (_Cached if cfg.use_cache else _Recomputed)(model, ids, mask, type_ids, cfg.max_new_tokens)
    if cfg.strategy == "beam":
        return _beam_search(decoder, len(prompts), cfg, stop_ids, pad_id, device, output_logits)
    B = len(prompts)
    out = [Generated() for _ in range(B)]
    recorded: list[Tensor] = []
    alive = torch.ones(B, dtype=torch.bool, device=device)
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    logits, choice = decoder.first, None
    for step in range(cfg.max_new_tokens):
        if choice is not None:  # the step's own greedy choice (_Static with greedy)
            tokens, chosen = choice[0], choice[1].tolist()
        else:
            scores = logits.float()  # argmax and reductions in fp32: bf16's are several times slower on a CPU
            if output_logits:
                recorded.append(scores)
            if cfg.strategy == "sample":
                probs = filter_logits(scores, cfg.temperature, cfg.top_k, cfg.top_p).softmax(-1)
                tokens = sample_rows(probs, torch.rand(B, generator=generator, device=device))
            else:
                tokens = scores.argmax(-1)
            chosen = scores.log_softmax(-1).gather(1, tokens[:, None])[:, 0].tolist()
        for row, (token, running) in enumerate(zip(tokens.tolist(), alive.tolist(), strict=True)):
            if not running:
                continue
            out[row].log_prob += chosen[row]
            if token in stop_ids:
                out[row].finish_reason, out[row].stop_id = "stop", token
            else:
                out[row].token_ids.append(token)
                if on_token is not None:
                    on_token(row, token)
        alive &= ~torch.isin(tokens, stops)
        if not bool(alive.any()) or step == cfg.max_new_tokens - 1:
            break
        following = decoder.advance(tokens.masked_fill(~alive, pad_id), alive)
        logits, choice = (None, following) if isinstance(following, tuple) else (following, None)
    for row, g in enumerate(out):
        g.score = g.log_prob
        if output_logits:
            g.logits = torch.stack([r[row] for r in recorded]) if recorded else torch.zeros(0)
    return out


def _beam_search(decoder: _Cached | _Recomputed, B: int, cfg: GenerationConfig, stop_ids: set[int], pad_id: int,
                 device: torch.device, output_logits: bool) -> list[Generated]:
    """Beam search over num_beams beams per input. A candidate ending in a stop token becomes a finished
    hypothesis (if it ranks among the num_beams best candidates of its step); the others continue. Hypotheses
    are ranked by sum log p / (generated tokens, stop token included) ** length_penalty."""
    K = cfg.num_beams
    decoder.reorder(torch.arange(B, device=device).repeat_interleave(K))
    logits = decoder.first.repeat_interleave(K, 0)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand the first only
    beams: list[list[int]] = [[] for _ in range(B * K)]
    finished: list[list[tuple[float, float, list[int], int | None]]] = [[] for _ in range(B)]
    done = [False] * B
    recorded: list[Tensor] = []

    def normalised(total: float, length: int) -> float:
        return total / (max(length, 1) ** cfg.length_penalty)

    for step in range(cfg.max_new_tokens):
        if output_logits:
            recorded.append(logits.float().view(B, K, -1))
        log_probs = logits.float().log_softmax(-1)
        V = log_probs.shape[-1]
        candidates = (scores.view(-1, 1) + log_probs).view(B, K * V)
        top_scores, top_index = candidates.topk(min(2 * K, K * V), dim=1)
        top_scores, top_index = top_scores.tolist(), top_index.tolist()
        next_rows, next_tokens, next_scores = [], [], []
        for b in range(B):
            chosen: list[tuple[int, int, float]] = []
            if not done[b]:
                for rank, (total, flat) in enumerate(zip(top_scores[b], top_index[b], strict=True)):
                    if total == float("-inf"):
                        break
                    beam, token = divmod(flat, V)
                    if token in stop_ids:
                        if rank < K:  # only a stop that ranks among the best K becomes a hypothesis
                            tokens = beams[b * K + beam]
                            finished[b].append((normalised(total, step + 1), total, list(tokens), token))
                        continue
                    chosen.append((beam, token, total))
                    if len(chosen) == K:
                        break
                done[b] = _beam_done(finished[b], chosen, K, cfg, step + 1, normalised)
            if done[b]:
                chosen = []
            while len(chosen) < K:  # a finished input (or too few candidates): dead beams carrying padding
                chosen.append((0, pad_id, float("-inf")))
            for beam, token, total in chosen:
                next_rows.append(b * K + beam)
                next_tokens.append(token)
                next_scores.append(total)
        if all(done):
            break
        rows = torch.tensor(next_rows, device=device)
        beams = [beams[r] + [t] for r, t in zip(next_rows, next_tokens, strict=True)]
        scores = torch.tensor(next_scores, device=device).view(B, K)
        if step == cfg.max_new_tokens - 1:
            break
        decoder.reorder(rows)
        alive = torch.isfinite(scores.view(-1))
        logits = decoder.advance(torch.tensor(next_tokens, device=device).masked_fill(~alive, pad_id), alive)
    out = []
    for b in range(B):
        hypotheses = list(finished[b])
        if not done[b]:  # max_new_tokens reached: the running beams compete as they are
            for k in range(K):
                total = float(scores[b, k])
                if total != float("-inf"):
                    hypotheses.append((normalised(total, len(beams[b * K + k])), total, beams[b * K + k], None))
        best = max(hypotheses, key=lambda h: h[0]) if hypotheses else (0.0, 0.0, [], None)
        g = Generated(token_ids=best[2], finish_reason="length" if best[3] is None else "stop",
                      log_prob=best[1], score=best[0], stop_id=best[3])
        if output_logits:
            g.logits = torch.stack([r[b] for r in recorded]) if recorded else torch.zeros(0)
        out.append(g)
    return out


def _beam_done(finished: list[tuple[float, float, list[int], int | None]], running: list[tuple[int, int, float]],
               K: int, cfg: GenerationConfig, length: int, normalised: Callable[[float, int], float]) -> bool:
    if not running:  # every candidate ended or has probability 0: nothing more can be found
        return True
    if len(finished) < K:
        return False
    if cfg.early_stopping:
        return True
    worst = sorted(h[0] for h in finished)[-K]  # the K-th best finished hypothesis
    best_running = max(total for _, _, total in running)
    # the best any running beam can still reach: its sum can only fall, and with a positive length penalty the
    # longest possible output divides it the most
    longest = max(cfg.max_new_tokens, length) if cfg.length_penalty > 0 else length
    return normalised(best_running, longest) <= worst


def _device(model: Generative) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


# ---- the entry point --------------------------------------------------------------------------------------


def default_stop_ids(model: Generative, tokenizer: Any | None = None) -> tuple[int, ...]:
    """The model's end token, and the tokenizer's [EOS] and [SEP] when it has them."""
    ids = {model.config.eos_token_id}
    if tokenizer is not None:
        vocab = tokenizer.backend.get_vocab()
        ids.update(vocab[t] for t in ("[EOS]", "[SEP]") if t in vocab)
    return tuple(sorted(ids))


def _frame(model: Generative, tokenizer: Any | None) -> tuple[list[int], list[int]]:
    prefix, suffix = model.generation_frame(tokenizer)
    return list(prefix), list(suffix)


def _fit(prompt: list[int], limit: int, prefix: list[int], suffix: list[int]) -> list[int]:
    """The indices of the prompt tokens kept when it is cut from the left to `limit` tokens, its frame (the
    family's prefix and suffix, when the prompt has them) kept."""
    if len(prompt) <= limit:
        return list(range(len(prompt)))
    head = len(prefix) if prompt[:len(prefix)] == prefix else 0
    tail = len(suffix) if suffix and prompt[-len(suffix):] == suffix else 0
    body_end = len(prompt) - tail
    return [*range(head), *range(body_end - (limit - head - tail), body_end), *range(body_end, len(prompt))]


def generate(model: Generative, inputs: str | Sequence[str] | Sequence[Sequence[int]] | Tensor, *,
             tokenizer: Any | None = None, attention_mask: Tensor | None = None,
             token_type_ids: Tensor | None = None, max_new_tokens: int = 32, strategy: str = "greedy",
             num_beams: int = 4, length_penalty: float = 1.0, early_stopping: bool = False,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
             stop_ids: Sequence[int] | None = None, use_cache: bool = True, compile: bool = False,
             batch_size: int = 32,
             padding_side: str = "left", output_logits: bool = False,
             on_token: TokenCallback | None = None, progress: bool = False) -> GenerationOutput:
    """Generate a continuation of each input (see GenerationConfig for the options).

    inputs: texts (with `tokenizer`; framed as the family says, `[SOS] text` by default), lists of token ids,
    or a (B, L) tensor with `attention_mask` (padding on either side; default ids != [PAD]) and, for families
    with segments, `token_type_ids`. Prompts that leave less than max_new_tokens positions are cut from the
    left (their frame kept), with a warning; Generated.truncated and GenerationOutput.truncated count it.
    An empty text (or an empty id list) gives an empty Generated, finish_reason "empty". Inputs run sorted by
    length, batch_size at a time, padded on `padding_side`. on_token(input index, token id) is called as each
    non-stop token is chosen (greedy and sampling: streaming). seed makes sampling reproducible (a
    torch.Generator of its own; the global RNG is untouched). progress: count the inputs done on stderr (a bar on a
    terminal, plain periodic lines otherwise; maskplay.runtime.progress)."""
    require_generative(model)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, strategy=strategy, num_beams=num_beams,
                           length_penalty=length_penalty, early_stopping=early_stopping, temperature=temperature,
                           top_k=top_k, top_p=top_p, seed=seed,
                           stop_ids=None if stop_ids is None else tuple(stop_ids), use_cache=use_cache,
                           compile=compile)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    prefix, suffix = _frame(model, tokenizer)
    prompts, types = _prompts(model, inputs, tokenizer, attention_mask, token_type_ids, prefix, suffix)
    positions = model.config.max_position
    limit = positions - cfg.max_new_tokens
    if limit < len(prefix) + len(suffix) + 1:
        raise ValueError(f"max_new_tokens={cfg.max_new_tokens} leaves no room for a prompt in the model's "
                         f"{positions} positions; ask for at most {positions - len(prefix) - len(suffix) - 1}")
    results, truncated = _fit_prompts(prompts, types, limit, prefix, suffix, tokenizer)
    if truncated:
        warnings.warn(f"{truncated} of {len(prompts)} inputs were longer than the model's {positions} positions "
                      f"leave room for (with max_new_tokens={cfg.max_new_tokens}) and were cut from the left",
                      stacklevel=2)
    stops = set(cfg.stop_ids if cfg.stop_ids is not None else default_stop_ids(model, tokenizer))
    generator = None
    if cfg.strategy == "sample":
        generator = torch.Generator(device=_device(model))
        generator.manual_seed(cfg.seed if cfg.seed is not None else int(torch.randint(2**62, ()).item()))
    order = sorted((k for k in range(len(prompts)) if prompts[k]), key=lambda k: -len(prompts[k]))
    was_training = getattr(model, "training", False)
    if was_training:
        model.eval()
    bar = Progress(total=len(order), desc="generate", unit="input", enabled=progress, leave=False)
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                callback = None if on_token is None else (lambda row, token, batch=batch: on_token(batch[row], token))
                outs = _decode_batch(model, [prompts[k] for k in batch],
                                     None if types is None else [types[k] for k in batch], cfg, stops, generator,
                                     padding_side, output_logits, callback)
                for k, g in zip(batch, outs, strict=True):
                    g.truncated = results[k].truncated if results[k] is not None else 0
                    if tokenizer is not None:
                        g.text = tokenizer.decode(g.token_ids)
                    results[k] = g
                bar.update(len(batch))
    finally:
        bar.close()
        if was_training:
            model.train()
    return GenerationOutput([g for g in results if g is not None], truncated)


def _fit_prompts(prompts: list[list[int]], types: list[list[int]] | None, limit: int, prefix: list[int],
                 suffix: list[int], tokenizer: Any | None) -> tuple[list[Generated | None], int]:
    """Cut each prompt longer than `limit` from the left, in place (_fit); the results so far: an empty Generated
    for an empty prompt, a placeholder carrying the count of cut tokens for a cut one; and how many were cut."""
    results: list[Generated | None] = [None] * len(prompts)
    truncated = 0
    for k, prompt in enumerate(prompts):
        if not prompt:
            results[k] = Generated(text="" if tokenizer is not None else None, finish_reason="empty")
            continue
        kept = _fit(prompt, limit, prefix, suffix)
        if len(kept) < len(prompt):
            truncated += 1
            prompts[k] = [prompt[i] for i in kept]
            if types is not None:
                types[k] = [types[k][i] for i in kept]
            results[k] = Generated(truncated=len(prompt) - len(kept))
    return results, truncated


def _prompts(model: Generative, inputs: Any, tokenizer: Any | None, attention_mask: Tensor | None,
             token_type_ids: Tensor | None, prefix: list[int],
             suffix: list[int]) -> tuple[list[list[int]], list[list[int]] | None]:
    """Every input as a list of prompt ids (empty for an empty input), their token types if given."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, Tensor):
        if inputs.dim() != 2:
            raise ValueError(f"input_ids must be a 2-D (batch, length) tensor, got shape {tuple(inputs.shape)}")
        mask = (inputs != model.config.pad_token_id) if attention_mask is None else attention_mask.bool()
        if mask.shape != inputs.shape:
            raise ValueError(f"attention_mask shape {tuple(mask.shape)} differs from input_ids {tuple(inputs.shape)}")
        prompts = [row[m].tolist() for row, m in zip(inputs, mask, strict=True)]
        types = None
        if token_type_ids is not None:
            types = [row[m].tolist() for row, m in zip(token_type_ids, mask, strict=True)]
        return prompts, types
    inputs = list(inputs)
    if token_type_ids is not None:
        raise ValueError("token_type_ids go with a tensor of input_ids")
    if inputs and all(isinstance(x, str) for x in inputs):
        if tokenizer is None:
            raise ValueError("texts need a tokenizer (tokenizer=...), or pass token ids")
        encoded = tokenizer.backend.encode_batch(inputs, add_special_tokens=False)
        prompts = [[] if not text.strip() else prefix + list(enc.ids) + suffix
                   for text, enc in zip(inputs, encoded, strict=True)]
        return prompts, None
    if not all(isinstance(x, (list, tuple)) and all(isinstance(i, int) for i in x) for x in inputs):
        raise ValueError("inputs must be a text, a list of texts, a list of token-id lists or a 2-D tensor")
    vocab = model.config.vocab_size
    for k, x in enumerate(inputs):
        bad = [i for i in x if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"input {k}: token id {bad[0]} is out of range for a vocabulary of {vocab}")
    return [list(x) for x in inputs], None
