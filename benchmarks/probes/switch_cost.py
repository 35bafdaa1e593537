"""What each of a strict-small recipe's pieces costs its training step: the recipe's step (its architecture
at 12 x 384, LAMB, bf16 autocast, eager: gpu_train_speed.py --recipe's), then the same step with one piece taken out
at a time (disentangled positions, DenseFormer, GEGLU, the value gate, the two extra norms, GPT-BERT's z-loss, LAMB
for fused AdamW), one with the hidden-state dropout `maskplay pretrain` trains with (0.1; the timed recipe step runs
without it), and one with every piece out (a plain model of the size). Each variant's step time and its ratio to the
recipe's, in one run on one device, so a GPU says which piece a faster step must come from.

An H200 ran the GPT-BERT recipe at 110 ms a step, 5 % MFU, and no faster compiled block by block, while
HuggingFace's plain BertForMaskedLM of the size ran 31 ms (both on 2026-11-28): this splits that gap by piece. A piece's
"saving" is the recipe's step less the step without it; the pieces interact (DenseFormer's stream reads what the other
sub-layers write), so the savings need not add up to the plain model's.

    python3 benchmarks/probes/switch_cost.py --device cuda --out switch-cost.json          # about 30 s a family on an H200
    python benchmarks/probes/switch_cost.py --device cpu --batch 16 --families gpt-bert    # this CPU: minutes
    python benchmarks/probes/switch_cost.py --tiny --device cpu --steps 1                   # a dry run
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import machine  # noqa: E402
from gpu_train_speed import Cases, shapes, time_case  # noqa: E402

# each variant: (model overrides, optim overrides); the recipe's own values are configs/babylm/strict-small-*.toml's
PIECES: dict[str, tuple[list[str], list[str]]] = {
    "recipe": ([], []),
    "no disentangled positions (learned absolute)": (["positions=none"], []),
    "no DenseFormer (plain residual)": (["denseformer=false"], []),
    "GELU feed-forward (not GEGLU)": (["ffn=gelu"], []),
    "no value gate": (["value_gate=false"], []),
    "no attention-output and FFN-inner norms": (["attention_output_norm=false", "ffn_inner_norm=false"], []),
    "no z-loss (GPT-BERT)": (["gpt_bert.z_loss=0"], []),
    "fused AdamW (not LAMB)": ([], ["optimizer=adamw"]),
    "with hidden dropout 0.1 (as pretrain trains)": (["hidden_dropout=0.1"], []),
    "plain (every piece out)": (["positions=none", "denseformer=false", "ffn=gelu", "value_gate=false",
                                 "attention_output_norm=false", "ffn_inner_norm=false", "gpt_bert.z_loss=0"],
                                ["optimizer=adamw"]),
}


def variants_for(family: str, chosen: list[str] | None) -> dict[str, tuple[list[str], list[str]]]:
    """The variants that apply to `family` (z-loss is GPT-BERT's; the plain model keeps the family's objective)."""
    out = {}
    for name, (model_sets, optim_sets) in PIECES.items():
        if chosen and name != "recipe" and not any(c in name for c in chosen):
            continue
        if family != "gpt-bert":
            if name.startswith("no z-loss"):
                continue
            model_sets = [s for s in model_sets if not s.startswith("gpt_bert.")]
        out[name] = (model_sets, optim_sets)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt-bert"], choices=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--pieces", nargs="+", default=None,
                   help="only the variants whose names contain one of these words (the recipe is always timed)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=0, help="rows a step (default: the recipe's 256; 4 with --tiny)")
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--tiny", action="store_true", help="the 2-layer, 32-wide shape, for a dry run")
    p.add_argument("--out", default=None, help="write the results as JSON here (after every variant)")
    args = p.parse_args()
    device = torch.device(args.device)
    shape = replace(shapes(args.tiny)["babylm"], **({"batch": args.batch} if args.batch else {}),
                    **({"seq_len": args.seq_len} if args.seq_len else {}))
    result = {"machine": machine(), "device": args.device, "torch": torch.__version__, "shape": vars(shape),
              "args": {k: v for k, v in vars(args).items() if k != "out"}, "rows": []}
    print(result["machine"], flush=True)
    # gpu_train_speed.py --recipe's step, eager (as `maskplay pretrain` runs the recipes), its overrides the variant's
    cases = Cases(argparse.Namespace(compile="off", recipe_compile="off"), device)
    for family in args.families:
        base = None
        variants = list(variants_for(family, args.pieces).items())
        # the recipe first and again last: the first case on a device also pays its warm-up (kernel choices, the
        # allocator's growth); the ratios are to the second, and the two together say how steady the timing was
        for name, (model_sets, optim_sets) in [*variants, ("recipe (again)", variants[0][1])]:
            step, _, info = cases.ours(shape, family, recipe=True, model_sets=model_sets, optim_sets=optim_sets)
            seconds, _, memory = time_case(step, device, args.warmup, args.steps)
            params = info["parameters"]
            del step
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            base = seconds if name.startswith("recipe") else base
            row = {"family": family, "variant": name, "model_set": model_sets, "optim_set": optim_sets,
                   "step_ms": 1000 * seconds, "vs_recipe": seconds / base, "saving_ms": 1000 * (base - seconds),
                   "peak_mb": memory, "parameters": params}
            result["rows"].append(row)
            if name == "recipe (again)":  # every ratio to the warm recipe's step
                for r in result["rows"]:
                    if r["family"] == family:
                        r["vs_recipe"], r["saving_ms"] = r["step_ms"] / row["step_ms"], row["step_ms"] - r["step_ms"]
            print(f"{family:<9} {name:<48} {row['step_ms']:9.1f} ms  {row['peak_mb']:9.0f} MB  "
                  f"{params / 1e6:5.1f} M parameters", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"{family}: against the recipe's warm step ({result['rows'][-1]['step_ms']:.1f} ms)")
        for r in (r for r in result["rows"] if r["family"] == family and not r["variant"].startswith("recipe")):
            print(f"  {r['variant']:<48} {r['vs_recipe']:5.2f}x  saves {r['saving_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
