"""Generated tokens per second of a maskplay GPT with and without the key/value cache, against HuggingFace
BertLMHeadModel.generate (is_decoder=True) on the same weights (maskplay.convert.gpt_to_hf_bert_lm_head), in one
run, the cases interleaved round by round (benchmarks/common.interleaved; the median is reported).

Greedy decoding of random prompts with no stop token, so every case generates exactly batch x max_new_tokens
tokens; the run checks that maskplay's cached tokens equal HuggingFace's. Random weights (speed only). --dtype
bf16 casts both models to bf16.

    .venv/bin/python benchmarks/generate_speed.py --preset mini --out results/bench-generate-mini
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved, machine, resolve_dtype  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.cli.generate import for_precision  # noqa: E402
from maskplay.convert import gpt_to_hf_bert_lm_head  # noqa: E402
from maskplay.families import build_model
from maskplay.generation import generate  # noqa: E402


def make_cases(model, hf, prompts: list[list[int]], ids: torch.Tensor, max_new_tokens: int,
               uncached: bool) -> tuple[dict[str, Callable[[], list[list[int]]]], bool]:
    """The timed calls for one batch of prompts (ids: the same prompts left-padded with 0, for HuggingFace), and
    whether maskplay's cached greedy tokens equal HuggingFace's."""

    def maskplay(use_cache: bool) -> list[list[int]]:
        out = generate(model, prompts, max_new_tokens=max_new_tokens, stop_ids=[], use_cache=use_cache,
                       batch_size=len(prompts))
        return [o.token_ids for o in out]

    def huggingface() -> list[list[int]]:
        with torch.inference_mode():
            out = hf.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=max_new_tokens,
                              min_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=0,
                              eos_token_id=None, use_cache=True)
        return out[:, ids.shape[1]:].tolist()

    cases = {"maskplay, cache": lambda: maskplay(True), "HF BertLMHeadModel.generate, cache": huggingface}
    if uncached:
        cases["maskplay, no cache"] = lambda: maskplay(False)
    return cases, maskplay(True) == huggingface()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-length", type=int, default=16, help="prompt tokens (the longest prompt)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto",
                        help="bf16: both models cast to bf16 (maskplay generate --precision bf16); auto: bf16 where "
                             "this machine runs it faster, else fp32 (as maskplay generate)")
    parser.add_argument("--no-uncached", action="store_true", help="skip the uncached maskplay row (the slowest)")
    parser.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.log")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = build_model(preset(args.preset, family="gpt")).eval()
    hf_dict, hf_state = gpt_to_hf_bert_lm_head(model)
    hf = transformers.BertLMHeadModel(transformers.BertConfig(**{k: v for k, v in hf_dict.items()
                                                                  if k != "architectures"})).eval()
    hf.load_state_dict(hf_state, strict=True)
    args.dtype = resolve_dtype(args.dtype, model.config, max(args.batch_sizes))
    if args.dtype == "bf16":
        model, hf = for_precision(model, "bf16"), hf.to(torch.bfloat16)
    cfg = model.config
    lines = [f"machine: {machine()}",
             f"model: {args.preset} GPT ({cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}), "
             f"random weights, {args.dtype}; greedy, no stop token; "
             f"prompts of {args.prompt_length // 2}-{args.prompt_length} tokens, left-padded; "
             f"{args.max_new_tokens} new tokens; transformers {transformers.__version__}",
             f"{'batch':>5} {'case':<34} {'s/call':>8} {'tokens/s':>9} {'vs HF':>6}"]
    rows = []
    for batch in args.batch_sizes:
        g = torch.Generator().manual_seed(batch)
        lengths = torch.randint(args.prompt_length // 2, args.prompt_length + 1, (batch,), generator=g).tolist()
        prompts = [[cfg.sos_token_id, *torch.randint(7, cfg.vocab_size, (n - 1,), generator=g).tolist()]
                   for n in lengths]
        ids = torch.zeros(batch, max(lengths), dtype=torch.long)
        for k, p in enumerate(prompts):
            ids[k, ids.shape[1] - len(p):] = torch.tensor(p)

        cases, same = make_cases(model, hf, prompts, ids, args.max_new_tokens, not args.no_uncached)
        times = interleaved(cases, args.rounds)
        tokens = batch * args.max_new_tokens
        hf_time = times["HF BertLMHeadModel.generate, cache"]
        for name, seconds in times.items():
            rows.append({"batch": batch, "case": name, "seconds": seconds, "tokens_per_s": tokens / seconds,
                         "speedup_vs_hf": hf_time / seconds, "tokens_equal_hf": same})
            lines.append(f"{batch:>5} {name:<34} {seconds:>8.3f} {tokens / seconds:>9.0f} {hf_time / seconds:>5.2f}x")
        lines.append(f"      greedy tokens equal to HuggingFace's: {same}"
                     + (" (bf16: rounding may part them)" if args.dtype == "bf16" and not same else ""))
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".log").write_text("\n".join(lines) + "\n")
        meta = {"machine": machine(), "preset": args.preset, "dtype": args.dtype, "prompt_length": args.prompt_length,
                "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "command": " ".join(sys.argv)}
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
