"""One AdamW step over a model's parameters, three ways in one run: torch's for-loop (`foreach=False`), `foreach`
and `fused` (what the trainer uses where the device has it, maskplay.tasks.train.schedule.build_optimizer), on the
two-hour model's shape by default (4 x 256, SwiGLU, vocabulary 16,384: 7.4 M parameters), random gradients; the
median of interleaved rounds.

    OMP_NUM_THREADS=1 python benchmarks/probes/adamw_kinds.py --threads 1 --out results/probes/adamw-kinds.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import interleaved, machine  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.tasks.train.schedule import parameter_groups  # noqa: E402

KINDS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per timed call")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cases, sizes = {}, 0
    for kind, options in KINDS.items():
        torch.manual_seed(0)
        model = build_model(preset("mini", family="gpt", num_layers=args.layers, norm_placement="pre", ffn="swiglu",
                                   positions="rotary"))
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        sizes = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(parameter_groups(model, 0.01), lr=1e-3, betas=(0.9, 0.98), eps=1e-6, **options)
        opt.step()  # the state made

        def run(opt: torch.optim.Optimizer = opt) -> None:
            for _ in range(args.steps):
                opt.step()

        cases[kind] = run
    times = interleaved(cases, args.rounds)
    ms = {kind: seconds / args.steps * 1e3 for kind, seconds in times.items()}
    lines = [f"machine: {machine()}, {torch.get_num_threads()} threads; {sizes:,} parameters",
             *(f"{kind:<9} {value:7.2f} ms a step  {ms['for-loop'] / value:5.2f}x the for-loop"
               for kind, value in ms.items())]
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "threads": torch.get_num_threads(), "parameters": sizes,
                                        "ms_per_step": ms, "command": " ".join(sys.argv)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
