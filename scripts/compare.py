"""The equal-budget comparison of every family: the same tokenizer, corpus, token budget (optimizer steps x
sentences, the same sentences in the same order for every family of a seed), `mini` size, a learning-rate grid per
family; then every dev evaluation the project has. One JSON per (family, lr, seed) in results/compare/.

    python scripts/compare.py run --lrs 5e-4 1e-3 --seeds 0            # the grid (trains + evaluates what is missing)
    python scripts/compare.py run --best --seeds 1                     # more seeds at each family's best lr
    python scripts/compare.py run --untrained --seeds 0 1             # each family at random init (STS only)
    python scripts/compare.py sif                                      # + SIF static STS (section 11)
    python scripts/compare.py finetune --code runs/frozen-X --code-label X  # + CoLA fine-tuned (best-lr runs)
    python scripts/compare.py simcse --code runs/frozen-X --code-label X    # + SimCSE, then STS (best-lr runs)
    python scripts/compare.py summarize                                # table (docs/results/families-on-tasks.md) +
    plot
    python scripts/compare.py --tier 2400 run --best-from results/compare --steps 2400 --nbest-limit 100
                                                       # a longer tier in runs/ and results/compare-2400/

Every run: `maskplay pretrain --family F --preset mini` on --data (runs/data-wikigut16k: the shared Wikipedia plus
the Gutenberg subset, `maskplay prepare`, docs/results/families-on-tasks.md) for --steps steps of --batch-size
sentences,
warmup a tenth, linear decay to --steps; held-out loss on run.eval_batches x batch-size held-out sentences (each
family's own objective: comparable across learning rates and seeds of one family, not across families). Then
`maskplay eval sts` (STS-B dev + SICK), `eval spelling` (RWSE, first --spelling-limit items per file), `eval cola`
(zero-shot), `eval nbest` (first --nbest-limit utterances per split), all fp32, each family's default scoring method.
The best lr of a family is the one with the lowest held-out loss on the grid's seed (seed 0). A finished run is skipped; an
unfinished one resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# scripts/ablations.py: one command into a log, a run started or resumed, its metrics, an atomic JSON write
from ablations import pretrain, run_metrics, runner_env, sh, write_json
from study_common import FAMILIES, best_lrs

RUNS = Path("runs/compare")
RESULTS = Path("results/compare")
EVALS = ("sts", "spelling", "cola", "nbest")
# what a family needs to pretrain on plain sentences: UniLM's default objective is seq2seq (source [SEP] target)
FAMILY_SETS = {"unilm": ["model.unilm.objective=mixed"]}


def name(family: str, lr: float, seed: int) -> str:
    return f"{family}-lr{lr:g}-s{seed}"


def train_flops_per_token(config: dict, seq_len: float) -> float:
    """Training matmul FLOPs per input token at the run's mean sequence length (maskplay.runtime.flops)."""
    from maskplay.config import ModelConfig, from_dict
    from maskplay.runtime.flops import family_training_flops_per_token

    return family_training_flops_per_token(from_dict(ModelConfig, config), max(1, round(seq_len)))


