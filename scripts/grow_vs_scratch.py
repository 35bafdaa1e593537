"""Grown versus from-scratch pretraining (the "lossless scale-up" plot; docs/guides/switches.md, "Lossless growth").

    python scripts/grow_vs_scratch.py run    # the five steps below, one after another (skips what is done)
    python scripts/grow_vs_scratch.py plot   # docs/grow_vs_scratch.png and results/grow/curves.json

1. small3: a 3-layer pre-LN mini BERT, SMALL_STEPS steps (data seed 1, so that the continued run mostly meets
   sentences the small model has not seen);
2. `maskplay grow` it to 6 layers (exact under pre-LN: the new blocks' output projections are zero);
3. grown6: pretraining continued from the grown model for BIG_STEPS steps;
4. scratch6: the 6-layer pre-LN mini BERT from random weights for the same BIG_STEPS steps;
5. scratch6-equal: the same for as many steps as small3 + grown6 cost together (flops.py: a 3-layer step costs 0.56
   of a 6-layer one here, the tied 16k-word MLM head being shared), with its schedule stretched to them.
Steps 3 to 5 share every other setting (data seed 0, warmup, peak learning rate, linear decay to 0 at the last step).

    python scripts/grow_vs_scratch.py evaluate   # every final model on the whole held-out split, one masking

The runs' own held-out losses use 640 sentences whose masking is drawn from the run's data seed, so small3 (seed 1)
is scored on other masked positions than the rest; `evaluate` scores every final model on the same 5,175 sentences
and positions (results/grow/final_eval.json).
Everything runs on one thread (run.threads = 1) with --precision auto; run directories under runs/grow/."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path("runs/grow")  # relative to the repository root, so that nothing written names this machine's paths
SMALL_STEPS = 2500
BIG_STEPS = 2500
COMMON = ["--config", "configs/mini-bert.toml", "--data", "runs/data-wiki16k", "--precision", "auto",
          "--set", "model.norm_placement=pre", "--set", "run.threads=1", "--set", "optim.warmup_steps=250",
          "--set", "run.eval_every=250", "--set", "run.eval_batches=20", "--set", "run.log_every=25",
          "--set", "run.save_every=0", "--set", "run.max_minutes=90"]
CURVES = {"small3": "3 layers (small)", "grown6": "6 layers, grown from the small model",
          "scratch6": "6 layers, from scratch", "scratch6-equal": "6 layers, from scratch, the compute of small + grown"}
SEQ_LEN = 27  # mean tokens per training sentence of runs/data-wiki16k (13,581,367 / 510,960)


def equal_steps() -> int:
    """6-layer steps costing what SMALL_STEPS 3-layer steps and BIG_STEPS 6-layer steps cost together (flops.py)."""
    from maskplay.config import preset
    from maskplay.runtime.flops import predicted_fraction, training_flops_per_token

    small, big = (training_flops_per_token(preset("mini", family="bert", num_layers=n), SEQ_LEN,
                                           predicted_fraction("bert")) for n in (3, 6))
    return BIG_STEPS + round(SMALL_STEPS * small / big)


def maskplay(*args: str, log: Path) -> None:
    """One maskplay command, its output appended to `log`; stops the script if it fails."""
    with open(log, "a") as out:
        out.write(f"$ maskplay {' '.join(args)}\n")
        out.flush()
        code = subprocess.call([sys.executable, "-m", "maskplay", *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    if code:
        raise SystemExit(f"maskplay {args[0]} failed ({code}); see {log}")


def run() -> None:
    (ROOT / RUNS).mkdir(parents=True, exist_ok=True)
    log = ROOT / RUNS / "run.log"
    if not (ROOT / RUNS / "small3/final").exists():
        maskplay("pretrain", *COMMON, "--out", str(RUNS / "small3"), "--max-steps", str(SMALL_STEPS), "--seed", "1",
                 log=log)
    if not (ROOT / RUNS / "grown6-init").exists():
        maskplay("grow", str(RUNS / "small3/final"), "--layers", "6", "--out", str(RUNS / "grown6-init"), log=log)
    if not (ROOT / RUNS / "grown6/final").exists():
        maskplay("pretrain", *COMMON, "--init", str(RUNS / "grown6-init"), "--out", str(RUNS / "grown6"),
                 "--max-steps", str(BIG_STEPS), "--seed", "0", log=log)
    if not (ROOT / RUNS / "scratch6/final").exists():
        maskplay("pretrain", *COMMON, "--set", "model.num_layers=6", "--out", str(RUNS / "scratch6"),
                 "--max-steps", str(BIG_STEPS), "--seed", "0", log=log)
    if not (ROOT / RUNS / "scratch6-equal/final").exists():
        maskplay("pretrain", *COMMON, "--set", "model.num_layers=6", "--out", str(RUNS / "scratch6-equal"),
                 "--max-steps", str(equal_steps()), "--seed", "0", log=log)


def evaluate() -> None:
    """Every final model (and the grown one before training) on the whole held-out split, the same masked positions
    for all, fp32: results/grow/final_eval.json."""
    import torch

    from maskplay.data.dataset import TokenDataset
    from maskplay.families import MaskplayModel
    from maskplay.tasks.train.batches import eval_batches

    torch.set_num_threads(1)
    valid = TokenDataset(ROOT / "runs/data-wiki16k/valid")
    batches = eval_batches(valid, len(valid), 32, 128, 0)
    results = {}
    for name in ("small3/final", "grown6-init", "grown6/final", "scratch6/final", "scratch6-equal/final"):
        if not (ROOT / RUNS / name).exists():
            continue
        model = MaskplayModel.from_pretrained(ROOT / RUNS / name).eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for j, (ids, mask) in enumerate(batches):
                batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(12345 + j))
                n = int((batch["labels"] != -100).sum())
                total += float(model(**batch).loss) * n
                count += n
        results[name] = {"held_out_loss": total / count, "targets": count, "sentences": len(valid),
                         "layers": model.config.num_layers}
        print(f"{name}: held-out MLM loss {total / count:.4f} over {count} masked tokens")
    out = ROOT / "results/grow"
    out.mkdir(parents=True, exist_ok=True)
    (out / "final_eval.json").write_text(json.dumps(results, indent=1) + "\n")


def curve(name: str) -> dict:
    """A run's held-out losses with the training tokens, FLOPs and seconds spent when each was measured."""
    from maskplay.config import ModelConfig
    from maskplay.runtime.flops import predicted_fraction, training_flops_per_token

    run_dir = ROOT / RUNS / name
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    tokens_at = {r["step"]: r["tokens"] for r in records if "tokens" in r}
    tokens_at[0] = 0
    evals = [r for r in records if "eval_loss" in r]
    config = ModelConfig.from_json(run_dir / "final/config.json")
    last = max(tokens_at)
    seq_len = tokens_at[last] / (last * 32)  # mean tokens per sentence (batch 32): attention's share of the FLOPs
    per_token = training_flops_per_token(config, round(seq_len), predicted_fraction("bert"))
    return {"label": CURVES[name], "layers": config.num_layers, "training_flops_per_token": per_token,
            "step": [r["step"] for r in evals], "eval_loss": [r["eval_loss"] for r in evals],
            "tokens": [tokens_at[r["step"]] for r in evals], "elapsed_s": [r["elapsed_s"] for r in evals],
            "flops": [tokens_at[r["step"]] * per_token for r in evals]}


