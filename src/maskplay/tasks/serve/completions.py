"""POST /v1/completions in OpenAI's shape: prompts as text or token ids, greedy (temperature 0) or sampled
(temperature, top_p, seed), n choices per prompt, stop strings, logprobs (the chosen token's log p and the top
alternatives, under the model's untempered distribution), echo (the prompt in front of the text; with logprobs
its tokens scored left to right: echo + max_tokens 0 scores a text, echo + max_tokens 1 is lm-eval's
loglikelihood request), and streaming as server-sent events (stream: true)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .batching import Batcher
from .errors import APIError
from .schemas import CompletionRequest
from .service import Completion, GenOptions, ModelService, Prompt


def prompts_of(request: CompletionRequest) -> list[str | list[int]]:
    p = request.prompt
    if isinstance(p, str):
        return [p]
    if not p:
        raise APIError(400, "prompt is an empty list", "prompt")
    if all(isinstance(x, int) for x in p):
        return [list(p)]
    return list(p)


def options_of(request: CompletionRequest, service: ModelService) -> GenOptions:
    if request.max_tokens > 0 and not service.can_generate:
        raise APIError(400, f"a {service.family!r} model cannot generate text; POST /v1/score gives its scores, and "
                            "max_tokens 0 with echo and logprobs scores a prompt with a causal model", "max_tokens")
    if request.stream and request.logprobs is not None:
        raise APIError(400, "logprobs are not streamed: ask without stream, or without logprobs", "logprobs")
    if request.echo and request.logprobs is not None and not service.causal:
        raise APIError(400, f"echo with logprobs scores the prompt left to right; a {service.family!r} model is not "
                            "causal (use POST /v1/score for this model's own scores)", "echo")
    greedy = request.temperature == 0
    return GenOptions(max_tokens=request.max_tokens, temperature=request.temperature, top_p=request.top_p,
                      seed=None if greedy else request.seed,
                      echo_logprobs=request.logprobs if request.echo and request.logprobs is not None else None,
                      logprobs=request.logprobs)


def batch_key(options: GenOptions) -> Any:
    # a seeded sample is reproducible only alone: the same seed in a batch would draw for other rows too
    alone = uuid.uuid4().hex if options.seed is not None else None
    return ("complete", options, alone)


def stops_of(request: CompletionRequest) -> list[str]:
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    return [s for s in stops if s]


def cut_at_stop(text: str, stops: list[str]) -> int | None:
    """Where the first stop string starts in text (None: none does)."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


@dataclass
class Choice:
    """One choice's text and logprobs, built from a Completion."""

    text: str = ""
    finish_reason: str = "length"
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)


def continuation(service: ModelService, prompt_ids: list[int], ids: list[int]) -> str:
    """The text `ids` add after the prompt's, as the prompt's end reads it (" city", WordPiece's "##s" as "s")."""
    base, full = service.decode(prompt_ids), service.decode([*prompt_ids, *ids])
    return full[len(base):] if full.startswith(base) else " " + service.decode(ids)


def _offsets(service: ModelService, prompt_ids: list[int], ids: list[int], start: int) -> list[int]:
    """Where each token's text starts (in the decoded text, from `start`)."""
    return [start + len(continuation(service, prompt_ids, ids[:k])) for k in range(len(ids))]


def build_choice(service: ModelService, prompt: str | list[int], framed: Prompt, done: Completion,
                 request: CompletionRequest, stops: list[str]) -> Choice:
    choice = Choice()
    shown = framed.ids[framed.hidden:]
    if request.echo:
        choice.text = prompt if isinstance(prompt, str) else service.decode(shown)
        if request.logprobs is not None:
            choice.tokens = [service.token_text(i) for i in shown]
            choice.token_logprobs = list(done.echo_logprobs or [None] * len(shown))
            choice.top_logprobs = list(done.echo_top or [None] * len(shown))
            choice.text_offset = _offsets(service, [], shown, 0)
    g = done.generated
    if g is None:
        return choice
    body = continuation(service, shown, g.token_ids)
    cut = cut_at_stop(body, stops)
    choice.finish_reason = "stop" if g.finish_reason == "stop" or cut is not None else "length"
    start = len(choice.text)
    if request.logprobs is not None:  # the stop token too, when one ended the row (it adds no text)
        ids = [*g.token_ids, *([g.stop_id] if g.stop_id is not None else [])]
        offsets = [*_offsets(service, shown, g.token_ids, start), *([start + len(body)] if g.stop_id is not None
                                                                   else [])]
        keep = len(ids) if cut is None else sum(1 for o in offsets[:len(g.token_ids)] if o < start + cut)
        choice.tokens += [service.token_text(i) for i in ids[:keep]]
        choice.token_logprobs += list(done.gen_logprobs or [])[:keep]
        choice.top_logprobs += list(done.gen_top or [])[:keep]
        choice.text_offset += offsets[:keep]
    choice.text += body if cut is None else body[:cut]
    return choice


