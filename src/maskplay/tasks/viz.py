"""Pictures of masks and loss curves (matplotlib, no screen needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from ..nn.masks import family_mask, mask_pictures, materialize, random_rank  # noqa: E402


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


def draw_blimp(models: dict[str, dict[str, float]], references: dict[str, dict[str, float]] | None,
               out: str | Path, note: str = "") -> Path:
    """BLiMP accuracy % by phenomenon: a group of horizontal bars per phenomenon (the order of the first model's,
    then any others), one colour per model; each reference model's accuracy on the same phenomenon as a short
    vertical line across the group, chance (50) as a dotted line. `note` goes under the title."""
    rows: list[str] = []
    for accuracies in models.values():
        rows.extend(name for name in accuracies if name not in rows)
    rows = rows[::-1]  # the first row at the top
    n = len(models)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10.5, 1.2 + 0.2 * len(rows) * max(n, 2)))
    colours = plt.get_cmap("tab10").colors
    for k, (label, accuracies) in enumerate(models.items()):
        ys = [i + 0.4 - height * (k + 0.5) for i, name in enumerate(rows) if name in accuracies]
        values = [accuracies[name] for name in rows if name in accuracies]
        ax.barh(ys, values, height=height * 0.9, color=colours[k % len(colours)], label=label)
        for y, v in zip(ys, values, strict=True):
            ax.text(v + 0.5, y, f"{v:.1f}", va="center", fontsize=6)
    styles = [(0, (1, 1)), (0, (4, 1.5)), (0, (6, 1.5, 1.5, 1.5)), "-"]
    tones = ["#8c564b", "#9467bd", "#7f7f7f", "#000000"]  # tab10's brown, purple, grey and black: not a model's
    for k, (model, accuracies) in enumerate((references or {}).items()):
        for i, name in enumerate(rows):
            if name in accuracies:
                ax.plot([accuracies[name]] * 2, [i - 0.46, i + 0.46], linestyle=styles[k % 4],
                        color=tones[k % 4], linewidth=2, label=model)
    ax.axvline(50, color="0.75", linestyle=":", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([name.replace("_", " ") for name in rows], fontsize=8)
    for tick, name in zip(ax.get_yticklabels(), rows, strict=True):
        if name == "macro mean":
            tick.set_fontweight("bold")
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(0, 105)
    ax.set_xlabel("accuracy % (good sentence has the higher log p; chance 50, dotted)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("BLiMP by phenomenon" + (" (lines: the BLiMP paper's models on the same paradigms)" if references
                                          else "") + (f"\n{note}" if note else ""), fontsize=10)
    return save_figure(fig, out)
