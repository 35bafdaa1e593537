"""The curves of benchmarks/time_to_quality.py results as a Markdown table, one row per recipe: its steps, training
tokens and trainer's held-out loss at the end, and BLiMP-dev at every point.

    python scripts/ttq_table.py results/time-to-quality/equal-12min.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def table(results: list[dict]) -> str:
    minutes = sorted({p["minutes"] for r in results for c in r["curves"].values() for p in c})
    head = ["recipe", "steps", "tokens", "held-out loss"] + [f"BLiMP @ {m:g} min" for m in minutes]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        for name, curve in result["curves"].items():
            last = curve[-1]
            at = {p["minutes"]: f"{p['blimp_macro']:.1f}" for p in curve}
            loss = last.get("eval_loss")
            tokens = last.get("tokens")
            cells = [name, f"{last['step']:,}", "" if tokens is None else f"{tokens / 1e6:.2f} M",
                     "" if loss is None else f"{loss:.3f}"] + [at.get(m, "") for m in minutes]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args()
    print(table([json.loads(path.read_text()) for path in args.results]))


if __name__ == "__main__":
    main()
