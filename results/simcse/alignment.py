"""Alignment and uniformity (Wang & Isola 2020; the SimCSE paper's analysis) of the unit-normalised sentence
embeddings on STS-B dev, before and after SimCSE: alignment = mean squared distance of the pairs with gold >= 4
(lower: similar sentences closer), uniformity = log mean exp(-2 squared distance) over all pairs of sentences
(lower: spread more evenly), and the mean cosine of random sentence pairs (near 1: all embeddings parallel).

    OMP_NUM_THREADS=1 python results/simcse/alignment.py   # writes results/simcse/alignment.json
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from maskplay.eval.common import data_root
from maskplay.eval.sts import load_stsb
from maskplay.score.embed import Embedder

MODELS = {"tta before": ("tta-mini-wiki", {}), "tta after": ("runs/simcse/tta", {}),
          "bert before": ("runs/cmp2/bert/final", {}), "bert after": ("runs/simcse/bert", {}),
          "electra before": ("runs/cmp2/electra/final", {}), "electra after": ("runs/simcse/electra", {})}


def main() -> None:
    torch.set_num_threads(1)
    pairs = load_stsb(data_root() / "stsbenchmark" / "sts-dev.csv")
    unique = sorted({p.a for p in pairs} | {p.b for p in pairs})
    index = {s: k for k, s in enumerate(unique)}
    positive = [p for p in pairs if p.gold >= 4.0]
    rng = np.random.default_rng(0)
    i, j = rng.integers(0, len(unique), 5000), rng.integers(0, len(unique), 5000)
    i, j = i[i != j], j[i != j]
    out = {}
    for name, (model, options) in MODELS.items():
        z = Embedder.from_pretrained(model, precision="fp32").encode(unique, normalize=True, overflow="truncate",
                                                                     **options)
        a, b = z[[index[p.a] for p in positive]], z[[index[p.b] for p in positive]]
        squared = torch.pdist(torch.from_numpy(z)).pow(2)
        out[name] = {"alignment": round(float(((a - b) ** 2).sum(1).mean()), 4),
                     "uniformity": round(float(squared.mul(-2).exp().mean().log()), 4),
                     "mean_cosine_random_pairs": round(float((z[i] * z[j]).sum(1).mean()), 4)}
        print(name, out[name], flush=True)
    out["_settings"] = {"data": "stsbenchmark/sts-dev.csv", "positive_pairs": len(positive), "sentences": len(unique),
                        "pooling": "mean", "random_pairs": int(len(i))}
    (Path(__file__).resolve().parent / "alignment.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
