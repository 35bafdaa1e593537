"""The table and plot of scripts/compare.py: every family at its best learning rate (mean over seeds, ± half the
seed range), the second stages (CoLA fine-tuning, SimCSE), the learning-rate grid, and the training loss of every
family against tokens, FLOPs and wall-clock."""

from __future__ import annotations

import statistics
from pathlib import Path

from study_common import FAMILIES, best_lrs

NAN = float("nan")
START, END = "<!-- compare table: scripts/compare.py summarize -->", "<!-- end of compare table -->"


def markers(tier: str) -> tuple[str, str]:
    """The doc markers of one tier's table: the default tier's as they were, another tier's named after it."""
    if tier in ("", "compare"):
        return START, END
    return START.replace("summarize", f"--tier {tier.removeprefix('compare-')} summarize"), END.replace(
        "table", f"table ({tier})")
# (key or function, label, decimals)
COLUMNS = (
    (lambda r: r["stsb_dev_spearman"], "STS-B dev Spearman", 1),
    (lambda r: r["sick_spearman"], "SICK Spearman", 1),
    (lambda r: r.get("stsb_sif_spearman", float("nan")), "STS-B dev, SIF static", 1),
    (lambda r: r.get("sick_sif_spearman", float("nan")), "SICK, SIF static", 1),
    (lambda r: r["rwse"]["en_natural_train"]["top1"], "RWSE natural top-1", 1),
    (lambda r: r["rwse"]["en_natural_train"]["pair_accuracy"], "RWSE natural pair acc.", 1),
    (lambda r: r["cola_in_domain_mcc"], "CoLA in-domain MCC (zero-shot)", 1),
    (lambda r: r.get("cola_finetuned", {}).get("best_mcc", NAN), "CoLA MCC, fine-tuned (best dev eval.)", 1),
    (lambda r: 100 * r["nbest"]["dev_other"]["relative_change"], "N-best dev-other WER change %", 1),
    (lambda r: r["heldout_loss"], "held-out loss (own objective)", 2),
    (lambda r: r["train_flops"] / 1e12, "training TFLOPs", 1),
    (lambda r: r["wall_s"] / 60, "training minutes", 1),
)
# the second stages on each best-lr run (scripts/compare.py finetune / simcse)
STAGE_COLUMNS = (
    (lambda r: r["cola_in_domain_mcc"], "CoLA in-domain MCC, zero-shot", 1),
    (lambda r: r.get("cola_finetuned", {}).get("best_mcc", NAN), "CoLA MCC fine-tuned: best dev evaluation", 1),
    (lambda r: r.get("cola_finetuned", {}).get("last_mcc", NAN), "fine-tuned: last evaluation", 1),
    (lambda r: r["stsb_dev_spearman"], "STS-B dev, mean-pooled", 1),
    (lambda r: r.get("simcse", {}).get("stsb_dev_spearman", NAN), "STS-B dev after SimCSE", 1),
    (lambda r: r["sick_spearman"], "SICK, mean-pooled", 1),
    (lambda r: r.get("simcse", {}).get("sick_spearman", NAN), "SICK after SimCSE", 1),
)


def cell(values: list[float], decimals: int) -> str:
    values = [v for v in values if v == v]  # a stage not run on a run (NaN) is left out
    if not values:
        return "-"
    mean = statistics.fmean(values)
    text = f"{mean:.{decimals}f}"
    if len(values) > 1:
        text += f" ±{(max(values) - min(values)) / 2:.{decimals}f}"
    return text


