"""Pictures of masks and loss curves (matplotlib, no screen needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from .masks import family_mask, mask_pictures, materialize, random_rank  # noqa: E402


def example_mask(family: str, length: int, padding: int = 0, seed: int = 0) -> torch.Tensor:
    """The (length x length) mask a family uses on one sentence, with `padding` padded positions at the end."""
    if length < 1:
        raise ValueError(f"--length must be a positive integer, got {length}")
    if not 0 <= padding < length:
        raise ValueError(f"--padding must be in [0, {length - 1}] for length {length}, got {padding}")
    real = length - padding
    attn = torch.zeros(1, length, dtype=torch.long)
    attn[0, :real] = 1
    seg = torch.zeros(1, length, dtype=torch.long)
    seg[0, (real + 1) // 2:] = 1
    rank = random_rank(torch.tensor([real]), length, generator=torch.Generator().manual_seed(seed))
    return materialize(family_mask(family, attn, segment_ids=seg, rank=rank), 1, length)[0, 0]


def draw_masks(families: list[str], length: int, out: str | Path, padding: int = 0) -> Path:
    cols = min(3, len(families))
    rows = -(-len(families) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.5 * rows), squeeze=False)
    for ax in axes.flat[len(families):]:
        ax.axis("off")
    titles = {name: picture.title for name, picture in mask_pictures().items()}
    for ax, name in zip(axes.flat, families, strict=False):
        mask = example_mask(name, length, padding)
        ax.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1.25)
        ax.set_title(titles[name], fontsize=9)
        ax.set_xlabel("key (may attend to)")
        ax.set_ylabel("query")
        ax.set_xticks(range(length))
        ax.set_yticks(range(length))
        ax.tick_params(labelsize=6)
        for i in range(length):
            for j in range(length):
                if mask[i, j]:
                    ax.text(j, i, "•", ha="center", va="center", fontsize=6, color="white")
    fig.suptitle("maskplay masks: blue = may attend" + (f" ({padding} padded positions)" if padding else ""))
    return save_figure(fig, out)


def save_figure(fig: plt.Figure, out: str | Path) -> Path:
    """Lay out, write (creating the folder) and close a figure; returns the path written."""
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
