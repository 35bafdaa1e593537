"""Time to quality: what a recipe reaches on BLiMP-dev after N minutes of training on this machine, next to the
HuggingFace recipe a user would write from its documentation, on the same text, tokenizer and evaluation code.

    python benchmarks/time_to_quality.py --data runs/data-wiki16k --minutes 20 --points 4 \\
        --recipe gpt=configs/mini-gpt.toml --recipe gpt-bert=configs/mini-gpt-bert.toml --hf bert --hf gpt2 \\
        --blimp-limit 100 --out results/time-to-quality/mini-20min.json --plot docs/results/ttq-mini-20min.png

Each maskplay recipe is a training config (`maskplay pretrain --config`): a short probe (not counted) measures its
steps per minute so that optim.max_steps ends the learning-rate schedule at the budget; then it trains in --points
chunks of budget / points minutes (run.max_minutes counts training time only, resumes included) and its exported
model is scored on BLiMP-dev after each chunk (maskplay.tasks.eval.blimp, the family's own score), outside the budget.
The HuggingFace baselines (--hf bert: BertForMaskedLM, --hf gpt2: GPT2LMHeadModel) have the recipe's preset size,
AdamW with linear warmup (10 %) and decay, DataCollatorForLanguageModeling, the prepared corpus's token rows in a
seeded shuffle, batch 32, fp32 (HuggingFace's default; maskplay uses its precision "auto"), the same chunks and the
same BLiMP code: the BERT converted to a maskplay BertMLM (families/hf) and scored by PLL, GPT-2 by the sum of
log p(piece | the pieces before it), the rule maskplay's causal score applies.

Writes --out (JSON: the curves, the machine, the budget) and --plot (BLiMP macro accuracy against training minutes,
the BLiMP paper's reference points as lines). The HuggingFace models are left in WORK/hf-KIND/final (the BERT as a
maskplay model directory) for the same `maskplay eval` commands as the recipes' WORK/NAME/run/final.

An ablation is one config and a change per name: `--recipe no-gate=C.toml --recipe-set no-gate:model.value_gate=false`.
A long budget survives a stopped job (a signal, a job's time limit): each recipe keeps its plan and points in
WORK/NAME/plan.json and its trainer checkpoints (run.save_every), a signal stops it after a checkpoint, and
`--resume` with the same arguments goes on from there (run.max_minutes counts training time across resumes)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

from maskplay.config import PRESETS, apply_overrides  # noqa: E402
from maskplay.data.dataset import TokenDataset  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import MaskplayModel  # noqa: E402
from maskplay.runtime.model_dir import write_model_dir  # noqa: E402
from maskplay.tasks.eval.blimp import evaluate_blimp, load_blimp  # noqa: E402
from maskplay.tasks.score import Scorer  # noqa: E402
from maskplay.tasks.train import load_train_config, train  # noqa: E402
from maskplay.tasks.train.checkpoint_files import list_checkpoints  # noqa: E402

REFERENCES = {"5-gram": 58.4, "LSTM": 66.5, "Transformer-XL": 67.5, "GPT-2": 81.2}  # these 36 paradigms (MANIFEST)


def blimp_of(model: MaskplayModel, tokenizer: Any, pairs: list, **scorer_options: Any) -> float:
    scorer = Scorer(model.eval(), tokenizer, batch_size=64, **scorer_options)
    return evaluate_blimp(lambda texts: [s.log_prob for s in scorer.score(texts)], pairs)["macro_accuracy"]


def maskplay_curve(name: str, config_path: str, args: argparse.Namespace, pairs: list) -> list[dict[str, Any]]:
    """The recipe trained in --points chunks, its exported model scored after each. WORK/NAME/plan.json keeps the
    planned steps and the points so far, so that --resume continues a stopped run (its trainer from the newest
    checkpoint; run.max_minutes counts training time across resumes) instead of starting again."""
    work = args.work / name
    plan_file = work / "plan.json"
    base = [f"data.path={args.data}", "run.progress=false", "run.tensorboard=false", *args.set,
            *args.recipe_overrides.get(name, [])]
    if args.resume and plan_file.is_file():
        plan = json.loads(plan_file.read_text())
        print(f"{name}: resuming at point {len(plan['curve']) + 1} of {args.points} ({plan['steps']} planned steps)",
              file=sys.stderr, flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
        plan = {"steps": probe_steps_per_budget(config_path, base, work, args), "curve": []}
        work.mkdir(parents=True, exist_ok=True)
        plan_file.write_text(json.dumps(plan, indent=2) + "\n")
    steps, curve = plan["steps"], plan["curve"]
    for k in range(len(curve) + 1, args.points + 1):
        config = apply_overrides(load_train_config(config_path),
                                 [*base, f"run.out_dir={work}/run", f"optim.max_steps={steps}",
                                  f"run.max_minutes={args.minutes * k / args.points}"])
        if config.optim.warmup_steps > steps:
            config = replace(config, optim=replace(config.optim, warmup_steps=steps // 10))
        result = train(config, resume=bool(list_checkpoints(work / "run")))
        if result.status == "interrupted":  # a signal (e.g. a job's time limit): checkpointed; --resume goes on from here
            raise SystemExit(f"{name}: stopped at step {result.step}; continue with --resume")
        model = MaskplayModel.from_pretrained(result.final_dir)
        tokenizer = load_tokenizer(result.final_dir / "tokenizer.json")
        state = json.loads((Path(result.checkpoint) / "state.json").read_text()) if result.checkpoint else {}
        curve.append({"minutes": args.minutes * k / args.points, "step": result.step, "planned_steps": steps,
                      "tokens": state.get("tokens_seen"), "eval_loss": result.eval_loss,
                      "blimp_macro": blimp_of(model, tokenizer, pairs)})
        plan_file.write_text(json.dumps(plan, indent=2) + "\n")
        print(f"{name}: {curve[-1]}", file=sys.stderr, flush=True)
        if result.status == "finished":
            break
    return curve


def probe_steps_per_budget(config_path: str, base: list[str], work: Path, args: argparse.Namespace) -> int:
    """A short run (not counted) measures the recipe's steps per minute: optim.max_steps that ends the learning-rate
    schedule at the budget."""
    probe = apply_overrides(load_train_config(config_path), [*base, f"run.out_dir={work}/probe", "run.eval_batches=1",
                                                             f"run.stop_at_step={args.probe_steps}"])
    result = train(probe)
    # the training loop's own time (state.json's elapsed_s): start-up and data preparation are not steps
    state = json.loads((Path(result.checkpoint) / "state.json").read_text())
    shutil.rmtree(work / "probe", ignore_errors=True)
    per_step = mean_tokens_per_step(Path(args.data), probe.data.batch_size)
    if per_step is None or not state.get("tokens_seen"):
        return max(10, int(result.step / (state["elapsed_s"] / 60) * args.minutes * args.plan_share))
    # planned by tokens, not steps: length-bucketed batches start short (1,550 tokens a step over the first 20
    # against 1,840 on average for runs/data-wg8k), so the probe's steps per minute overstate the run's (a plan 19 %
    # too long: the decay far from its end when the budget stopped the run)
    tokens_per_s = state["tokens_seen"] / state["elapsed_s"]
    return max(10, int(tokens_per_s * args.minutes * 60 * args.plan_share / per_step))


def mean_tokens_per_step(data: Path, batch_size: int) -> float | None:
    """The corpus's mean tokens in a batch of `batch_size` sequences (its prepared train split); None where there is
    no split or it is empty."""
    if not (data / "train").is_dir():
        return None
    rows = TokenDataset(data / "train")
    return rows.num_tokens / len(rows) * batch_size if len(rows) else None


def hf_model(kind: str, preset: str, vocab_size: int, pad_id: int, layers: int | None = None) -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    p = {**PRESETS[preset], **({"num_layers": layers} if layers else {})}
    if kind == "bert":
        return BertForMaskedLM(BertConfig(vocab_size=vocab_size, hidden_size=p["hidden_size"],
                                          num_hidden_layers=p["num_layers"], num_attention_heads=p["num_heads"],
                                          intermediate_size=p["intermediate_size"],
                                          max_position_embeddings=p["max_position"], pad_token_id=pad_id))
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_embd=p["hidden_size"], n_layer=p["num_layers"],
                                      n_head=p["num_heads"], n_inner=p["intermediate_size"],
                                      n_positions=p["max_position"]))


def hf_bert_as_maskplay(model: torch.nn.Module, tokenizer: Any) -> MaskplayModel:
    from types import SimpleNamespace

    from maskplay.families.hf import from_hf

    hf_config = SimpleNamespace(**model.config.to_dict())
    return from_hf("BertForMaskedLM", (hf_config, model.state_dict()), special_ids=tokenizer.model_config_ids())


def hf_blimp(kind: str, model: torch.nn.Module, tokenizer: Any, pairs: list) -> float:
    """The same BLiMP code: a BERT through maskplay's converter and PLL; GPT-2 by the causal rule."""
    model.eval()
    if kind == "bert":
        return blimp_of(hf_bert_as_maskplay(model, tokenizer), tokenizer, pairs, method="pll")

    def score(texts: list[str]) -> list[float]:
        out = []
        with torch.inference_mode():
            for text in texts:
                ids = torch.tensor([tokenizer.encode(text)])  # [SOS] pieces [EOS]
                log_p = model(ids).logits[0, :-1].float().log_softmax(-1)
                out.append(float(log_p[torch.arange(ids.shape[1] - 2), ids[0, 1:-1]].sum()))
        return out

    return evaluate_blimp(score, pairs)["macro_accuracy"]