def write_report(records: list[dict], table: Path, plot: Path, untrained: list[dict] | None = None,
                 tier: str = "") -> None:
    if not records:
        raise SystemExit("no results in results/compare/ yet: run `python scripts/compare.py run` first")
    best = best_lrs(records)
    families = [f for f in FAMILIES if f in best]
    lines = ["| family | best lr | seeds | params (M) | tokens (M) | " + " | ".join(c[1] for c in COLUMNS) + " |",
             "|---|---|---|---|---|" + "---|" * len(COLUMNS)]
    for family in families:
        runs = [r for r in records if r["family"] == family and r["lr"] == best[family]]
        cells = [family, f"{best[family]:g}", str(len(runs)), f"{runs[0]['parameters'] / 1e6:.2f}",
                 f"{statistics.fmean(r['tokens'] for r in runs) / 1e6:.2f}"]
        cells += [cell([get(r) for r in runs], d) for get, _, d in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    if any("cola_finetuned" in r or "simcse" in r for r in records):
        lines += ["", "Second stages on the same runs (every seed at the best lr; section 6's CoLA fine-tuning recipe, "
                  "section 7's SimCSE recipe for 300 steps of 64 Wikipedia sentences):", "",
                  "| family | seeds | " + " | ".join(c[1] for c in STAGE_COLUMNS) + " |",
                  "|---|---|" + "---|" * len(STAGE_COLUMNS)]
        for family in families:
            runs = [r for r in records if r["family"] == family and r["lr"] == best[family]]
            cells = [family, str(len(runs))] + [cell([get(r) for r in runs], d) for get, _, d in STAGE_COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
    lrs = sorted({r["lr"] for r in records})
    lines += ["", "Learning-rate grid: held-out loss (each family's own objective), seed 0; in bold the rate chosen "
              "(then run with a second seed)",
              "", "| family | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |", "|---|" + "---|" * len(lrs)]
    for family in families:
        row = [family]
        for lr in lrs:
            losses = [r["heldout_loss"] for r in records if r["family"] == family and r["lr"] == lr and r["seed"] == 0]
            text = f"{statistics.fmean(losses):.3f}" if losses else "-"
            row.append(f"**{text}**" if lr == best[family] else text)
        lines.append("| " + " | ".join(row) + " |")
    if untrained:
        lines += ["", "The same families untrained (random initialisation, mean-pooled; mean over seeds):", "",
                  "| family | seeds | STS-B dev Spearman | SICK Spearman |", "|---|---|---|---|"]
        for family in [f for f in FAMILIES if any(u["family"] == f for u in untrained)]:
            runs = [u for u in untrained if u["family"] == family]
            lines.append(f"| {family} | {len(runs)} | {cell([u['stsb_dev_spearman'] for u in runs], 1)} | "
                         f"{cell([u['sick_spearman'] for u in runs], 1)} |")
    text = "\n".join(lines) + "\n"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(text)
    _into_doc(Path("docs/results/families-on-tasks.md"), text, *markers(tier))
    _plot(records, best, families, plot)


def _into_doc(doc: Path, text: str, start: str = START, end: str = END) -> None:
    """Replace what stands between the table markers, so the doc shows the JSON's numbers."""
    if not doc.exists() or start not in doc.read_text():
        return
    head, rest = doc.read_text().split(start, 1)
    doc.write_text(head + start + "\n\n" + text + "\n" + end + rest.split(end, 1)[1])


def _plot(records: list[dict], best: dict[str, float], families: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=True)
    for k, family in enumerate(families):
        runs = sorted((r for r in records if r["family"] == family and r["lr"] == best[family]),
                      key=lambda r: r["seed"])
        for j, r in enumerate(runs):
            tokens = [p["tokens"] / 1e6 for p in r["curve"]]
            minutes = [p["elapsed_s"] / 60 for p in r["curve"]]
            loss = [p["loss"] for p in r["curve"]]
            style = {"color": f"C{k}", "lw": 1.2, "alpha": 1.0 if j == 0 else 0.5,
                     "label": f"{family} (lr {best[family]:g})" if j == 0 else None}
            flops = [t * r["train_flops"] / r["tokens"] / 1e6 for t in tokens]  # TFLOPs: per-token cost x tokens
            axes[0].plot(tokens, loss, **style)
            axes[1].plot(flops, loss, **style)
            axes[2].plot(minutes, loss, **style)
    axes[0].set_xlabel("training tokens (M)")
    axes[1].set_xlabel("training TFLOPs (matmuls, maskplay.runtime.flops)")
    axes[2].set_xlabel("wall-clock minutes (one thread of a shared 2-core CPU)")
    axes[0].set_ylabel("training loss (each family's own objective)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle("Every family at equal tokens (mini size, Wikipedia + Gutenberg); lighter lines: other seeds",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
