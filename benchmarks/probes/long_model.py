"""Dense SDPA against the banded kernel inside a whole model with [model.long] (docs/guides/long-text.md): a mini GPT with
ALiBi and a window of 128, forward (inference) and forward + backward (training) at each length, batch 1, fp32,
one thread; the same model run both ways (long.banded_from switched). What chooses long.banded_from.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probes/long_model.py --out results/long-context/kernel_choice.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import median_time  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.config import LongAttentionConfig  # noqa: E402
from maskplay.families import build_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = preset("mini", family="gpt", positions="alibi", max_position=max(args.lengths),
                    long=LongAttentionConfig(window=args.window))
    model = build_model(config).eval()
    rows = []
    for length in args.lengths:
        ids = torch.randint(7, config.vocab_size, (1, length))
        row = {"length": length}
        for name, banded_from in (("dense", 10**9), ("banded", 1)):
            model.config.long.banded_from = banded_from

            def forward(ids: torch.Tensor = ids) -> None:
                with torch.inference_mode():
                    model(ids).last_hidden_state.sum()

            def train_step(ids: torch.Tensor = ids) -> None:
                model.zero_grad()
                model(ids).last_hidden_state.float().pow(2).mean().backward()

            row[f"{name}_forward_s"] = round(median_time(forward, args.repeats), 4)
            row[f"{name}_train_s"] = round(median_time(train_step, args.repeats), 4)
        row["forward_speedup"] = round(row["dense_forward_s"] / row["banded_forward_s"], 2)
        row["train_speedup"] = round(row["dense_train_s"] / row["banded_train_s"], 2)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": f"mini gpt, alibi, long.window = {args.window}", "batch": 1,
                                        "precision": "fp32", "threads": 1, "torch": torch.__version__,
                                        "machine": platform.machine(), "processor": platform.processor(),
                                        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probes/long_model.py "
                                                   f"--out {args.out}", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
