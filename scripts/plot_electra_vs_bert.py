"""Plot an ELECTRA run against a BERT run of the same wall-clock: held-out MLM loss (BERT's, and ELECTRA's
generator's) and the discriminator's held-out loss and accuracy, against training time.

    python scripts/plot_electra_vs_bert.py runs/cmp2/bert runs/cmp2/electra --out docs/electra_vs_bert.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def evals(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "eval_loss" in r]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bert")
    p.add_argument("electra")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    bert, electra = evals(Path(args.bert)), evals(Path(args.electra))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([r["elapsed_s"] / 60 for r in bert], [r["eval_loss"] for r in bert], label="BERT-MLM (hidden 256)")
    left.plot([r["elapsed_s"] / 60 for r in electra], [r["eval_gen_loss"] for r in electra],
              label="ELECTRA generator MLM (hidden 64)")
    left.set(xlabel="training minutes", ylabel="held-out MLM loss (nats)", title="masked-token loss")
    left.legend()
    right.plot([r["elapsed_s"] / 60 for r in electra], [r["eval_disc_loss"] for r in electra], color="C2",
               label="discriminator BCE")
    right.set(xlabel="training minutes", ylabel="held-out BCE (nats)", title="ELECTRA discriminator")
    twin = right.twinx()
    twin.plot([r["elapsed_s"] / 60 for r in electra], [100 * r["eval_disc_accuracy"] for r in electra], color="C3",
              label="accuracy %")
    twin.plot([r["elapsed_s"] / 60 for r in electra], [100 * (1 - r["eval_replaced"]) for r in electra], color="C3",
              linestyle=":", label="all-'original' accuracy %")
    twin.set_ylabel("accuracy %")
    lines = right.get_lines() + twin.get_lines()
    right.legend(lines, [line.get_label() for line in lines], loc="center right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
