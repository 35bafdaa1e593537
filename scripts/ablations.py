"""The ablation study: every architecture switch against the default, T-TA and BERT at the mini size, equal
token budget, several seeds; then depth 3/6/12; then recipe changes (RECIPE_ROWS). One JSON per
(family, row, seed) in results/ablations/.

    python scripts/ablations.py run --families tta bert --seeds 0 1 --workers 2      # trains + evaluates what is missing
    python scripts/ablations.py run --rows depth6 depth12 ...                        # the depth rows
    python scripts/ablations.py summarize                                         # the table in docs/results/ablations.md

Every run: `maskplay pretrain --config configs/mini-FAMILY.toml` on runs/data-wiki16k for --steps optimizer steps
of --batch-size sentences (the same sentences in the same order for every row of a seed: data.seed), learning
rate schedule ending at --steps; held-out loss on the first run.eval_batches x batch-size sentences of the valid
split (fixed, the same for every run); then `maskplay eval sts` (STS-B dev, fp32) and `maskplay eval spelling`
(RWSE, fp32, first --spelling-limit items of each file). A finished run (final/ and its JSON) is skipped, so the
script resumes after an interruption; an unfinished run continues from its last checkpoint (`--resume`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path("runs/ablations")
RESULTS = Path("results/ablations")

# row name -> ModelConfig overrides (docs/guides/switches.md); "default" is each family's mini preset unchanged.
ROWS: dict[str, list[str]] = {
    "default": [],
    "positions=sinusoidal": ["model.positions=sinusoidal"],
    "positions=rotary": ["model.positions=rotary"],
    "positions=t5": ["model.positions=t5"],
    "positions=alibi": ["model.positions=alibi"],
    "positions=none": ["model.positions=none"],
    "key_size=128": ["model.key_size=128"],
    "key_size=16": ["model.key_size=16"],
    "talking_heads": ["model.talking_heads=true"],
    "norm=pre": ["model.norm_placement=pre"],
    "norm=deepnorm": ["model.norm_placement=deepnorm"],
    "norm=rmsnorm": ["model.norm=rmsnorm"],
    "ffn=swiglu": ["model.ffn=swiglu"],
    "ffn=geglu": ["model.ffn=geglu"],
    "ffn_bias=false": ["model.ffn_bias=false"],
    "attention=synthesizer-random": ["model.attention=synthesizer-random"],
    "attention=synthesizer-dense": ["model.attention=synthesizer-dense"],
    "attention=lsra": ["model.attention=lsra"],
    "share_layers": ["model.share_layers=true"],
    "embedding_size=128": ["model.embedding_size=128"],
    # does T-TA (Shin et al. 2020) keep up with BERT as depth grows (mini width, the same tokens)
    "depth=6": ["model.num_layers=6"],
    "depth=12": ["model.num_layers=12"],
    # the same with the switch that lowered held-out loss most for both families at depth 3 (rotary)
    "rotary+depth=6": ["model.positions=rotary", "model.num_layers=6"],
    "rotary+depth=12": ["model.positions=rotary", "model.num_layers=12"],
}
DEPTH_ROWS = ("depth=6", "depth=12", "rotary+depth=6", "rotary+depth=12")

# recipe changes, each measured like a switch. "{half}" is half the run's steps: a warmup that long makes
# the linear schedule a one-cycle (triangular) one, as Cramming's. Cramming (Geiping & Goldstein 2023): pre-LN, no
# biases, a gated FFN, no dropout in pretraining, one-cycle learning rate, gradient clipping 0.5, BERT at 25 % masking.
CRAMMING = ["model.norm_placement=pre", "model.attention_bias=false", "model.ffn_bias=false", "model.ffn=geglu",
            "model.hidden_dropout=0", "model.attention_dropout=0", "optim.clip=0.5", "optim.warmup_steps={half}"]
RECIPE_ROWS: dict[str, list[str]] = {
    "mask=0.25": ["model.mask_probability=0.25"],
    "mask=0.40": ["model.mask_probability=0.4"],
    "dropout=0": ["model.hidden_dropout=0", "model.attention_dropout=0"],
    "one-cycle": ["optim.warmup_steps={half}"],
    "lr=2.5e-4": ["optim.lr=2.5e-4"],
    "lr=1e-3": ["optim.lr=1e-3"],
    "cramming": CRAMMING,
    "rotary+cramming": ["model.positions=rotary", *CRAMMING],
    # the same tokens in fuller rows: ~4 sentences per 128-piece row, so 8 rows a step carry what 32 sentences do
    # (runs/data-wiki16k: 26.6 pieces a sentence, 110.1 a packed row); the held-out set stays the same 1,280 sentences
    "packing": ["data.pack=true", "data.batch_size={batch_quarter}", "run.eval_batches={eval_x4}"],
    # the same batches, shortest first over the whole run
    "curriculum": ["data.curriculum_steps={steps}"],
    # 4x the batch through gradient accumulation at the same tokens: a quarter of the steps
    "batch=128": ["data.batch_size={batch_x4}", "optim.grad_accum=4", "optim.max_steps={quarter}",
                  "optim.warmup_steps={quarter_warmup}", "run.eval_batches={eval_quarter}"],
    # whether width lifts T-TA's plateau: twice the width (8 heads of 64, FFN 2048)
    "width=512": ["model.hidden_size=512", "model.num_heads=8", "model.intermediate_size=2048"],
    "batch=128+lr=1e-3": ["data.batch_size={batch_x4}", "optim.grad_accum=4", "optim.max_steps={quarter}",
                          "optim.warmup_steps={quarter_warmup}", "run.eval_batches={eval_quarter}", "optim.lr=1e-3"],
}
ROWS.update(RECIPE_ROWS)
# what a row adds for one family only (T-TA has no masking to change)
FAMILY_ONLY = {"mask=0.25": ("bert",), "mask=0.40": ("bert",), "width=512": ("tta",)}
FAMILY_EXTRA = {("cramming", "bert"): ["model.mask_probability=0.25"],
                ("rotary+cramming", "bert"): ["model.mask_probability=0.25"]}


def overrides(family: str, row: str, steps: int, batch_size: int = 32, eval_batches: int = 40) -> list[str]:
    """A row's --set overrides for a run of `steps` steps of `batch_size` sentences (rows that change the batch
    keep the tokens and the held-out sentences equal)."""
    keys = {"half": steps // 2, "steps": steps, "quarter": steps // 4, "quarter_warmup": steps // 40,
            "batch_x4": batch_size * 4, "batch_quarter": batch_size // 4, "eval_x4": eval_batches * 4,
            "eval_quarter": eval_batches // 4}
    return [s.format(**keys) for s in ROWS[row] + FAMILY_EXTRA.get((row, family), [])]


def slug(row: str) -> str:
    return row.replace("=", "-")


def run_dir(family: str, row: str, seed: int) -> Path:
    return RUNS / f"{family}-{slug(row)}-s{seed}"


def result_path(family: str, row: str, seed: int) -> Path:
    return RESULTS / f"{family}-{slug(row)}-s{seed}.json"


def sh(cmd: list[str], log: Path, env: dict[str, str]) -> None:
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {done.returncode}); see {log}")


def runner_env(code: str) -> dict[str, str]:
    """One thread per run, the frozen checkout's src/ imported."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(code).resolve() / "src")}


