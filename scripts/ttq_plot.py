"""Several benchmarks/time_to_quality.py results files drawn on one plot (BLiMP-dev against training minutes), as in
docs/results/time-to-quality.md:

    python scripts/ttq_plot.py results/time-to-quality/hour-gpt.json \
        results/time-to-quality/hour-tta.json --out docs/results/ttq-hour.png \
        --title "60-minute schedules"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from time_to_quality import plot  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="BLiMP-dev against minutes of one core")
    args = parser.parse_args()
    curves: dict = {}
    for path in args.results:
        if not path.is_file():
            parser.error(f"{path}: no such results file")
        curves.update(json.loads(path.read_text())["curves"])
    plot(curves, args.out, args.title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
