"""Where one family's training step goes, in benchmarks/train_speed.py's setting (a preset's size, random ids, AdamW,
fp32): the step's mean time, then torch.profiler's operators by self time, grouped by input shape, over a few steps.
No data or recipe needed (benchmarks/probes/profile_train.py profiles a recipe on a prepared corpus).

    python benchmarks/probes/profile_step.py --family tta --preset mini
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from maskplay import preset
from maskplay.families import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="tta")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="steps profiled (after 3 warm-up and 5 timed ones)")
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model(preset(args.preset, family=args.family)).train()
    ids = torch.randint(7, model.config.vocab_size, (args.batch_size, args.seq_len))
    mask = torch.ones(args.batch_size, args.seq_len, dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)

    def step() -> None:
        loss = model(**model.training_batch(ids, mask, generator=generator)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(5):
        step()
    print(f"{args.family} {args.preset}, batch {args.batch_size} x {args.seq_len}, fp32, "
          f"{torch.get_num_threads()} threads: {(time.perf_counter() - start) / 5 * 1e3:.0f} ms a step")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
    print(f"(over {args.steps} steps)")
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=args.rows,
                                                             max_name_column_width=30, max_shapes_column_width=70))


if __name__ == "__main__":
    main()
