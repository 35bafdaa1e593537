"""The held-out loss of trained models on a whole prepared split, in fp32 (docs/results/bundled-models.md): each
family's own training objective, its corruption drawn with a fixed seed.

    python scripts/heldout_loss.py tta-mini-wiki runs/bundle2/tta-rotary/ckpt-003560 --split runs/data-wiki16k/valid
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from maskplay import MaskplayModel
from maskplay.data.dataset import TokenDataset, pad_batch


def load(model_dir: str) -> MaskplayModel:
    """A model directory, a bundled name, or a training checkpoint (ckpt-N: model_config.json + weights)."""
    ckpt = Path(model_dir)
    if (ckpt / "model_config.json").is_file():
        from maskplay.config import ModelConfig, from_dict
        from maskplay.families import build_model

        config = from_dict(ModelConfig, json.loads((ckpt / "model_config.json").read_text()))
        model = build_model(config)
        model.load_weights(ckpt / "model.safetensors")
        return model
    return MaskplayModel.from_pretrained(model_dir)


def held_out_loss(model_dir: str, split: str, progress: float | None = None) -> tuple[float, int]:
    model, data = load(model_dir).float().eval(), TokenDataset(split)
    if progress is not None:  # a family whose objective follows training (GPT-BERT's masking rate) at that point
        model.set_training_progress(progress)
    total = count = 0.0
    with torch.no_grad():
        for i in range(0, len(data), 256):
            ids, mask = pad_batch([data[j] for j in range(i, min(i + 256, len(data)))], model.config.pad_token_id)
            batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
            n = model.num_targets(batch)
            total, count = total + model(**batch).loss.item() * n, count + n
    return total / count, int(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--split", default="runs/data-wiki16k/valid")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    parser.add_argument("--progress", type=float, default=None,
                        help="the training progress (0-1) the objective is taken at, for families whose objective "
                             "changes over training (GPT-BERT's masking rate: 1.0 = mask_end); default: the family's start")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for m in args.models:
        loss, targets = held_out_loss(m, args.split, args.progress)
        rows.append({"model": m, "split": args.split, "loss": loss, "targets": targets, "progress": args.progress})
        print(f"{m}: {loss:.4f} nats over {targets:,} targets")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
