"""The table of docs/results/families-on-tasks.md from the JSON files beside this script."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAMILIES = [("tta", "T-TA `tta-mini-wiki`"), ("bert", "BERT-MLM `runs/cmp2/bert/final`"),
            ("electra", "ELECTRA `runs/cmp2/electra/final`"), ("unilm", "UniLM `unilm-titles-mini`"),
            ("gpt", "GPT `runs/cmp2/gpt/final`"), ("xlnet", "XLNet `runs/cmp2/xlnet/final` (section 8)")]


def load(name: str) -> dict:
    return json.loads((HERE / name).read_text())


print("| model | pooling | CoLA dev MCC, fine-tuned: best (step) / last | CoLA dev MCC, zero-shot (method) "
      "| STS-B dev Pearson / Spearman, fine-tuned: best (step) | STS-B dev Pearson / Spearman, zero-shot |")
print("|---|---|---|---|---|---|")
for key, label in FAMILIES:
    cola, stsb = load(f"cola-{key}.json"), load(f"stsb-{key}.json")
    zcola, zsts = load(f"zeroshot-{key}-cola.json"), load(f"zeroshot-{key}-sts.json")
    z = zsts["results"]["stsb"]
    print(f"| {label} | {cola['head']['pooling']} "
          f"| **{100 * cola['best']['dev_mcc']:.1f}** ({cola['best']['step']}) / {100 * cola['history'][-1]['dev_mcc']:.1f} "
          f"| {zcola['results']['in_domain_dev']['mcc']:.1f} ({zcola['method']}) "
          f"| **{100 * stsb['best']['dev_pearson']:.1f} / {100 * stsb['best']['dev_spearman']:.1f}** "
          f"({stsb['best']['step']}) "
          f"| {z['pearson']:.1f} / {z['spearman']:.1f} |")
b = load("zeroshot-bert-sts.json")["results"]["stsb"]["baselines"]
print(f"\nSTS-B dev without a model (Pearson / Spearman): bag of words {b['bow']['pearson']:.1f} / "
      f"{b['bow']['spearman']:.1f}, TF-IDF {b['tfidf']['pearson']:.1f} / {b['tfidf']['spearman']:.1f}")
probe = load("stsb-bert-lr5e-4.json")
print(f"BERT STS-B at lr 5e-4: {100 * probe['best']['dev_pearson']:.1f} / {100 * probe['best']['dev_spearman']:.1f} "
      f"(step {probe['best']['step']}); train loss {probe['history'][-1]['train_loss']:.2f}")
