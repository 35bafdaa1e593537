"""Generated tokens per second of a maskplay GPT (the key/value cache; the static cache with the decode step
compiled, `generate(compile=True)`; optionally without a cache) against HuggingFace BertLMHeadModel.generate
(is_decoder=True) on the same weights (maskplay.families.hf.gpt.gpt_to_hf_bert_lm_head), in one run, the cases interleaved
round by round (benchmarks/common.interleaved; the median is reported).

Greedy decoding of random prompts with no stop token, so every case generates exactly batch x max_new_tokens
tokens; the run checks that maskplay's greedy tokens (cached and compiled) equal HuggingFace's. Random weights
(speed only). Each precision of --dtypes runs both sides; "vs best HF" divides by HuggingFace's fastest time for
that batch and prompt length over the precisions run (best vs best). "of limit" is tokens/s against the memory
bandwidth limit: a step reads every weight and the cache once, so tokens/s <= batch x copy bandwidth / (weight
bytes + cache bytes), the bandwidth measured by a large tensor copy in the same run.

    .venv/bin/python benchmarks/generate_speed.py --preset mini --dtypes fp32 bf16 --prompt-lengths 16 64 \
        --out results/generate-speed/mini
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, interleaved, machine, resolve_dtype  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.cli.generate import for_precision  # noqa: E402
from maskplay.families import build_model
from maskplay.families.hf.gpt import gpt_to_hf_bert_lm_head  # noqa: E402
from maskplay.tasks.decoding import generate  # noqa: E402


def make_cases(model, hf, prompts: list[list[int]], ids: torch.Tensor, max_new_tokens: int, uncached: bool,
               label: str) -> tuple[dict[str, Callable[[], list[list[int]]]], dict[str, bool]]:
    """The timed calls for one batch of prompts (ids: the same prompts left-padded with 0, for HuggingFace), and
    whether maskplay's greedy tokens (cached, compiled) equal HuggingFace's. The compiled case compiles here."""

    def maskplay(use_cache: bool, compile: bool = False) -> list[list[int]]:
        out = generate(model, prompts, max_new_tokens=max_new_tokens, stop_ids=[], use_cache=use_cache,
                       compile=compile, batch_size=len(prompts))
        return [o.token_ids for o in out]

    def huggingface() -> list[list[int]]:
        with torch.inference_mode():
            out = hf.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=max_new_tokens,
                              min_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=0,
                              eos_token_id=None, use_cache=True)
        return out[:, ids.shape[1]:].tolist()

    cases = {f"maskplay {label}, cache": lambda: maskplay(True),
             f"HF generate {label}, cache": huggingface,
             f"maskplay {label}, compiled": lambda: maskplay(True, True)}
    if uncached:
        cases[f"maskplay {label}, no cache"] = lambda: maskplay(False)
    reference = huggingface()
    equal = {"cache": maskplay(True) == reference, "compiled": maskplay(True, True) == reference}
    return cases, equal


def copy_bandwidth(device: torch.device) -> float:
    """Bytes read and written per second by a 256 MB tensor copy (the best of 5)."""
    x = torch.empty(64 * 2**20, dtype=torch.float32, device=device)
    y = torch.empty_like(x)

    def run() -> None:
        y.copy_(x)
        if device.type == "cuda":
            torch.cuda.synchronize()

    return 2 * x.numel() * 4 / best_time(run, repeats=5, warmup=1)


def step_bytes(model, batch: int, columns: int) -> int:
    """Bytes one decode step must read: every weight, and every layer's cached keys and values."""
    cfg = model.config
    size = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    weights += sum(m.weight_int8.numel() + 4 * (m.weight_scale.numel() + m.bias.numel())  # an int8 copy's layers
                   for m in model.modules() if hasattr(m, "weight_int8"))
    return weights + 2 * cfg.num_layers * batch * columns * cfg.hidden_size * size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-lengths", type=int, nargs="+", default=[16],
                        help="prompt tokens (the longest prompt of a batch; the others from half of it)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtypes", nargs="+", choices=["auto", "fp32", "bf16", "int8"], default=["auto"],
                        help="precisions to run both sides in (bf16: both models cast to bf16, as maskplay generate "
                             "--precision bf16; int8, CPU: maskplay's int8 copy against HuggingFace "
                             "with torch.ao dynamic int8); auto: bf16 where this machine runs it faster (a GPU: "
                             "bf16), else fp32")
    parser.add_argument("--no-uncached", action="store_true", help="skip the uncached maskplay row (the slowest)")
    parser.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.log")
    args = parser.parse_args()
    for length in args.prompt_lengths:
        if length + args.max_new_tokens > preset(args.preset, family="gpt").max_position:
            parser.error(f"--prompt-lengths {length} + --max-new-tokens {args.max_new_tokens} pass the {args.preset} "
                         f"model's {preset(args.preset, family='gpt').max_position} positions")
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    device = torch.device(args.device)
    torch.manual_seed(0)
    base = build_model(preset(args.preset, family="gpt")).eval()
    hf_dict, hf_state = gpt_to_hf_bert_lm_head(base)
    hf_base = transformers.BertLMHeadModel(transformers.BertConfig(**{k: v for k, v in hf_dict.items()
                                                                       if k != "architectures"})).eval()
    hf_base.load_state_dict(hf_state, strict=True)
    dtypes = []
    for name in args.dtypes:
        name = "bf16" if name == "auto" and device.type == "cuda" else resolve_dtype(name, base.config,
                                                                                     max(args.batch_sizes))
        if name not in dtypes:
            dtypes.append(name)
    models = {d: (for_precision(base, d).to(device), _hf_in(hf_base, d).to(device)) for d in dtypes}
    bandwidth = copy_bandwidth(device)
    cfg = base.config
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    lines = [f"machine: {machine()}{gpu}; device {device}; copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write)",
             f"model: {args.preset} GPT ({cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}), "
             f"random weights; greedy, no stop token; prompts left-padded; {args.max_new_tokens} new tokens; "
             f"transformers {transformers.__version__}",
             f"{'batch':>5} {'prompt':>6} {'case':<32} {'s/call':>8} {'tokens/s':>9} {'vs best HF':>10} {'of limit':>8}"]
    rows = []
    for prompt_length in args.prompt_lengths:
        for batch in args.batch_sizes:
            g = torch.Generator().manual_seed(batch)
            lengths = torch.randint(prompt_length // 2, prompt_length + 1, (batch,), generator=g).tolist()
            prompts = [[cfg.sos_token_id, *torch.randint(7, cfg.vocab_size, (n - 1,), generator=g).tolist()]
                       for n in lengths]
            ids = torch.zeros(batch, max(lengths), dtype=torch.long)
            for k, p in enumerate(prompts):
                ids[k, ids.shape[1] - len(p):] = torch.tensor(p)
            cases, equal, dtype_of = {}, {}, {}
            for d in dtypes:
                model, hf = models[d]
                c, same = make_cases(model, hf, prompts, ids.to(device), args.max_new_tokens, not args.no_uncached, d)
                cases.update(c)
                dtype_of.update(dict.fromkeys(c, d))
                equal[d] = same
            times = interleaved(cases, args.rounds)
            tokens = batch * args.max_new_tokens
            hf_best = min(t for name, t in times.items() if name.startswith("HF"))
            columns = max(lengths) + args.max_new_tokens // 2  # the cache's mean width over the steps
            for name, seconds in times.items():
                d = dtype_of[name]
                limit = batch * bandwidth / step_bytes(models[d][0], batch, columns)
                rows.append({"batch": batch, "prompt_length": prompt_length, "case": name, "dtype": d,
                             "seconds": seconds, "tokens_per_s": tokens / seconds,
                             "speedup_vs_best_hf": hf_best / seconds, "bandwidth_limit_tokens_per_s": limit,
                             "tokens_equal_hf": equal[d]})
                lines.append(f"{batch:>5} {prompt_length:>6} {name:<32} {seconds:>8.3f} {tokens / seconds:>9.0f} "
                             f"{hf_best / seconds:>9.2f}x {tokens / seconds / limit:>7.1%}")
            for d, same in equal.items():
                lines.append(f"      {d}: greedy tokens equal to HuggingFace's: "
                             + ", ".join(f"{case} {value}" for case, value in same.items())
                             + (f" ({d}: rounding may part them)" if d != "fp32" else ""))
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".log").write_text("\n".join(lines) + "\n")
        meta = {"machine": machine() + gpu, "device": str(device), "preset": args.preset, "dtypes": dtypes,
                "prompt_lengths": args.prompt_lengths, "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
                "copy_bandwidth_bytes_per_s": bandwidth, "command": " ".join(sys.argv)}
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")


def _hf_in(hf, dtype: str):
    """HuggingFace's model in `dtype`: bf16 weights, or torch.ao dynamic int8 (the int8 route its docs give)."""
    import copy
    import warnings

    if dtype == "int8":
        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
            return quantize_dynamic(copy.deepcopy(hf), {torch.nn.Linear}, dtype=torch.qint8)
    return copy.deepcopy(hf).to(torch.bfloat16) if dtype == "bf16" else hf


if __name__ == "__main__":
    main()
