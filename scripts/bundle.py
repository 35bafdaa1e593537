"""Export a trained run as a bundled model: fp16 weights, config.json, the tokenizer and the training corpus's piece
counts (for `--pooling sif`) in src/maskplay/assets/NAME, checked against the bundled models' 30 MB budget.

    python scripts/bundle.py runs/bundle/tta-mini-wiki/final src/maskplay/assets/tta-mini-wiki \
        --piece-counts runs/data-wiki16k

The model card (README.md in the asset directory) is written by hand; tests/tasks/export/test_model_cards.py checks
its numbers.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import torch

from maskplay import MaskplayModel
from maskplay.data.tokenizer import load_tokenizer
from maskplay.tasks.score.embed import PIECE_COUNTS, read_piece_counts

LIMIT_MB = 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model directory (a run's final/)")
    parser.add_argument("out", help="the asset directory to write (its README.md is kept)")
    parser.add_argument("--piece-counts", required=True, metavar="PREPARED_DIR",
                        help="the prepared corpus the model was trained on (checked to share its tokenizer)")
    args = parser.parse_args()
    model = MaskplayModel.from_pretrained(args.model)
    tokenizer = load_tokenizer(Path(args.model))
    counts = read_piece_counts(args.piece_counts, model.config.vocab_size, tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.iterdir():  # everything but the model card is rewritten
        if stale.name != "README.md":
            stale.unlink()
    model.save_pretrained(out, dtype=torch.float16)
    shutil.copy(Path(args.model) / "tokenizer.json", out / "tokenizer.json")
    np.save(out / PIECE_COUNTS, counts.astype(np.int64), allow_pickle=False)
    size = sum(p.stat().st_size for p in out.iterdir()) / 2**20
    if size > LIMIT_MB:
        raise SystemExit(f"{out}: {size:.1f} MB, over the {LIMIT_MB:.0f} MB a bundled model may take")
    print(f"wrote {out}: {size:.1f} MB ({', '.join(sorted(p.name for p in out.iterdir()))})")


if __name__ == "__main__":
    main()
