"""Compiled greedy decoding with the choice made in the compiled step (static_decode._run_greedy_step: the token and
its log-probability returned by the step's program) against the same compiled step returning its logits and the
choice made on the host (eager float, argmax, log_softmax), on the same model and prompts in one process, the two
interleaved round by round (median). The tokens of both are checked equal.

    python benchmarks/probes/greedy_in_step.py --precision bf16 --batch-sizes 1 8 \
        --out results/probes/greedy-in-step/bf16.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import interleaved, machine  # noqa: E402

import maskplay.tasks.decoding as decoding  # noqa: E402
from maskplay import preset  # noqa: E402
from maskplay.cli.generate import for_precision  # noqa: E402
from maskplay.families import build_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    base = build_model(preset("mini", family="gpt")).eval()
    cfg = base.config
    model = for_precision(base, args.precision)
    made = decoding.static_step
    in_step = {"on": True}
    # the host-choice side: the same compiled step without its greedy choice (greedy=False)
    decoding.static_step = lambda *a: made(*a[:5], a[5] and in_step["on"])
    rows = []
    for batch in args.batch_sizes:
        g = torch.Generator().manual_seed(batch)
        lengths = torch.randint(8, 17, (batch,), generator=g).tolist()
        prompts = [[cfg.sos_token_id, *torch.randint(7, cfg.vocab_size, (n - 1,), generator=g).tolist()]
                   for n in lengths]

        def run(on: bool, prompts=prompts, batch=batch) -> list[list[int]]:
            in_step["on"] = on
            out = decoding.generate(model, prompts, max_new_tokens=args.max_new_tokens, stop_ids=[], compile=True,
                                    batch_size=batch)
            return [o.token_ids for o in out]

        equal = run(True) == run(False)
        seconds = interleaved({"in_step": lambda run=run: run(True), "on_host": lambda run=run: run(False)}, args.rounds)
        median = {True: seconds["in_step"], False: seconds["on_host"]}
        tokens = batch * args.max_new_tokens
        rows.append({"batch": batch, "tokens_equal": equal,
                     "choice_in_step_tokens_per_s": tokens / median[True],
                     "choice_on_host_tokens_per_s": tokens / median[False],
                     "speedup": median[False] / median[True]})
        print(f"batch {batch}: choice in the step {tokens / median[True]:,.0f} tokens/s, on the host "
              f"{tokens / median[False]:,.0f} ({median[False] / median[True]:.2f}x; tokens equal: {equal})")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "precision": args.precision, "rounds": args.rounds,
                                        "max_new_tokens": args.max_new_tokens, "command": " ".join(sys.argv),
                                        "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
