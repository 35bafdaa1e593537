"""Print a markdown evaluation table from `maskplay eval ... --out` JSON files.

    python scripts/results_table.py results/downstream-eval  # FAMILY-TASK.json files (tta-sts.json, ...)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cell(path: Path, pick) -> str:
    if not path.is_file():
        return "-"
    try:
        return pick(json.loads(path.read_text())["results"])
    except (KeyError, TypeError):
        return "?"


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/downstream-eval")
    columns = [
        ("STS-B dev Spearman", "sts", lambda r: f"{r['stsb']['spearman']:.1f}"),
        ("SICK Spearman", "sts", lambda r: f"{r['sick']['spearman']:.1f}"),
        ("spelling top-1 (natural)", "spelling", lambda r: f"{r['files']['en_natural_train']['top1']:.1f}"),
        ("spelling top-1 (artificial noun)", "spelling", lambda r: f"{r['files']['en_artificial_noun']['top1']:.1f}"),
        ("CoLA in-domain MCC", "cola", lambda r: f"{r['in_domain_dev']['mcc']:.1f}"),
        ("CoLA out-of-domain MCC", "cola", lambda r: f"{r['out_of_domain_dev']['mcc']:.1f}"),
        ("WER dev-clean (1-best -> reranked)", "nbest",
         lambda r: f"{r['dev_clean']['one_best_wer']:.2f} -> {r['dev_clean']['reranked_wer']:.2f}"),
        ("WER dev-other (1-best -> reranked)", "nbest",
         lambda r: f"{r['dev_other']['one_best_wer']:.2f} -> {r['dev_other']['reranked_wer']:.2f}"),
    ]
    print("| model | " + " | ".join(name for name, _, _ in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    tasks = {task for _, task, _ in columns}
    stems = [p.stem.rsplit("-", 1) for p in folder.glob("*-*.json")]
    names = sorted({name for name, task in stems if task in tasks}, key=lambda n: ["tta", "bert", "gpt"].index(n)
                   if n in ("tta", "bert", "gpt") else 9)
    for fam in names:
        print(f"| {fam} | " + " | ".join(cell(folder / f"{fam}-{task}.json", pick) for _, task, pick in columns) + " |")


if __name__ == "__main__":
    main()