def pretrain(out: Path, options: list[str], log: Path, env: dict[str, str]) -> None:
    """`maskplay pretrain --out OUT OPTIONS` unless OUT/final is there: an exact resume from OUT's last checkpoint
    after an interruption, else a fresh start (what an interrupted start left is removed)."""
    if (out / "final" / "model.safetensors").exists():
        return
    resume = ["--resume"] if any(out.glob("ckpt-*")) else []
    if out.exists() and not resume:
        shutil.rmtree(out)
    sh([sys.executable, "-m", "maskplay", "pretrain", "--out", str(out), *options, *resume], log, env)


def run_metrics(out: Path) -> tuple[list[dict], list[dict], int]:
    """A finished run's logged training steps, its held-out evaluations and its parameter count."""
    from maskplay.tasks.train.loop import read_metrics

    metrics = read_metrics(out)
    train_log = (out / "train.log").read_text()
    parameters = int(train_log.split(" parameters")[0].rsplit("model, ", 1)[1].replace(",", ""))
    return [m for m in metrics if "tokens_per_s" in m], [m for m in metrics if "eval_loss" in m], parameters


def write_json(path: Path, record: dict) -> None:
    """Atomically: a reader never sees half a result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def train_and_eval(family: str, row: str, seed: int, args: argparse.Namespace) -> Path:
    from maskplay.tasks.train.loop import saved_run_config

    out = run_dir(family, row, seed)
    result = result_path(family, row, seed)
    if result.exists():
        return result
    env = runner_env(args.code)
    py = [sys.executable, "-m", "maskplay"]
    log = RUNS / f"{out.name}.log"
    sets = overrides(family, row, args.steps, args.batch_size, args.eval_batches)
    pretrain(out, ["--config", f"configs/mini-{family}.toml", "--data", args.data,
                   "--seed", str(seed), "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
                   "--lr", str(args.lr), "--precision", args.precision, "--max-minutes", "600",
                   f"--set=optim.warmup_steps={args.steps // 10}", f"--set=run.eval_every={args.steps // 2}",
                   f"--set=run.eval_batches={args.eval_batches}", "--set=run.threads=1",
                   f"--set=run.save_every={args.steps}", "--set=run.keep_last=1", "--set=run.log_every=20",
                   "--set=run.progress=false", *(f"--set={x}" for x in sets)], log, env)
    final = out / "final"
    sh(py + ["eval", "sts", str(final), "--datasets", "stsb", "--precision", "fp32",
             "--out", str(out / "sts.json")], log, env)
    sh(py + ["eval", "spelling", str(final), "--precision", "fp32", "--limit", str(args.spelling_limit),
             "--out", str(out / "spelling.json")], log, env)
    steps, evals, parameters = run_metrics(out)
    warm = [m["tokens_per_s"] for m in steps if m["step"] > args.steps // 10] or [m["tokens_per_s"] for m in steps]
    config = json.loads((final / "config.json").read_text())
    sts = json.loads((out / "sts.json").read_text())["results"]["stsb"]
    spelling = json.loads((out / "spelling.json").read_text())
    train_log = (out / "train.log").read_text()
    run_config = saved_run_config(out)
    record = {
        "family": family, "row": row, "seed": seed, "overrides": sets, "steps": steps[-1]["step"],
        "batch_size": run_config.data.batch_size, "grad_accum": run_config.optim.grad_accum,
        "pack": run_config.data.pack, "curriculum_steps": run_config.data.curriculum_steps,
        "lr": next((float(o.split("=")[1]) for o in sets if o.startswith("optim.lr=")), args.lr),
        "tokens": steps[-1]["tokens"],
        "precision": "bf16" if ", bf16;" in train_log else "fp32" if ", fp32;" in train_log else args.precision,
        "parameters": parameters,
        "heldout_loss": evals[-1]["eval_loss"],
        "heldout_sentences": run_config.run.eval_batches * run_config.data.batch_size,
        "train_loss_last": steps[-1]["loss"], "tokens_per_s": statistics.median(warm),
        "wall_s": steps[-1]["elapsed_s"],
        "stsb_dev_spearman": sts["spearman"],
        "rwse": {name: {"items": f["items"], "top1": f["top1"], "pair_accuracy": f["pair_accuracy"]}
                 for name, f in spelling["results"]["files"].items()},
        "rwse_method": spelling.get("method"), "spelling_limit": args.spelling_limit,
        "config": {k: config[k] for k in ("num_layers", "hidden_size", "num_heads", "positions", "key_size",
                                          "talking_heads", "norm", "norm_placement", "ffn", "ffn_bias",
                                          "share_layers", "attention", "embedding_size") if k in config},
        "curve": [{"step": m["step"], "tokens": m.get("tokens"), "loss": m["loss"]} for m in steps],
        "eval_curve": [{"step": m["step"], "loss": m["eval_loss"]} for m in evals],
        "code": args.code_label,
    }
    write_json(result, record)
    return result


def cmd_run(args: argparse.Namespace) -> None:
    RUNS.mkdir(parents=True, exist_ok=True)
    rows = args.rows or [r for r in ROWS if r not in DEPTH_ROWS and r not in RECIPE_ROWS]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown row {unknown[0]!r}; rows: {', '.join(ROWS)}")
    jobs = [(f, r, s) for s in args.seeds for r in rows for f in args.families if f in FAMILY_ONLY.get(r, (f,))]
    t0 = time.time()

    def one(job: tuple[str, str, int]) -> None:
        try:
            path = train_and_eval(*job, args)
            print(f"[{time.time() - t0:7.0f} s] done {path}", flush=True)
        except Exception as err:  # one failed row must not stop the others; it is reported and rerun next time
            print(f"[{time.time() - t0:7.0f} s] FAILED {job}: {err}", flush=True)

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(one, jobs))


def load_results() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*-s[0-9]*.json"))]  # one per run


def cmd_summarize(args: argparse.Namespace) -> None:
    from ablations_report import write_report  # scripts/ablations_report.py

    write_report(load_results(), Path(args.table), Path(args.plot), row_order=list(ROWS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--families", nargs="+", default=["tta", "bert"])
    run.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    run.add_argument("--rows", nargs="+", default=None, help="default: every switch row (not depth, not recipe)")
    run.add_argument("--steps", type=int, default=600)
    run.add_argument("--batch-size", type=int, default=32)
    run.add_argument("--lr", type=float, default=5e-4)
    run.add_argument("--precision", default="auto")
    run.add_argument("--eval-batches", type=int, default=40)
    run.add_argument("--spelling-limit", type=int, default=200)
    run.add_argument("--data", default="runs/data-wiki16k")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--code", default=".", help="the checkout whose src/ the runs import (a frozen copy)")
    run.add_argument("--code-label", default="", help="the commit that checkout is, recorded in each JSON")
    summ = sub.add_parser("summarize")
    summ.add_argument("--table", default="results/ablations/table.md")
    summ.add_argument("--plot", default="docs/results/ablations.png")
    args = parser.parse_args()
    {"run": cmd_run, "summarize": cmd_summarize}[args.command](args)


if __name__ == "__main__":
    main()