def hf_curve(kind: str, args: argparse.Namespace, pairs: list) -> list[dict[str, Any]]:
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast, get_linear_schedule_with_warmup

    tokenizer = load_tokenizer(Path(args.data) / "tokenizer.json")
    fast = PreTrainedTokenizerFast(tokenizer_file=str(Path(args.data) / "tokenizer.json"), pad_token="[PAD]",
                                   mask_token="[MASK]", unk_token="[UNK]")
    collator = DataCollatorForLanguageModeling(fast, mlm=kind == "bert", mlm_probability=0.15)
    rows = TokenDataset(Path(args.data) / "train")
    torch.manual_seed(0)
    model = hf_model(kind, args.preset, tokenizer.vocab_size, tokenizer.special.pad, args.hf_layers)
    order = torch.randperm(len(rows)).tolist()

    def batches():
        for start in range(0, len(order) - args.batch_size + 1, args.batch_size):
            chosen = order[start:start + args.batch_size]
            yield collator([{"input_ids": rows[i][:args.max_length].tolist()} for i in chosen])

    stream, probe_steps = batches(), args.probe_steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.hf_lr, weight_decay=0.01)
    planned, curve, spent, tokens, step = None, [], 0.0, 0, 0
    scheduler = None
    model.train()
    for k in range(1, args.points + 1):
        while spent < args.minutes * 60 * k / args.points:
            batch = next(stream, None)
            if batch is None:
                stream = batches()
                batch = next(stream)
            started = time.monotonic()
            loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         labels=batch["labels"]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            spent += time.monotonic() - started
            step += 1
            tokens += int(batch["attention_mask"].sum())
            if step == probe_steps:  # the schedule's length, from the measured speed, as for maskplay's recipes
                planned = max(10, int(args.minutes * 60 / (spent / step)))
                scheduler = get_linear_schedule_with_warmup(optimizer, planned // 10, planned)
                with warnings.catch_warnings():  # stepped to where training is: no optimizer step is skipped
                    warnings.simplefilter("ignore", UserWarning)
                    for _ in range(step):
                        scheduler.step()
        curve.append({"minutes": args.minutes * k / args.points, "step": step, "planned_steps": planned,
                      "tokens": tokens, "blimp_macro": hf_blimp(kind, model, tokenizer, pairs)})
        model.train()
        print(f"hf-{kind}: {curve[-1]}", file=sys.stderr, flush=True)
    # the final model, for the same evaluations as the recipes' (maskplay eval sts / cola DIR): the BERT converted to
    # a maskplay model directory, GPT-2 in HuggingFace's own format
    final = args.work / f"hf-{kind}" / "final"
    if kind == "bert":
        write_model_dir(hf_bert_as_maskplay(model.eval(), tokenizer), final, tokenizer_from=Path(args.data))
    else:
        model.save_pretrained(final)
        shutil.copy2(Path(args.data) / "tokenizer.json", final / "tokenizer.json")
    return curve


def plot(curves: dict[str, list[dict[str, Any]]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, curve in curves.items():
        ax.plot([p["minutes"] for p in curve], [p["blimp_macro"] for p in curve], marker="o", label=name)
    for label, value in {"chance": 50.0, **REFERENCES}.items():
        ax.axhline(value, color="grey", lw=0.8, ls=":")
        # x in axes coordinates: the labels sit at the left edge whatever the minutes
        ax.text(0.01, value, f"{label} {value}", fontsize=7, va="bottom", color="grey", transform=ax.get_yaxis_transform())
    ax.set_xlabel("training minutes (this machine)")
    ax.set_ylabel("BLiMP-dev macro accuracy %")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a `maskplay prepare` directory (train split + tokenizer.json)")
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget per recipe")
    parser.add_argument("--points", type=int, default=4, help="BLiMP evaluations along the way")
    parser.add_argument("--recipe", action="append", default=[], metavar="NAME=CONFIG.toml")
    parser.add_argument("--hf", action="append", default=[], choices=["bert", "gpt2"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every recipe")
    parser.add_argument("--recipe-set", action="append", default=[], metavar="NAME:KEY=VALUE",
                        help="override for one recipe (an ablation: one config, a piece changed per name)")
    parser.add_argument("--preset", default="mini", help="the HF baselines' size")
    parser.add_argument("--hf-layers", type=int, default=None,
                        help="the HF baselines' depth (default: the preset's), to match a recipe's model")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--hf-lr", type=float, default=5e-4)
    parser.add_argument("--probe-steps", type=int, default=20)
    parser.add_argument("--plan-share", type=float, default=1.0,
                        help="plan the schedule for this share of the probe's steps per budget (below 1: the decay "
                             "ends in time on a machine a little slower than during the probe)")
    parser.add_argument("--blimp", default=None, help="BLiMP folder (default: ../shared/data/blimp-dev)")
    parser.add_argument("--blimp-limit", type=int, default=None, help="pairs per paradigm (default: all 1,000)")
    parser.add_argument("--work", type=Path, default=Path("runs/ttq"))
    parser.add_argument("--resume", action="store_true",
                        help="continue the maskplay recipes' runs in --work where they stopped (WORK/NAME/plan.json); "
                             "the HuggingFace baselines start again")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    if not args.minutes > 0 or args.points < 1 or not 0 < args.plan_share <= 1:
        parser.error("--minutes must be positive, --points at least 1 and --plan-share in (0, 1]")
    names = [spec.partition("=")[0] for spec in args.recipe]
    args.recipe_overrides = {}  # NAME -> its --recipe-set KEY=VALUEs, in order
    for spec in args.recipe_set:
        name, _, override = spec.partition(":")
        if name not in names or "=" not in override:
            parser.error(f"--recipe-set {spec!r}: expected NAME:KEY=VALUE with NAME one of the --recipe names {names}")
        args.recipe_overrides.setdefault(name, []).append(override)
    folder = Path(args.blimp) if args.blimp else Path(__file__).resolve().parents[2] / "shared" / "data" / "blimp-dev"
    pairs = load_blimp(sorted(folder.glob("*.jsonl*")), limit=args.blimp_limit)
    curves: dict[str, list[dict[str, Any]]] = {}
    for spec in args.recipe:
        name, _, path = spec.partition("=")
        curves[name] = maskplay_curve(name, path, args, pairs)
    for kind in args.hf:
        curves[f"hf-{kind}"] = hf_curve(kind, args, pairs)
    result = {"machine": machine(), "budget_minutes": args.minutes, "points": args.points,
              "blimp_pairs_per_paradigm": args.blimp_limit or 1000, "references": REFERENCES,
              "data": Path(args.data).name, "curves": curves,
              "note": "maskplay recipes at their config's precision (auto: bf16 where faster); HF baselines fp32"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot is not None:
        plot(curves, args.plot, f"{args.minutes:g} training minutes a recipe, {machine()}")
    for name, curve in curves.items():
        best = max(p["blimp_macro"] for p in curve)
        print(f"{name:<20} final {curve[-1]['blimp_macro']:.1f}  best {best:.1f}  steps {curve[-1]['step']}")


if __name__ == "__main__":
    main()
