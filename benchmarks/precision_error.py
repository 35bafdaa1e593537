"""How far reduced-precision scoring moves per-token log-probabilities from fp32, and how fast it is, for
trained models on real sentences (WikiText-103 valid), in one run.

    python benchmarks/precision_error.py tta-mini-wiki runs/cmp/bert/final runs/cmp/gpt/final
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

from maskplay.tasks.score import Scorer  # noqa: E402

WIKITEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-103" / "wiki.valid.tokens"


def sentences(count: int) -> list[str]:
    lines = [ln.strip() for ln in WIKITEXT.read_text(encoding="utf-8").splitlines()]
    return [ln[:400] for ln in lines if len(ln.split()) > 8 and not ln.startswith("=")][:count]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="model directories or bundled names")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--precisions", nargs="+", default=["bf16", "int8"])
    args = p.parse_args()
    texts = sentences(args.sentences)
    print(machine())
    print(f"{len(texts)} WikiText-103 valid paragraphs (first 400 characters), windows where longer than the model")
    print(f"{'model':<28}{'precision':<10}{'mean |d log p|':>16}{'max':>8}{'sentences/s':>13}{'speed vs fp32':>15}")
    for model in args.models:
        runs = {}
        for precision in ["fp32", *args.precisions]:
            scorer = Scorer.from_pretrained(model, precision=precision, overflow="window")
            scorer.score(texts[:4])  # warm-up
            start = time.perf_counter()
            runs[precision] = (scorer.score(texts), time.perf_counter() - start)
        ref, ref_time = runs["fp32"]
        for precision, (got, seconds) in runs.items():
            d = np.concatenate([np.abs(np.subtract(a.token_log_probs, b.token_log_probs))
                                for a, b in zip(ref, got, strict=True)])
            print(f"{model:<28}{precision:<10}{d.mean():>16.4f}{d.max():>8.3f}{len(texts) / seconds:>13.1f}"
                  f"{ref_time / seconds:>14.2f}x")


if __name__ == "__main__":
    main()