def response(request: CompletionRequest, service: ModelService, choices: list[Choice], prompt_tokens: int,
             completion_tokens: int) -> dict[str, Any]:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
        "model": service.name,
        "choices": [{"index": k, "text": c.text, "finish_reason": c.finish_reason,
                     "logprobs": None if request.logprobs is None else {
                         "tokens": c.tokens, "token_logprobs": c.token_logprobs, "top_logprobs": c.top_logprobs,
                         "text_offset": c.text_offset}} for k, c in enumerate(choices)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


async def complete(request: CompletionRequest, service: ModelService, batcher: Batcher) -> dict[str, Any]:
    prompts = prompts_of(request)
    options = options_of(request, service)
    service.check_generation(len(prompts), request.n, request.max_tokens)
    framed = [service.frame_ids(p, request.max_tokens) for p in prompts]
    items = [Prompt(f.ids, f.hidden) for f in framed for _ in range(request.n)]
    done = await batcher.submit(batch_key(options), items, lambda batch: service.complete(batch, options),
                                split=options.seed is None)
    stops = stops_of(request)
    choices = [build_choice(service, prompts[k // request.n], framed[k // request.n], d, request, stops)
               for k, d in enumerate(done)]
    used = sum(len(d.generated.token_ids) + (d.generated.stop_id is not None) for d in done if d.generated)
    return response(request, service, choices, sum(len(f.ids) for f in framed), used)


class _Stream:
    """One choice's streamed text: the decoded text so far, what was sent, held back while it could still turn
    into a stop string."""

    def __init__(self, service: ModelService, prompt_ids: list[int], stops: list[str]) -> None:
        self.service, self.prompt_ids, self.stops = service, prompt_ids, stops
        self.ids, self.sent, self.stopped = [], "", False

    def add(self, token: int) -> str:
        if self.stopped:
            return ""
        self.ids.append(token)
        return self._send(continuation(self.service, self.prompt_ids, self.ids), final=False)

    def _send(self, text: str, final: bool) -> str:
        cut = cut_at_stop(text, self.stops)
        if cut is not None:
            self.stopped, text = True, text[:cut]
        elif not final:  # hold back an end that could still become a stop string
            held = max((k for s in self.stops for k in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:k])),
                       default=0)
            text = text[:max(len(self.sent), len(text) - held)]
        if not text.startswith(self.sent):  # decoding changed an earlier character: send only what follows
            return ""
        new, self.sent = text[len(self.sent):], text
        return new

    def finish(self, ids: list[int]) -> str:
        return "" if self.stopped else self._send(continuation(self.service, self.prompt_ids, ids), final=True)


async def stream(request: CompletionRequest, service: ModelService, batcher: Batcher) -> AsyncIterator[str]:
    """Server-sent events: one chunk per new piece of text per choice, then each choice's finish_reason, then
    [DONE]. Errors found before the first event are raised (a JSON error answer); later ones end the stream
    with an error event."""
    prompts = prompts_of(request)
    options = options_of(request, service)
    service.check_generation(len(prompts), request.n, request.max_tokens)
    framed = [service.frame_ids(p, request.max_tokens) for p in prompts]
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()
    stops = stops_of(request)
    streams = [_Stream(service, f.ids[f.hidden:], stops) for f in framed for _ in range(request.n)]

    def sender(k: int) -> Any:
        return lambda token: loop.call_soon_threadsafe(queue.put_nowait, (k, token))

    items = [Prompt(f.ids, f.hidden, sender(j * request.n + c)) for j, f in enumerate(framed)
             for c in range(request.n)]
    batcher.check_room()  # a full queue is a 503 before the stream starts
    task = asyncio.ensure_future(batcher.submit(batch_key(options), items, lambda b: service.complete(b, options),
                                                split=options.seed is None))
    task.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": service.name}

    def event(k: int, text: str, finish: str | None) -> str:
        return "data: " + json.dumps({**head, "choices": [{"index": k, "text": text, "logprobs": None,
                                                         "finish_reason": finish}]}) + "\n\n"

    return _events(request, prompts, streams, queue, task, event)


async def _events(request: CompletionRequest, prompts: list, streams: list[_Stream], queue: asyncio.Queue,
                  task: asyncio.Future, event: Any) -> AsyncIterator[str]:
    if request.echo:
        for k in range(len(streams)):
            p = prompts[k // request.n]
            yield event(k, p if isinstance(p, str) else streams[k].service.decode(streams[k].prompt_ids), None)
    while (got := await queue.get()) is not None:
        k, token = got
        text = streams[k].add(token)
        if text:
            yield event(k, text, None)
    try:
        done = task.result()
    except Exception as err:  # noqa: BLE001 - the stream has started: say it as an event
        yield "data: " + json.dumps({"error": {"message": str(err).splitlines()[0], "type": "server_error"}}) + "\n\n"
        return
    for k, d in enumerate(done):
        g = d.generated
        rest = streams[k].finish(g.token_ids) if g is not None else ""
        finish = "stop" if streams[k].stopped or (g is not None and g.finish_reason == "stop") else "length"
        yield event(k, rest, finish)
    yield "data: [DONE]\n\n"