def train_and_eval(family: str, lr: float, seed: int, args: argparse.Namespace) -> Path:
    out = RUNS / name(family, lr, seed)
    result = RESULTS / f"{out.name}.json"
    if result.exists():
        return result
    env = runner_env(args.code)
    py = [sys.executable, "-m", "maskplay"]
    log = RUNS / f"{out.name}.log"
    pretrain(out, ["--family", family, "--preset", "mini", "--data", args.data,
                   "--seed", str(seed), "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
                   "--lr", str(lr), "--precision", args.precision, "--max-minutes", "600",
                   f"--set=optim.warmup_steps={args.steps // 10}", f"--set=run.eval_every={args.steps // 4}",
                   f"--set=run.eval_batches={args.eval_batches}", "--set=run.threads=1",
                   f"--set=run.save_every={args.steps // 2}", "--set=run.keep_last=1", "--set=run.log_every=20",
                   "--set=run.progress=false", *(f"--set={x}" for x in FAMILY_SETS.get(family, []))], log, env)
    final = out / "final"
    timing = {}
    for task in EVALS:
        extra = {"spelling": ["--limit", str(args.spelling_limit)], "nbest": ["--limit", str(args.nbest_limit)]}
        if not (out / f"{task}.json").exists():
            t0 = time.perf_counter()
            sh(py + ["eval", task, str(final), "--precision", "fp32", *extra.get(task, []),
                     "--out", str(out / f"{task}.json")], log, env)
            timing[task] = time.perf_counter() - t0
    ev = {task: json.loads((out / f"{task}.json").read_text()) for task in EVALS}
    steps, evals, parameters = run_metrics(out)
    config = json.loads((final / "config.json").read_text())
    tokens = steps[-1]["tokens"]
    per_token = train_flops_per_token(config, tokens / (steps[-1]["step"] * args.batch_size))
    nbest = ev["nbest"]["results"]
    files = ev["spelling"]["results"]["files"]
    record = {
        "family": family, "lr": lr, "seed": seed, "steps": steps[-1]["step"], "batch_size": args.batch_size,
        "tokens": tokens, "train_flops": per_token * tokens, "wall_s": steps[-1]["elapsed_s"],
        "data": Path(args.data).name, "code": args.code_label,
        "parameters": parameters,
        "heldout_loss": evals[-1]["eval_loss"],
        "heldout_sentences": args.eval_batches * args.batch_size,
        "stsb_dev_spearman": ev["sts"]["results"]["stsb"]["spearman"],
        "sick_spearman": ev["sts"]["results"]["sick"]["spearman"],
        "rwse_method": ev["spelling"].get("method"),
        "rwse": {f: {"items": v["items"], "top1": v["top1"], "pair_accuracy": v["pair_accuracy"]}
                 for f, v in files.items()},
        "cola_method": ev["cola"].get("method"),
        "cola_in_domain_mcc": ev["cola"]["results"]["in_domain_dev"]["mcc"],
        "cola_out_of_domain_mcc": ev["cola"]["results"]["out_of_domain_dev"]["mcc"],
        "nbest": {split: {"one_best_wer": v["one_best_wer"], "reranked_wer": v["reranked_wer"],
                          "relative_change": (v["reranked_wer"] - v["one_best_wer"]) / v["one_best_wer"],
                          "weight": v["weight"], "tuned_on": v["tuned_on"]} for split, v in nbest.items()},
        "eval_seconds": timing,
        "curve": [{"step": m["step"], "tokens": m.get("tokens"), "elapsed_s": m["elapsed_s"], "loss": m["loss"]}
                  for m in steps],
        "eval_curve": [{"step": m["step"], "elapsed_s": m["elapsed_s"], "loss": m["eval_loss"]} for m in evals],
    }
    write_json(result, record)
    return result


def untrained(family: str, seed: int, args: argparse.Namespace) -> Path:
    """The reference point of every embedding number: the family's `mini` model at its random initialisation
    (mean-pooled random token vectors are a bag of words), evaluated on STS like the trained ones."""
    import torch

    from maskplay.data.tokenizer import load_tokenizer
    from maskplay.families import build_model
    from maskplay.tasks.train.config import ModelSection

    out = RUNS / f"{family}-untrained-s{seed}"
    result = RESULTS / f"{out.name}.json"
    if result.exists():
        return result
    tokenizer = load_tokenizer(Path(args.data))
    torch.manual_seed(seed)
    model = build_model(ModelSection(family=family, preset="mini").build(tokenizer.model_config_ids()))
    model.save_pretrained(out / "final")
    tokenizer.save(out / "final")
    sh([sys.executable, "-m", "maskplay", "eval", "sts", str(out / "final"), "--precision", "fp32",
        "--out", str(out / "sts.json")], RUNS / f"{out.name}.log", runner_env(args.code))
    sts = json.loads((out / "sts.json").read_text())["results"]
    record = {"family": family, "seed": seed, "untrained": True, "stsb_dev_spearman": sts["stsb"]["spearman"],
              "sick_spearman": sts["sick"]["spearman"], "code": args.code_label}
    write_json(result, record)
    return result


def load_untrained() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*-untrained-s[0-9]*.json"))]


def load_results(directory: Path | None = None) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((directory or RESULTS).glob("*-lr*-s[0-9]*.json"))]


def cmd_run(args: argparse.Namespace) -> None:
    RUNS.mkdir(parents=True, exist_ok=True)
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown family {unknown[0]!r}; families: {', '.join(FAMILIES)}")
    if args.untrained:
        jobs = [(f, None, s) for s in args.seeds for f in args.families]
    elif args.best or args.best_from:
        best = best_lrs(load_results(Path(args.best_from) if args.best_from else RESULTS))
        missing = [f for f in args.families if f not in best]
        if missing:  # reported, and the other families go on
            print(f"--best: no finished run of {', '.join(missing)} in {RESULTS} to choose an lr from; skipped",
                  flush=True)
        jobs = [(f, best[f], s) for s in args.seeds for f in args.families if f in best]
    else:
        jobs = [(f, lr, s) for s in args.seeds for lr in args.lrs for f in args.families]
    t0 = time.time()

    def one(job: tuple[str, float | None, int]) -> None:
        try:
            path = untrained(job[0], job[2], args) if job[1] is None else train_and_eval(*job, args)
            print(f"[{time.time() - t0:7.0f} s] done {path}", flush=True)
        except Exception as err:  # one failed run must not stop the others; it is reported and rerun next time
            print(f"[{time.time() - t0:7.0f} s] FAILED {job}: {err}", flush=True)

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(one, jobs))


