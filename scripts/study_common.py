"""What scripts/compare.py and its report (scripts/compare_report.py) share: the families compared and how each
family's best learning rate is chosen. Imports no other script, so the two import it without a circle."""

from __future__ import annotations

FAMILIES = ("tta", "bert", "gpt", "electra", "xlnet", "unilm")


def best_lrs(records: list[dict]) -> dict[str, float]:
    """Each family's learning rate with the lowest held-out loss (its own objective) on the grid's seed (the
    lowest seed the family has): later seeds, run at the chosen rate only, must not move the choice."""
    grid_seed = {}
    for r in records:
        grid_seed[r["family"]] = min(grid_seed.get(r["family"], r["seed"]), r["seed"])
    best: dict[str, tuple[float, float]] = {}
    for r in records:
        if r["seed"] != grid_seed[r["family"]]:
            continue
        if r["family"] not in best or r["heldout_loss"] < best[r["family"]][1]:
            best[r["family"]] = (r["lr"], r["heldout_loss"])
    return {family: lr for family, (lr, _) in best.items()}
