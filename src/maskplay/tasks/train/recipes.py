"""The training recipes shipped with the package (src/maskplay/configs, `configs/` in a clone), addressable by
name: `maskplay pretrain --config mini-tta` reads configs/mini-tta.toml wherever maskplay is installed."""

from __future__ import annotations

from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "configs"


def shipped_recipes() -> dict[str, Path]:
    """name -> file: the path under configs/ without .toml (`mini-tta`, `ttq/hour-tta`), sorted."""
    if not RECIPES.is_dir():
        return {}
    return {path.relative_to(RECIPES).with_suffix("").as_posix(): path for path in sorted(RECIPES.rglob("*.toml"))}


def resolve_recipe(given: str | Path) -> Path:
    """`given` as a path when one exists there; else a shipped recipe of that name (`mini-tta` or
    `mini-tta.toml`); else the path as given, which the caller reports as not found (recipe_names says what
    there is)."""
    path = Path(given)
    if path.exists():
        return path
    name = path.as_posix().removesuffix(".toml")
    return shipped_recipes().get(name, path)


def recipe_names() -> str:
    """The shipped recipes' names, for an error message."""
    return ", ".join(shipped_recipes()) or "(none installed)"