def plot() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {name: curve(name) for name in CURVES if (ROOT / RUNS / name / "final").exists()}
    small = curves["small3"]
    # the grown run starts where the small one stopped: on the budget axes its spend is added
    offsets = {name: (0, 0.0, 0.0) for name in curves}
    offsets["grown6"] = (small["tokens"][-1], small["flops"][-1], small["elapsed_s"][-1])
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), sharey=True)
    for name, c in curves.items():
        t0, f0, s0 = offsets[name]
        axes[0].plot([t / 1e6 for t in c["tokens"]], c["eval_loss"], marker=".", label=c["label"])
        axes[1].plot([(t + t0) / 1e6 for t in c["tokens"]], c["eval_loss"], marker=".", label=c["label"])
        axes[2].plot([(f + f0) / 1e12 for f in c["flops"]], c["eval_loss"], marker=".", label=c["label"])
        c["budget_offset"] = {"tokens": t0, "flops": f0, "elapsed_s": s0}
    axes[0].set_xlabel("training tokens of this run (millions)")
    axes[1].set_xlabel("training tokens, the small model's included (millions)")
    axes[2].set_xlabel("training FLOPs, the small model's included (10^12; flops.py)")
    axes[0].set_ylabel("held-out MLM loss (640 sentences)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.set_ylim(top=min(8.0, ax.get_ylim()[1]))
    axes[0].legend()
    fig.suptitle("Mini BERT, pre-LN: 3 layers grown to 6 (maskplay grow) and continued, vs 6 layers from scratch")
    fig.tight_layout()
    (ROOT / "docs").mkdir(exist_ok=True)
    fig.savefig(ROOT / "docs/grow_vs_scratch.png", dpi=110)
    out = ROOT / "results/grow"
    out.mkdir(parents=True, exist_ok=True)
    (out / "curves.json").write_text(json.dumps(curves, indent=1) + "\n")
    for name, c in curves.items():
        print(f"{name}: step {c['step'][-1]}, held-out loss {c['eval_loss'][-1]:.4f}, {c['elapsed_s'][-1]:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["run", "evaluate", "plot"])
    {"run": run, "evaluate": evaluate, "plot": plot}[parser.parse_args().what]()


if __name__ == "__main__":
    main()
