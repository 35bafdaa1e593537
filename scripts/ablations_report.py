"""The ablation study's table and plot from results/ablations/*.json (scripts/ablations.py summarize).

Per family and row: the mean over seeds and the spread (max - min) of each metric, the difference to the
family's default row, and whether that difference is larger than both rows' seed spreads ("real": the seed
ranges do not overlap)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

METRICS = (  # key, label, higher is better
    ("heldout_loss", "held-out loss", False),
    ("stsb_dev_spearman", "STS-B dev Spearman", True),
    ("rwse_top1", "RWSE top-1 (natural + noun)", True),
    ("rwse_pair", "RWSE pair acc. (natural + noun)", True),
)


def flat(record: dict) -> dict[str, float]:
    rw = record["rwse"]
    files = [f for f in ("en_natural_train", "en_artificial_noun") if f in rw]
    items = sum(rw[f]["items"] for f in files)
    return {
        "heldout_loss": record["heldout_loss"],
        "stsb_dev_spearman": record["stsb_dev_spearman"],
        "rwse_top1": sum(rw[f]["top1"] * rw[f]["items"] for f in files) / items,
        "rwse_pair": sum(rw[f]["pair_accuracy"] * rw[f]["items"] for f in files) / items,
        "tokens_per_s": record["tokens_per_s"],
        "parameters": record["parameters"],
    }


def group(records: list[dict]) -> dict[tuple[str, str], list[dict[str, float]]]:
    out: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for r in records:
        out[(r["family"], r["row"])].append(flat(r))
    return out


def stats(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (max(values) - min(values)) if len(values) > 1 else float("nan")


def real(a: list[float], b: list[float]) -> bool:
    """Two rows differ for real when their seed ranges do not overlap (needs two seeds each)."""
    if len(a) < 2 or len(b) < 2:
        return False
    return max(a) < min(b) or max(b) < min(a)


def switch_speed(path: Path) -> dict[tuple[str, str], float]:
    """(family, row) -> tokens/s relative to the default, from benchmarks/train_speed.py --switch (cases
    interleaved in one run, so the machine's load hits them alike; the training logs' tokens/s do not)."""
    if not path.exists():
        return {}
    rows = {r["case"]: r["tokens_per_s"] for r in json.loads(path.read_text())["rows"]}
    out = {}
    for case, speed in rows.items():
        family, _precision, *switch = case.split(" ")
        base = rows.get(f"{family} {_precision}")
        if switch and base:
            out[(family, " ".join(switch))] = speed / base
    return out


def write_report(records: list[dict], table: Path, plot: Path, row_order: list[str]) -> None:
    """row_order: the row names in the order scripts/ablations.py defines them (its ROWS), the table's order."""
    groups = group(records)
    speed = switch_speed(table.parent / "switch_speed.json")
    families = sorted({f for f, _ in groups}, key=lambda f: ("tta", "bert").index(f) if f in ("tta", "bert") else 9)
    rows_order = list(dict.fromkeys(r["row"] for r in sorted(records, key=lambda r: _row_rank(r["row"], row_order))))
    lines = []
    for family in families:
        base = groups.get((family, "default"))
        lines.append(f"### {family}\n")
        lines.append("| row | seeds | params (M) | " + " | ".join(f"{label}" for _, label, _ in METRICS)
                     + " | training speed vs default |")
        lines.append("|---|---|---|" + "---|" * len(METRICS) + "---|")
        for row in rows_order:
            runs = groups.get((family, row))
            if not runs or "depth" in row:
                continue
            cells = [row, str(len(runs)), f"{runs[0]['parameters'] / 1e6:.2f}"]
            for key, _, higher in METRICS:
                vals = [r[key] for r in runs]
                mean, spread = stats(vals)
                cell = f"{mean:.2f}" if key == "heldout_loss" else f"{mean:.1f}"
                if spread == spread:
                    cell += f" ±{spread / 2:.2f}" if key == "heldout_loss" else f" ±{spread / 2:.1f}"
                if base and row != "default":
                    bvals = [r[key] for r in base]
                    delta = mean - statistics.fmean(bvals)
                    better = (delta > 0) == higher
                    cell += f" ({delta:+.2f})" if key == "heldout_loss" else f" ({delta:+.1f})"
                    if real(vals, bvals):
                        cell = f"**{cell}**" + (" ↑" if better else " ↓")
                cells.append(cell)
            ratio = 1.0 if row == "default" else speed.get((family, row))
            cells.append(f"{ratio:.2f}x" if ratio is not None else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += _depth_table(groups, families)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text("\n".join(lines))
    _plot(groups, families, rows_order, plot)
    _into_doc(Path("docs/results/ablations.md"), "\n".join(lines))


def _into_doc(doc: Path, text: str) -> None:
    """Replace what stands between the table markers of the doc, so the doc shows the JSON's numbers."""
    start, end = "<!-- ablation table: scripts/ablations.py summarize -->", "<!-- end of ablation table -->"
    if not doc.exists() or start not in doc.read_text():
        return
    head, rest = doc.read_text().split(start, 1)
    doc.write_text(head + start + "\n\n" + text + "\n" + end + rest.split(end, 1)[1])


def _depth_table(groups: dict, families: list[str]) -> list[str]:
    """Does T-TA (Shin et al. 2020) keep up with BERT as depth grows: T-TA against BERT at 3, 6 and 12 layers (mini
    width, the same tokens), with rotary positions (depth 3 = the positions=rotary row)."""
    depth_rows = {3: "positions=rotary", 6: "rotary+depth=6", 12: "rotary+depth=12"}
    if not any((f, r) in groups for f in families for r in ("rotary+depth=6", "rotary+depth=12")):
        return []
    lines = ["### depth (rotary positions)\n", "| family | layers | seeds | params (M) | "
             + " | ".join(label for _, label, _ in METRICS) + " |", "|---|---|---|---|" + "---|" * len(METRICS)]
    for family in families:
        for depth, row in depth_rows.items():
            runs = groups.get((family, row))
            if not runs:
                continue
            cells = [family, str(depth), str(len(runs)), f"{runs[0]['parameters'] / 1e6:.2f}"]
            for key, _, _ in METRICS:
                mean, spread = stats([r[key] for r in runs])
                cells.append((f"{mean:.2f}" if key == "heldout_loss" else f"{mean:.1f}")
                             + (f" ±{spread / 2:.2f}" if spread == spread else ""))
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _row_rank(row: str, names: list[str]) -> tuple[int, str]:
    return (names.index(row) if row in names else len(names), row)


def _plot(groups: dict, families: list[str], rows_order: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("heldout_loss", "held-out loss - default (lower is better)"),
              ("stsb_dev_spearman", "STS-B dev Spearman - default"))
    fig, axes = plt.subplots(1, len(panels) * len(families), figsize=(5 * len(panels) * len(families), 7),
                             sharey=True, squeeze=False)
    rows = [r for r in rows_order if r != "default" and "depth" not in r]
    for fi, family in enumerate(families):
        base = groups.get((family, "default"))
        if not base:
            continue
        for pi, (key, title) in enumerate(panels):
            ax = axes[0][fi * len(panels) + pi]
            b = statistics.fmean(r[key] for r in base)
            bspread = (max(r[key] for r in base) - min(r[key] for r in base)) / 2
            for y, row in enumerate(rows):
                runs = groups.get((family, row))
                if not runs:
                    continue
                vals = [r[key] - b for r in runs]
                mean = statistics.fmean(vals)
                ax.barh(y, mean, color="tab:blue" if real([r[key] for r in runs], [r[key] for r in base])
                        else "lightgray")
                ax.plot(vals, [y] * len(vals), "k.", markersize=4)
            ax.axvspan(-bspread, bspread, color="tab:orange", alpha=0.2, lw=0)
            ax.axvline(0, color="k", lw=0.8)
            ax.set_title(f"{family}: {title}", fontsize=9)
            ax.set_yticks(range(len(rows)), rows, fontsize=8)
            ax.invert_yaxis()
    fig.suptitle("Ablations at the mini size, equal tokens; dots = seeds, orange band = default's seed range, "
                 "blue = seed ranges do not overlap", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