def cmd_sif(args: argparse.Namespace) -> None:
    """Add the SIF static STS (docs/results/families-on-tasks.md: `--pooling sif --static --remove-components 1`, piece
    counts from the run's own training corpus) to every finished run's JSON, with the checkout's own maskplay."""
    for path in sorted(RESULTS.glob("*-lr*-s[0-9]*.json")):
        record = json.loads(path.read_text())
        if "stsb_sif_spearman" in record:
            continue
        out = RUNS / path.stem
        sh([sys.executable, "-m", "maskplay", "eval", "sts", str(out / "final"), "--precision", "fp32",
            "--pooling", "sif", "--static", "--remove-components", "1", "--frequencies", f"runs/{record['data']}",
            "--out", str(out / "sts-sif.json")], RUNS / f"{path.stem}.log", runner_env("."))
        sts = json.loads((out / "sts-sif.json").read_text())["results"]
        record["stsb_sif_spearman"] = sts["stsb"]["spearman"]
        record["sick_sif_spearman"] = sts["sick"]["spearman"]
        write_json(path, record)
        print(f"sif: {path}", flush=True)


def best_runs(families: list[str]) -> list[Path]:
    """The result JSON of every seed at each family's best learning rate: the runs the table reports."""
    records = load_results()
    best = best_lrs(records)
    return [RESULTS / f"{name(f, best[f], s)}.json" for f in families if f in best
            for s in sorted({r["seed"] for r in records if r["family"] == f and r["lr"] == best[f]})]


def update_record(path: Path, key: str, value: dict) -> None:
    """Add one stage's numbers to a run's JSON under a file lock: the stages run side by side, each reading the
    record, working for minutes, then writing it; without the lock one would write back what the other replaced."""
    with open(RUNS / f"{path.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(path.read_text())
        record[key] = value
        write_json(path, record)


def finetune_cola(path: Path, args: argparse.Namespace) -> None:
    """Section 6's CoLA recipe on one run: 3 epochs of the in-domain train split, batch 32, lr 1e-4, 10 %
    warmup, a linear head on the family's default pooling, dev MCC every 100 steps; best (optimistic, the GLUE-dev
    convention) and last evaluation recorded."""
    record = json.loads(path.read_text())
    if "cola_finetuned" in record:
        return
    out = RUNS / path.stem
    cola = Path(args.shared) / "cola" / "raw"
    sh([sys.executable, "-m", "maskplay", "finetune", str(out / "final"), "--task", "classify",
        "--train", str(cola / "in_domain_train.tsv"), "--dev", str(cola / "in_domain_dev.tsv"),
        "--out", str(out / "cola-ft"), "--epochs", "3", "--batch-size", "32", "--lr", "1e-4", "--eval-every", "100",
        "--threads", "1", "--seed", str(record["seed"]), "--results", str(out / "cola-ft.json")],
        RUNS / f"{path.stem}.log", runner_env(args.code))
    ft = json.loads((out / "cola-ft.json").read_text())
    update_record(path, "cola_finetuned", {
        "best_mcc": ft["best"]["dev_mcc"] * 100, "best_step": ft["best"]["step"],
        "last_mcc": ft["history"][-1]["dev_mcc"] * 100, "steps": ft["steps"], "pooling": ft["head"]["pooling"],
        "seconds": ft["seconds"], "recipe": "3 epochs, batch 32, lr 1e-4, warmup 10 %, linear head, dev every 100",
        "code": args.code_label})
    shutil.rmtree(out / "cola-ft", ignore_errors=True)  # the fine-tuned weights: only the numbers are kept


def simcse(path: Path, args: argparse.Namespace) -> None:
    """Section 7's unsupervised SimCSE on one run at a fixed step budget (the same sentences for every family
    of a seed), then `eval sts` (mean pooling, fp32) on the result."""
    record = json.loads(path.read_text())
    if "simcse" in record:
        return
    out = RUNS / path.stem
    log, env = RUNS / f"{path.stem}.log", runner_env(args.code)
    sh([sys.executable, "-m", "maskplay", "simcse", str(out / "final"), "--out", str(out / "simcse"),
        "--max-steps", str(args.steps), "--batch-size", "64", "--lr", str(args.lr), "--sentences",
        str(args.steps * 64), "--max-length", "32", "--threads", "1", "--precision", "auto",
        "--seed", str(record["seed"]), "--overwrite"], log, env)
    sh([sys.executable, "-m", "maskplay", "eval", "sts", str(out / "simcse"), "--precision", "fp32",
        "--out", str(out / "sts-simcse.json")], log, env)
    sts = json.loads((out / "sts-simcse.json").read_text())["results"]
    trained = json.loads((out / "simcse" / "simcse.json").read_text())
    update_record(path, "simcse", {
        "stsb_dev_spearman": sts["stsb"]["spearman"], "sick_spearman": sts["sick"]["spearman"], "steps": args.steps,
        "batch_size": 64, "lr": args.lr, "precision": trained["options"]["precision"], "seconds": trained["seconds"],
        "code": args.code_label})
    shutil.rmtree(out / "simcse", ignore_errors=True)


def cmd_stage(args: argparse.Namespace) -> None:
    stage = {"finetune": finetune_cola, "simcse": simcse}[args.command]
    t0 = time.time()

    def one(path: Path) -> None:
        try:
            stage(path, args)
            print(f"[{time.time() - t0:7.0f} s] {args.command} done {path}", flush=True)
        except Exception as err:  # reported; the others go on, and a rerun does what is missing
            print(f"[{time.time() - t0:7.0f} s] {args.command} FAILED {path}: {err}", flush=True)

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(one, best_runs(args.families)))


