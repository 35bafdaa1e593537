"""`maskplay generate MODEL "prompt" [--file F]`: continue prompts (GPT) or turn sources into targets (UniLM)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from ..tasks.decoding import (
    STRATEGIES,
    GenerationOutput,
    default_stop_ids,
    generate,
    generating_families,
    require_generative,
)
from .common import check_text_arguments, finite_float, non_negative_int, positive_float, positive_int, probability, seed_int
from .summaries import summary

PRECISIONS = ("auto", "fp32", "bf16", "int8")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help=summary("generate"),
                       description="Continue each prompt (GPT) or generate a target for each source (UniLM). "
                                   "Prompts come as arguments, or one per line with --file (blank lines give "
                                   "blank outputs, so output lines match input lines). Families that generate: "
                                   f"{', '.join(generating_families())}.")
    p.add_argument("model_dir", metavar="MODEL", help="a model directory (config.json, model.safetensors, "
                                                     "tokenizer.json) or a bundled model's name")
    p.add_argument("prompts", nargs="*", metavar="PROMPT")
    p.add_argument("--file", default=None, help="one prompt per line (UTF-8); '-' = stdin")
    p.add_argument("--max-new-tokens", type=positive_int, default=32)
    p.add_argument("--strategy", choices=STRATEGIES, default="greedy")
    p.add_argument("--num-beams", type=positive_int, default=4, help="beam search: beams per input")
    p.add_argument("--length-penalty", type=finite_float, default=1.0,
                   help="beam search: rank by sum log p / length ** this (> 0 favours longer outputs)")
    p.add_argument("--early-stopping", action="store_true",
                   help="beam search: stop an input once it has --num-beams finished hypotheses")
    p.add_argument("--temperature", type=positive_float, default=1.0, help="sampling")
    p.add_argument("--top-k", type=non_negative_int, default=0, help="sampling: keep the k most likely tokens (0 = all)")
    p.add_argument("--top-p", type=probability, default=1.0, help="sampling: nucleus probability (1 = off)")
    p.add_argument("--seed", type=seed_int, default=None, help="sampling: reproducible draws")
    p.add_argument("--stop", nargs="+", default=None, metavar="TOKEN",
                   help="tokens that end an output (default: the model's end token, [EOS] and [SEP])")
    p.add_argument("--no-cache", dest="use_cache", action="store_false",
                   help="recompute the whole sequence at every step (the reference path; slow)")
    p.add_argument("--compile", action="store_true",
                   help="a preallocated cache and the decode step compiled (torch.compile on a CPU, a CUDA graph on "
                        "a GPU): the same tokens, faster per token after a first call that compiles (seconds on a "
                        "CPU); greedy and sampling; with --precision int8 the fastest on a CPU without fast bf16")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto (default): bf16 where this machine runs it faster than fp32, else fp32; bf16: a bf16 "
                        "copy of the model; int8: the encoder's linear layers and the vocabulary projection in int8 "
                        "(CPU, only when asked)")
    p.add_argument("--format", choices=["plain", "jsonl"], default="plain",
                   help="plain: one output per line; jsonl: one object per line with tokens, scores, flags")
    p.add_argument("--stream", choices=["auto", "always", "never"], default="auto",
                   help="print tokens as they come for a single prompt (auto: when stdout is a terminal; "
                        "not with beam search or jsonl)")
    p.set_defaults(func=run_generate)


def _read_prompts(args: argparse.Namespace) -> list[str]:
    """Prompt arguments, or the lines of --file / stdin with blank lines kept (as empty prompts)."""
    from ..data.source import read_lines

    if args.prompts and args.file is not None:
        raise ValueError("give prompts as arguments or with --file, not both")
    if args.prompts:
        check_text_arguments(args.prompts, "prompt argument")
        return list(args.prompts)
    if args.file is None and sys.stdin.isatty():
        raise ValueError("no input: give a prompt as an argument, --file F, or pipe prompts on stdin")
    source, rows = read_lines(args.file, "--file")
    if not rows:
        raise ValueError(f"{source}: no prompts (the input is empty)")
    return rows


def for_precision(model: Any, precision: str) -> Any:
    """The model to generate with: itself (fp32), a bf16 copy, or an int8 copy (precision.quantize_int8)."""
    import copy

    import torch

    if precision == "bf16":
        return copy.deepcopy(model).to(torch.bfloat16).eval()
    if precision == "int8":
        from ..runtime.precision import quantize_int8

        return quantize_int8(model)
    return model


def resolved_precision(model: Any, precision: str, device: str | None, command: str) -> str:
    """--precision with auto resolved for this machine and model (logged on stderr)."""
    from ..runtime.precision_probe import resolve_cli

    return resolve_cli(precision, device or "cpu", model=model, command=command).value


def _stop_ids(tokens: list[str] | None, model: Any, tokenizer: Any) -> tuple[int, ...]:
    if tokens is None:
        return default_stop_ids(model, tokenizer)
    vocab = tokenizer.backend.get_vocab()
    unknown = [t for t in tokens if t not in vocab]
    if unknown:
        raise ValueError(f"--stop: {unknown} not in the tokenizer's vocabulary (give tokens such as [EOS] or [SEP])")
    return tuple(vocab[t] for t in tokens)


class _Streamer:
    """Prints one prompt's output as its tokens come (WordPiece pieces join onto the previous word, so the text
    so far is decoded again and only its new end printed)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.ids, self.shown = tokenizer, [], ""

    def __call__(self, index: int, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        new = text[len(self.shown):] if text.startswith(self.shown) else " " + text
        self.shown = text
        sys.stdout.write(new)
        sys.stdout.flush()


def run_generate(args: argparse.Namespace) -> int:
    from ..runtime.devices import resolve_device
    from ..tasks.score.scorer import load_model_dir

    device = resolve_device(args.device)  # before any work: a device this machine lacks is one line
    prompts = _read_prompts(args)
    model, tokenizer = load_model_dir(args.model_dir)
    require_generative(model)
    model = model.to(device)
    model = for_precision(model, resolved_precision(model, args.precision, str(device), "generate"))
    stream = args.stream == "always" or (args.stream == "auto" and sys.stdout.isatty())
    stream = stream and len(prompts) == 1 and args.strategy != "beam" and args.format == "plain"
    streamer = _Streamer(tokenizer) if stream else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truncation count is reported below, once
        out = generate(model, prompts, tokenizer=tokenizer, max_new_tokens=args.max_new_tokens,
                       strategy=args.strategy, num_beams=args.num_beams, length_penalty=args.length_penalty,
                       early_stopping=args.early_stopping, temperature=args.temperature, top_k=args.top_k,
                       top_p=args.top_p, seed=args.seed, stop_ids=_stop_ids(args.stop, model, tokenizer),
                       use_cache=args.use_cache, compile=args.compile, batch_size=args.batch_size,
                       on_token=streamer,
                       progress=len(prompts) > 1)
    _write(out, prompts, args.format, streamed=stream)
    empty = sum(g.finish_reason == "empty" for g in out)
    notes = [f"{out.truncated} truncated from the left to fit the model"] if out.truncated else []
    if empty:
        notes.append(f"{empty} empty")
    if notes or len(prompts) > 1:
        print(f"maskplay generate: {len(out)} outputs" + (f" ({', '.join(notes)})" if notes else ""),
              file=sys.stderr)
    return 0


def _write(out: GenerationOutput, prompts: list[str], fmt: str, streamed: bool) -> None:
    if streamed:
        sys.stdout.write("\n")
        return
    for index, (prompt, g) in enumerate(zip(prompts, out, strict=True)):
        if fmt == "jsonl":
            print(json.dumps({"index": index, "prompt": prompt, **g.to_dict()}, ensure_ascii=False))
        else:
            print((g.text or "").replace("\n", " "))
