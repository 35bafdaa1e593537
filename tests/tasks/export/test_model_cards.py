"""Every bundled model has a model card whose dev numbers are the ones in the committed results files: a card
that drifts from its results (or names a result that does not exist) fails here."""

import json
import re
from pathlib import Path

import pytest

from maskplay.runtime.model_dir import BUNDLED_MODELS

ROOT = Path(__file__).resolve().parents[3]
SECTIONS = ("## Model", "## Data", "## Budget", "## Dev results", "## Intended use", "## Limits")
ROW = re.compile(r"^\| ([^|]+) \| ([-0-9.]+) \| (results/\S+\.json): (\S+) \|$")


def card(name: str) -> str:
    path = BUNDLED_MODELS[name] / "README.md"
    assert path.exists(), f"bundled model {name} has no model card ({path})"
    return path.read_text()


@pytest.mark.parametrize("name", sorted(BUNDLED_MODELS))
def test_card_has_every_section(name):
    text = card(name)
    missing = [s for s in SECTIONS if s not in text]
    assert not missing, f"{name}'s model card lacks {missing}"


@pytest.mark.parametrize("name", sorted(BUNDLED_MODELS))
def test_card_numbers_match_the_results_files(name):
    rows = [ROW.match(line) for line in card(name).splitlines()]
    rows = [r for r in rows if r]
    assert len(rows) >= 3, f"{name}'s card cites fewer than 3 results files"
    for row in rows:
        label, value, file, key = row.groups()
        data = json.loads((ROOT / file).read_text())
        for part in key.split("."):
            data = data[part]
        decimals = len(value.split(".")[1]) if "." in value else 0
        assert f"{data:.{decimals}f}" == value, f"{name}: '{label}' says {value}, {file} has {data}"
