"""Where a training step's time goes: a recipe (a `maskplay pretrain` TOML) trained for a few dozen steps under
torch.profiler, the operators that take the most self time, and the run's tokens/s as model FLOP utilisation
against this machine's measured matmul peak for the same threads and precision.

    OMP_NUM_THREADS=1 python benchmarks/probes/profile_train.py configs/ttq/two-hour-gpt.toml --data runs/data-wg16k \
        --steps 60 --out results/probes/profile-train/two-hour-gpt

The profile covers the whole short run (the first steps and the data loading included: what the trainer itself
spends is part of the answer); MFU is from the trainer's own tokens/s over its logged steps after the first
--skip steps. FLOPs count matmuls only (maskplay.runtime.flops, PaLM's accounting) at the run's mean sequence length.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import machine, matmul_peak  # noqa: E402

from maskplay.config import ModelConfig, apply_overrides, from_dict  # noqa: E402
from maskplay.runtime.flops import family_training_flops_per_token  # noqa: E402
from maskplay.tasks.train import load_train_config, train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="a pretrain TOML")
    parser.add_argument("--data", required=True, help="a prepared corpus (maskplay prepare)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=20, help="steps left out of the tokens/s (warm-up)")
    parser.add_argument("--rows", type=int, default=25, help="operators in the table")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--out", type=Path, default=None, help="write OUT.txt (the table) and OUT.json")
    args = parser.parse_args()
    warmup = min(args.steps // 2, load_train_config(args.config).optim.warmup_steps)
    with tempfile.TemporaryDirectory() as tmp:
        config = apply_overrides(load_train_config(args.config),
                                 [f"data.path={args.data}", f"run.out_dir={tmp}/run", f"optim.max_steps={args.steps}",
                                  f"optim.warmup_steps={warmup}",
                                  "run.eval_every=1000000", "run.save_every=1000000", "run.log_every=10",
                                  "run.progress=false", "run.tensorboard=false", *args.set])
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and "cuda" in " ".join(args.set):  # run.device=cuda: the kernels' time too
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            train(config)
        metrics = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
        model_config = json.loads(Path(tmp, "run", "model_config.json").read_text())
    logged = [m for m in metrics if "tokens_per_s" in m and m["step"] > args.skip]
    rate = statistics.median(m["tokens_per_s"] for m in logged)
    last = logged[-1]
    rows_per_step = config.data.batch_size
    seq_len = max(1, round(last["tokens"] / (last["step"] * rows_per_step)))
    flops = family_training_flops_per_token(from_dict(ModelConfig, model_config), seq_len)
    peaks = {"bf16": matmul_peak(torch.bfloat16), "fp32": matmul_peak(torch.float32)}
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=48)
    lines = [f"machine: {machine()}", f"config: {args.config} {' '.join(args.set)}; {args.steps} steps of "
             f"{rows_per_step} rows, mean {seq_len} tokens a row",
             f"tokens/s (median of the steps after {args.skip}): {rate:,.0f}; model FLOPs per token {flops / 1e6:.1f} M "
             f"-> {rate * flops / 1e9:.1f} GFLOP/s; matmul peak (2048^3, {torch.get_num_threads()} threads): bf16 "
             f"{peaks['bf16'] / 1e9:.0f}, fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s; MFU {rate * flops / peaks['bf16']:.1%} "
             f"of bf16, {rate * flops / peaks['fp32']:.1%} of fp32", "", table]
    if len(activities) > 1:  # on a GPU: is the step the kernels' time or the host's launching them?
        lines += ["", "by the device's own time:", prof.key_averages().table(
            sort_by="self_device_time_total", row_limit=args.rows, max_name_column_width=48)]
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(
            {"machine": machine(), "config": args.config, "set": args.set, "steps": args.steps, "tokens_per_s": rate,
             "mean_tokens_per_row": seq_len, "flops_per_token": flops, "peak_bf16": peaks["bf16"],
             "peak_fp32": peaks["fp32"], "mfu_bf16": rate * flops / peaks["bf16"],
             "mfu_fp32": rate * flops / peaks["fp32"],
             "top_ops": [{"name": e.key, "self_cpu_ms": e.self_cpu_time_total / 1e3, "calls": e.count}
                         for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:args.rows]]},
            indent=2) + "\n")


if __name__ == "__main__":
    main()
