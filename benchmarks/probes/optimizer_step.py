"""What LAMB (optim.optimizer = "lamb", a loop over parameters) costs against AdamW (torch's multi-tensor
implementation): the time of optimizer.step() alone and of a whole training step (forward, backward, step), the
two optimizers interleaved round by round in one invocation, reported as ratios LAMB / AdamW (medians).

    python benchmarks/probes/optimizer_step.py --preset mini --batch 8 --length 128 --rounds 5
    python benchmarks/probes/optimizer_step.py --device cuda --hidden 384 --layers 12 --heads 6 --ffn 1280 --batch 64"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from maskplay.config import preset
from maskplay.families import build_model
from maskplay.tasks.train.config import OptimSection
from maskplay.tasks.train.schedule import build_optimizer


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, device: torch.device,
            steps: int) -> tuple[float, float]:
    """Seconds per optimizer.step() and per whole training step, over `steps` steps."""
    step_time = total = 0.0
    for _ in range(steps):
        sync(device)
        start = time.perf_counter()
        model(**batch).loss.backward()
        sync(device)
        middle = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        end = time.perf_counter()
        step_time += end - middle
        total += end - start
    return step_time / steps, total / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--family", default="bert")
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--ffn", type=int)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="steps per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args()
    device = torch.device(args.device)
    sizes = {k: v for k, v in dict(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                                   intermediate_size=args.ffn).items() if v is not None}
    config = preset(args.preset, family=args.family, vocab_size=args.vocab, max_position=max(args.length, 128),
                    **sizes)
    torch.manual_seed(0)
    model = build_model(config).to(device).train()
    ids = torch.randint(7, args.vocab, (args.batch, args.length))
    mask = torch.ones_like(ids, dtype=torch.bool)
    batch = {k: v.to(device) for k, v in model.training_batch(ids, mask, generator=torch.Generator()).items()}
    optimizers = {name: build_optimizer(model, OptimSection(optimizer=name, lr=1e-6)) for name in ("adamw", "lamb")}
    for opt in optimizers.values():
        measure(model, opt, batch, device, 1)  # warm-up, and the optimizer state exists
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in optimizers}
    for _ in range(args.rounds):
        for name, opt in optimizers.items():
            times[name].append(measure(model, opt, batch, device, args.steps))
    med = {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
           for name, ts in times.items()}
    result = {"device": str(device), "threads": torch.get_num_threads(), "parameters": model.num_parameters(),
              "tensors": sum(1 for _ in model.parameters()), "batch": args.batch, "length": args.length,
              "adamw_step_s": med["adamw"][0], "lamb_step_s": med["lamb"][0],
              "adamw_train_step_s": med["adamw"][1], "lamb_train_step_s": med["lamb"][1],
              "step_ratio": med["lamb"][0] / med["adamw"][0], "train_step_ratio": med["lamb"][1] / med["adamw"][1]}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