def cmd_summarize(args: argparse.Namespace) -> None:
    from compare_report import write_report  # scripts/compare_report.py

    write_report(load_results(), Path(args.table or RESULTS / "table.md"),
                 Path(args.plot or f"docs/results/{RESULTS.name}.png"), load_untrained(), tier=RESULTS.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", default="", help="a budget tier of its own: runs/compare-TIER, results/compare-TIER")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--families", nargs="+", default=list(FAMILIES))
    run.add_argument("--seeds", nargs="+", type=int, default=[0])
    run.add_argument("--lrs", nargs="+", type=float, default=[5e-4, 1e-3])
    run.add_argument("--best", action="store_true", help="each family at its best lr so far (instead of --lrs)")
    run.add_argument("--best-from", default="", help="each family at the best lr of the runs in this results "
                     "directory (another tier's grid)")
    run.add_argument("--untrained", action="store_true", help="only each family's untrained model, STS only")
    run.add_argument("--steps", type=int, default=600)
    run.add_argument("--batch-size", type=int, default=32)
    run.add_argument("--precision", default="auto")
    run.add_argument("--eval-batches", type=int, default=40)
    run.add_argument("--spelling-limit", type=int, default=200)
    run.add_argument("--nbest-limit", type=int, default=200)
    run.add_argument("--data", default="runs/data-wikigut16k")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--code", default=".", help="the checkout whose src/ the runs import (a frozen copy)")
    run.add_argument("--code-label", default="", help="the commit that checkout is, recorded in each JSON")
    sub.add_parser("sif", help="add SIF static STS to every finished run (this checkout's maskplay)")
    for stage, what in (("finetune", "CoLA fine-tuning (section 6's recipe)"), ("simcse", "unsupervised SimCSE")):
        p = sub.add_parser(stage, help=f"add {what} to every seed of each family's best-lr run")
        p.add_argument("--families", nargs="+", default=list(FAMILIES))
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--code", default=".")
        p.add_argument("--code-label", default="")
        p.add_argument("--shared", default="../shared/data")
        if stage == "simcse":
            p.add_argument("--steps", type=int, default=300)
            p.add_argument("--lr", type=float, default=3e-5)
    summ = sub.add_parser("summarize")
    summ.add_argument("--table", default=None, help="default: RESULTS_DIR/table.md")
    summ.add_argument("--plot", default=None, help="default: docs/results/compare[-TIER].png")
    args = parser.parse_args()
    if args.tier:
        global RUNS, RESULTS
        RUNS, RESULTS = Path(f"runs/compare-{args.tier}"), Path(f"results/compare-{args.tier}")
    {"run": cmd_run, "sif": cmd_sif, "finetune": cmd_stage, "simcse": cmd_stage,
     "summarize": cmd_summarize}[args.command](args)


if __name__ == "__main__":
    main()
