"""Collect results/simcse/*.json into summary.json and print the markdown tables of docs/results/README.md.

    python results/simcse/summarize.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {"tta": "T-TA `tta-mini-wiki` (bundled)", "bert": "BERT-MLM `runs/cmp2/bert/final`",
          "electra": "ELECTRA `runs/cmp2/electra/final` (discriminator)"}


def load(name: str) -> dict | None:
    path = HERE / name
    return json.loads(path.read_text()) if path.is_file() else None


def main() -> None:
    summary: dict = {"models": {}, "baselines": {}}
    for key in MODELS:
        before, after, train = load(f"before-{key}-sts.json"), load(f"after-{key}-sts.json"), load(f"train-{key}.json")
        if before is None or after is None or train is None:
            continue
        curve = {}
        for f in sorted(HERE.glob(f"curve-{key}-ckpt-*.json")):
            step = int(re.search(r"ckpt-(\d+)", f.name).group(1))
            curve[step] = round(json.loads(f.read_text())["results"]["stsb"]["spearman"], 2)
        summary["models"][key] = {
            "steps": train["steps"], "seconds": train["seconds"], "sentences_seen": train["sentences_seen"],
            "first_loss": train["history"][0]["loss"], "final_loss": train["history"][-1]["loss"],
            "options": train["options"],
            **{f"{ds}_{when}": round(r["results"][ds][m], 2) for when, r in (("before", before), ("after", after))
               for ds in ("stsb", "sick") for m in ("spearman",)},
            "stsb_dev_spearman_by_step": {0: round(before["results"]["stsb"]["spearman"], 2), **curve},
        }
        for ds in ("stsb", "sick"):
            b = after["results"][ds]["baselines"]
            summary["baselines"][ds] = {"bow_spearman": round(b["bow"]["spearman"], 2),
                                        "tfidf_spearman": round(b["tfidf"]["spearman"], 2),
                                        "idf_from": b["tfidf"]["idf_from"]}
    runs = HERE.parents[1] / "runs" / "simcse"  # the training records (simcse.json) of the short runs, if present
    for kind in ("sweep", "variant"):
        summary[f"{kind}_3min"] = {}
        for f in sorted(HERE.glob(f"{kind}-*-sts.json")):
            name = f.name.removesuffix("-sts.json").removeprefix(f"{kind}-")
            r = json.loads(f.read_text())["results"]
            entry = {f"{ds}_spearman": round(r[ds]["spearman"], 2) for ds in ("stsb", "sick")}
            record = runs / f"{kind}-{name}" / "simcse.json"
            if record.is_file():
                t = json.loads(record.read_text())
                entry.update(steps=t["steps"], final_loss=t["history"][-1]["loss"], precision=t["options"]["precision"],
                             lr=t["options"]["lr"], dropout=t["options"]["dropout"], pooling=t["options"]["pooling"],
                             diagonal_mask=t["options"]["diagonal_mask"])
            summary[f"{kind}_3min"][name] = entry
    for name in ("bert-first", "tta-nodiag"):
        before = load(f"before-{name}-sts.json")
        if before is not None:
            summary["variant_3min"][f"{name} (before SimCSE)"] = {
                f"{ds}_spearman": round(before["results"][ds]["spearman"], 2) for ds in ("stsb", "sick")}
    alignment = load("alignment.json")
    if alignment is not None:
        summary["alignment_uniformity_stsb_dev"] = alignment
    (HERE / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    base = summary["baselines"]
    print("| model | SimCSE steps in 10 min (sentences) | loss first -> last | STS-B dev Spearman before -> after "
          "| SICK Spearman before -> after |")
    print("|---|---|---|---|---|")
    for key, m in summary["models"].items():
        print(f"| {MODELS[key]} | {m['steps']:,} ({m['sentences_seen']:,}) | {m['first_loss']:.3f} -> "
              f"{m['final_loss']:.4f} | {m['stsb_before']:.1f} -> **{m['stsb_after']:.1f}** | "
              f"{m['sick_before']:.1f} -> **{m['sick_after']:.1f}** |")
    if base:
        print(f"| bag-of-words cosine (no model) | - | - | {base['stsb']['bow_spearman']:.1f} | "
              f"{base['sick']['bow_spearman']:.1f} |")
        print(f"| TF-IDF cosine (no model) | - | - | {base['stsb']['tfidf_spearman']:.1f} | "
              f"{base['sick']['tfidf_spearman']:.1f} |")
    print()
    for key, m in summary["models"].items():
        print(f"{key}: " + ", ".join(f"{s}: {v:.1f}" for s, v in m["stsb_dev_spearman_by_step"].items()))
    print()
    for kind in ("sweep_3min", "variant_3min"):
        for name, v in summary[kind].items():
            print(f"{kind} {name}: STS-B {v['stsb_spearman']:.1f} SICK {v['sick_spearman']:.1f} "
                  + (f"({v['steps']} steps, loss {v['final_loss']:.4f}, {v['precision']})" if "steps" in v else ""))


if __name__ == "__main__":
    main()
