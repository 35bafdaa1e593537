"""Every training config the repository ships (configs/**/*.toml, the files RESULTS.md and the README run) loads and
passes the trainer's checks: a config that a refactor left stale fails here, not in a user's hour-long run."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from maskplay.train import load_train_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").rglob("*.toml"))


def test_configs_are_found():
    assert len(CONFIGS) >= 20


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_shipped_config_loads_and_validates(path: Path):
    config = load_train_config(path).validate()
    written = tomllib.loads(path.read_text(encoding="utf-8"))
    assert config.model.family == written.get("model", {}).get("family", config.model.family)
    assert config.optim.lr == written.get("optim", {}).get("lr", config.optim.lr)
