"""The compiled decode step with inductor's C++ wrapper (static_decode.CPP_WRAPPER: the step's kernel and library
calls made from compiled code) against the same step with its Python wrapper, on the same model, prefilled cache
and first tokens, in one process: each round runs every step for the same greedy continuation, interleaved
(median over rounds). The tokens of both are checked equal.

    python benchmarks/probes/cpp_wrapper_step.py --precisions bf16 fp32 --batch-sizes 1 8 \
        --out results/probes/cpp-wrapper-step/epyc.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import machine  # noqa: E402

import maskplay.nn.static_decode as static_decode  # noqa: E402
from maskplay import preset  # noqa: E402
from maskplay.cli.generate import for_precision  # noqa: E402
from maskplay.families import build_model  # noqa: E402


def made_step(model: torch.nn.Module, batch: int, ids: torch.Tensor, cache: object, cpp_wrapper: bool
              ) -> tuple[static_decode.StaticStep, float]:
    """A greedy StaticStep compiled with or without the C++ wrapper, and its compile time in seconds."""
    static_decode.CPP_WRAPPER = {"cpp_wrapper": cpp_wrapper}
    step = static_decode.StaticStep(model, batch, static_decode.CAPACITY_STEP, torch.device("cpu"), greedy=True)
    step.load(cache)
    start = time.perf_counter()
    step(ids[:, -1], torch.ones(batch, dtype=torch.bool))
    return step, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["bf16", "fp32"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=31, help="decode steps a round (a 32-token continuation)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = build_model(preset("mini", family="gpt")).eval()
    cfg = base.config
    rows = []
    for precision in args.precisions:
        model = for_precision(base, precision)
        for batch in args.batch_sizes:
            g = torch.Generator().manual_seed(batch)
            ids = torch.randint(7, cfg.vocab_size, (batch, 16), generator=g)
            with torch.inference_mode():
                cache, first = model.prefill(ids, torch.ones_like(ids, dtype=torch.bool), None)
                steps, compile_s = {}, {}
                for on in (False, True):
                    steps[on], compile_s[on] = made_step(model, batch, ids, cache, on)
                times: dict[bool, list[float]] = {False: [], True: []}
                tokens: dict[bool, torch.Tensor] = {}
                for _ in range(args.rounds):
                    for on, step in steps.items():
                        step.load(cache)
                        token, alive, chosen = first.float().argmax(-1), torch.ones(batch, dtype=torch.bool), []
                        start = time.perf_counter()
                        for _ in range(args.steps):
                            token, _ = step(token, alive)
                            chosen.append(token.clone())
                        times[on].append((time.perf_counter() - start) / args.steps)
                        tokens[on] = torch.stack(chosen)
            median = {on: sorted(t)[len(t) // 2] for on, t in times.items()}
            equal = bool(torch.equal(tokens[False], tokens[True]))
            rows.append({"precision": precision, "batch": batch, "tokens_equal": equal,
                         "python_wrapper_us_per_step": median[False] * 1e6,
                         "cpp_wrapper_us_per_step": median[True] * 1e6,
                         "speedup": median[False] / median[True],
                         "compile_s": {"python_wrapper": compile_s[False], "cpp_wrapper": compile_s[True]}})
            print(f"{precision} batch {batch}: Python wrapper {median[False] * 1e6:,.0f} us a step, C++ wrapper "
                  f"{median[True] * 1e6:,.0f} ({median[False] / median[True]:.2f}x; compiled in "
                  f"{compile_s[False]:.1f} / {compile_s[True]:.1f} s; tokens equal: {equal})", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "rounds": args.rounds, "steps": args.steps,
                                        "threads": args.threads, "command": " ".join(sys.argv),
                                        "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
